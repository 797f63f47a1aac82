"""`mcts-mesh train router`: the Connect Four meta-controller, trained from the orchestrator's
routing log.

Data. The orchestrator appends one JSON line per request to its routing log
(`services.orchestrator.routing.log`); a labels file (JSON lines `{"thread_id", "route", "kept"}`)
says, for the requests of a labelled workload, which route (`routing.CONNECT_FOUR_ROUTES`: an
agent set, the checker perhaps on its quick budget) the request was sent on and whether the
returned column kept the position's game-theoretic outcome. Requests are joined to labels on
their thread id and grouped by position: for every position the routes that were run in its
first round with whether each kept the outcome and its latency.

Objective. For each position and each route tried on it,

    utility(route) = kept share(route) - latency_weight * mean latency(route) in seconds,

so with the default weight 0.3 per second, a route is worth 100 ms more only when it keeps the
outcome at least 3% more often. The router sees only the routing features, not which positions a
route fails on, so it is trained to maximise the expected utility of its choice,
`sum_r softmax(logits)_r * utility(r)` averaged over positions (every route is tried on every
position, so this is exact, not a sampled policy gradient), with a small entropy bonus
(`ENTROPY_BONUS`): a per-position argmax target would teach it the route that happened to win on
each position (the network alone, where its move was right) and lose the outcome wherever the
network is wrong. Untried routes of a position get the utility of its worst tried route.

Where the time goes (the rules on 180 positions of the test split, `bench/router.py`): the
checker's full solves at 10-15 plies (100-300 ms each, 2,000,000 nodes; at 10-11 plies about
half of them end without a result and the search then doubles its simulations twice because the
search and the network disagree), and below 10 plies that doubling alone. The routes that cut it:
the quick checker, and the sets without the network, which end after one round.

Model. `RouterGRU` over the feature sequence of the first routing state (one step: the iteration
and the plies played are what is known then), `BINS` piecewise-linear bins per feature,
full-batch AdamW. Saved as a checkpoint directory (model.safetensors + config.json) that the
neural service serves under the directory's name.

Generation. `generate` runs the labelled workload: a private mesh (mcts, neural, and two
orchestrators with their routing log on: one with the checker's full budget, one with the quick
budget for the quick-checker routes), positions of the "train" split of Pons' six files, each
sent once per route with `agents` naming its set, every answer judged (`router_workload.Judge`).
"""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from torch.nn import functional as F

from mcts_mesh.client import open_channel
from services.neural.checkpoint import save_checkpoint
from services.neural.models.router_gru import ARCHITECTURE, RouterGRU, RouterGRUConfig
from services.orchestrator.loop.routing import NUM_FEATURES
from services.orchestrator.routing.rules import (
    CONNECT_FOUR_ROUTES,
    DEEP_SEARCH_FACTOR,
    QUICK_CHECKER_MAX_NODES,
    Route,
    route_name,
)
from services.orchestrator.settings import OrchestratorSettings
from training.config import CONFIG_KEY, config_json
from training.router.workload import Judge, Mesh, mixed_positions, solve

ROUTES = tuple(route_name(route) for route in CONNECT_FOUR_ROUTES)


@dataclass
class Example:
    """One position: its first routing state's features and, per route tried, the outcomes.

    Attributes:
        query: the move string.
        features: the first routing state's features, float [10].
        outcomes: route name -> list of (kept, latency_ms).
    """

    query: str
    features: list[float]
    outcomes: dict[str, list[tuple[bool, float]]]

    def utility(self, route: str, latency_weight: float) -> float:
        """Kept share minus `latency_weight` times the mean latency in seconds."""
        rows = self.outcomes[route]
        kept = sum(k for k, _ in rows) / len(rows)
        seconds = sum(ms for _, ms in rows) / len(rows) / 1e3
        return kept - latency_weight * seconds

    def target(self, latency_weight: float) -> int:
        """Index in `ROUTES` of the tried set of highest utility (ties: the earliest)."""
        tried = [i for i, name in enumerate(ROUTES) if name in self.outcomes]
        return max(tried, key=lambda i: (self.utility(ROUTES[i], latency_weight), -i))

    def utilities(self, latency_weight: float) -> list[float]:
        """The utility of every set of `ROUTES`; an untried set gets the worst tried one's."""
        tried = {name: self.utility(name, latency_weight) for name in ROUTES
                 if name in self.outcomes}
        worst = min(tried.values())
        return [tried.get(name, worst) for name in ROUTES]


def read_jsonl(paths: Iterable[Path]) -> Iterable[dict[str, Any]]:
    """The JSON objects of JSON-lines files (and their rotated `.1`, `.2`, ... siblings).

    Raises:
        ValueError: a line that is not a JSON object (names the file and line).
    """
    for path in paths:
        siblings = sorted(path.parent.glob(path.name + ".*"),
                          key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0)
        for file in [*[p for p in siblings if p.suffix[1:].isdigit()], path]:
            if not file.is_file():
                continue
            for number, line in enumerate(file.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{file}:{number}: not JSON ({error})") from error
                if not isinstance(row, dict):
                    raise ValueError(f"{file}:{number}: not a JSON object")
                yield row


def load_examples(logs: Sequence[Path], labels: Sequence[Path]) -> list[Example]:
    """The positions of the Connect Four records of `logs` that have a label in `labels`.

    A record counts when its kind is "connect_four", its thread id has a label, and its first
    route is one of `ROUTES` with ten features.
    Raises:
        ValueError: a malformed line.
    """
    label_rows = [row for row in read_jsonl(labels) if "thread_id" in row and "kept" in row]
    kept_by_thread = {str(row["thread_id"]): bool(row["kept"]) for row in label_rows}
    # The route a request was sent on: the label's, since the log names agents only (a quick
    # checker is logged as "checker"); older labels have none and the log's agents name it.
    route_by_thread = {str(row["thread_id"]): str(row["route"]) for row in label_rows
                       if "route" in row}
    examples: dict[str, Example] = {}
    for row in read_jsonl(logs):
        if row.get("kind") != "connect_four" or row.get("thread_id") not in kept_by_thread:
            continue
        routes = row.get("routes") or []
        if not routes:
            continue
        first = routes[0]
        name = route_by_thread.get(row["thread_id"], "+".join(first.get("agents", [])))
        features = first.get("features", [])
        if name not in ROUTES or len(features) != NUM_FEATURES:
            continue
        example = examples.setdefault(row["query"], Example(row["query"], features, {}))
        example.outcomes.setdefault(name, []).append(
            (kept_by_thread[row["thread_id"]], float(row["latency_ms"])))
    return list(examples.values())


ENTROPY_START = 100.0
"""The entropy bonus starts at this multiple of `ENTROPY_BONUS` and falls geometrically to it over
the first half of the epochs (the second half converges at `ENTROPY_BONUS`). The gradient of the
expected utility on a route's logit is its probability times its advantage, so a route whose
probability reached ~0 early (every position pushed the model to the set best on average) never
comes back; a larger bonus at first keeps every route alive until the per-ply differences are
learned."""

BINS = 8
"""Piecewise-linear bins per feature (`RouterGRUConfig.bins`): 8 bins of about five plies each,
so neighbouring ply counts share their weights. With one bin per ply (42) the choice flipped from
ply to ply between sets a millisecond apart on the train split, which is noise of a few positions
per ply, not a property of the positions."""

ENTROPY_BONUS = 0.0001
"""Weight of the policy's entropy in the loss. The optimum is then softmax(expected utility /
0.0001): a set 0.1% of kept outcomes (or 3 ms) better than the next gets a probability of about
0.95, so sets that differ by a few milliseconds do not split the probability below the threshold,
which would hand those positions back to the rules. Sets that are the same action on a position
still split it (from about 19 plies the quick budget rarely binds, and "checker+neural" and
"checker@quick+neural" share about 0.5 each: the rules decide there)."""


def train(examples: Sequence[Example], latency_weight: float = 0.3, hidden: int = 16,
          epochs: int = 2000, lr: float = 0.02, seed: int = 0) -> tuple[RouterGRU, dict]:
    """Fits a `RouterGRU` to maximise the expected utility of its choice (module docstring).

    Returns:
        The model (eval mode, CPU) and a report: examples, per-position best-set counts per
        route, the final loss, the expected utility of the trained policy and of always running
        every agent (the rules' first round), and how often its top choice is each route.
    Raises:
        ValueError: fewer than 2 examples.
    """
    if len(examples) < 2:
        raise ValueError(f"{len(examples)} labelled positions; at least 2 are needed (run the "
                         "labelled workload: --generate N)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a few thousand weights: more threads only contend
    try:
        return _fit(examples, latency_weight, hidden, epochs, lr, seed)
    finally:
        torch.set_num_threads(threads)


def _fit(examples: Sequence[Example], latency_weight: float, hidden: int, epochs: int,
         lr: float, seed: int) -> tuple[RouterGRU, dict]:
    torch.manual_seed(seed)
    inputs = torch.tensor([[e.features] for e in examples], dtype=torch.float32)
    utilities = torch.tensor([e.utilities(latency_weight) for e in examples],
                             dtype=torch.float32)
    targets = np.array([e.target(latency_weight) for e in examples])
    model = RouterGRU(RouterGRUConfig(num_features=NUM_FEATURES, hidden=hidden, routes=ROUTES,
                                      bins=BINS))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    model.train()
    loss = torch.tensor(math.nan)
    for epoch in range(epochs):
        optimizer.zero_grad()
        log_p = F.log_softmax(model(inputs), dim=-1)
        p = log_p.exp()
        expected = (p * utilities).sum(-1)
        entropy = -(p * log_p).sum(-1)
        bonus = ENTROPY_BONUS * ENTROPY_START ** max(0.0, 1.0 - 2.0 * epoch / epochs)
        loss = -(expected + bonus * entropy).mean()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.inference_mode():
        chosen = model(inputs).argmax(-1)
        policy_utility = float(utilities.gather(1, chosen[:, None]).mean())
    counts = np.bincount(targets, minlength=len(ROUTES))
    choices = np.bincount(chosen.numpy(), minlength=len(ROUTES))
    return model, {"examples": len(examples), "final_loss": round(float(loss.detach()), 4),
                   "utility_of_choice": round(policy_utility, 4),
                   "utility_of_every_agent": round(float(utilities[:, 0].mean()), 4),
                   "choices": {n: int(c) for n, c in zip(ROUTES, choices, strict=True)},
                   "targets": {n: int(c) for n, c in zip(ROUTES, counts, strict=True)}}


def generate(log_path: Path, labels_path: Path, per_file: int, seed: int,
             judge_cache: Path | None, max_plies: int | None = None,
             routes: Sequence[Route] = CONNECT_FOUR_ROUTES) -> dict:
    """Runs the labelled workload (see the module docstring) and appends to `log_path` (through
    the orchestrator's routing log) and `labels_path`; with `max_plies`, only the sampled
    positions with fewer moves played (more data where the choice is close); `routes` only
    those routes (a route added later, run on the positions of an earlier run).

    Returns:
        counts: positions, requests, failed requests, wall seconds.
    """
    positions = mixed_positions("train", per_file, seed, max_plies=max_plies)
    judge = Judge(judge_cache)
    env = {"ORCHESTRATOR_ROUTING_LOG_PATH": str(log_path.resolve())}
    # The quick checker's routes go to a second orchestrator whose checker has the quick budget
    # (what the served orchestrator's quick checker is: its budget capped at the same nodes).
    quick_env = {**env, "ORCHESTRATOR_CHECKER_MAX_NODES": str(QUICK_CHECKER_MAX_NODES)}
    # The deep search's routes go to a third, whose default simulations are the deep ones.
    simulations = OrchestratorSettings.model_fields["default_simulations"].default
    deep_env = {**env, "ORCHESTRATOR_DEFAULT_SIMULATIONS": str(simulations * DEEP_SEARCH_FACTOR)}
    started = time.perf_counter()
    failed = 0
    labels_path.parent.mkdir(parents=True, exist_ok=True)
    with Mesh({"full": env, "quick": quick_env, "deep": deep_env}) as mesh, \
            labels_path.open("a") as labels:
        channels = {name: open_channel(target) for name, target in mesh.targets.items()}
        stubs = {name: orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
                 for name, channel in channels.items()}
        for stub in stubs.values():
            solve(stub, "4444443")  # warm-up: connections, compiled kernels
        for index, position in enumerate(positions):
            for route in routes:
                name = route_name(route)
                thread_id = f"router-{seed}-{index}-{name.replace('+', '_').replace('@', '-')}"
                stub = stubs["quick" if route.quick_checker else "deep" if route.deep_search
                             else "full"]
                answer = solve(stub, position.moves, [str(a) for a in route.agents], thread_id)
                if answer.error:
                    failed += 1
                    continue
                kept = judge.kept(position, answer.column)
                labels.write(json.dumps({"thread_id": thread_id, "route": name, "kept": kept,
                                         "moves": position.moves, "score": position.score,
                                         "column": answer.column}) + "\n")
                labels.flush()
        for channel in channels.values():
            channel.close()
    return {"positions": len(positions), "requests": len(positions) * len(routes),
            "failed": failed, "wall_s": round(time.perf_counter() - started, 1)}


@dataclass(frozen=True)
class RouterConfig:
    """One run of `train_router` (`mcts-mesh train router`): the checkpoint directory `output`,
    the routing logs and labels files it learns from, and the fit's knobs (`train`)."""

    output: Path | str
    logs: Sequence[Path]
    labels: Sequence[Path]
    latency_weight: float = 0.3
    hidden: int = 16
    epochs: int = 2000
    seed: int = 0


def train_router(config: RouterConfig) -> dict:
    """Trains from `config.logs` + `config.labels` and writes the checkpoint directory
    `config.output`.

    Returns:
        The training report (written into config.json's metadata too, with `config` whole under
        `training.config.CONFIG_KEY`), with the version.
    """
    started = time.perf_counter()
    examples = load_examples(config.logs, config.labels)
    model, report = train(examples, config.latency_weight, config.hidden, config.epochs,
                          seed=config.seed)
    report.update({
        "latency_weight_per_s": config.latency_weight, "epochs": config.epochs,
        "seed": config.seed, "routes": list(ROUTES), "logs": [str(p) for p in config.logs],
        "labels": [str(p) for p in config.labels],
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "wall_s": round(time.perf_counter() - started, 2),
        "split": "Pons public halves, train split (SHA-256(moves)[0] even)",
        CONFIG_KEY: config_json(config),
    })
    report["version"] = save_checkpoint(config.output, model, ARCHITECTURE, report)
    return report
