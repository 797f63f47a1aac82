"""The labelled Connect Four workload of the meta-controller: positions of Pascal Pons' six
benchmark files, a private mesh to run them through, and a judge of the answers.

Split. `../shared/data/connect4-pons/` holds the public half of each of Pons' files (the other half
is held out by the project and not on this machine). The router learns from part of that public
half and is measured on the rest: a position belongs to the "train" split when the first byte of
the SHA-256 of its move string is even, to "test" otherwise (`split_of`), so `mcts-mesh train
router` never sees a position that `bench/router.py` measures on.

Judge. A returned column "keeps the outcome" when the position after it has the same result for
the mover as the position had (`libs.connect4.outcome.keeps_outcome`, the exact solver; seconds
per move for Pons' Begin-Hard positions). Judgements are cached in a JSON-lines file keyed by
(moves, column), so a position answered the same way twice, or in a later run, is judged once.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from libs.data import dataset

REPO = Path(__file__).resolve().parents[2]
PONS_FILES = ("Test_L3_R1", "Test_L2_R1", "Test_L2_R2", "Test_L1_R1", "Test_L1_R2", "Test_L1_R3")
"""Pons' six files: End-Easy, Middle-Easy, Middle-Medium, Begin-Easy, Begin-Medium, Begin-Hard."""

AGENT_PROTO = {"checker": pb.AGENT_CHECKER, "mcts": pb.AGENT_MCTS, "neural": pb.AGENT_NEURAL}


def pons_dir() -> Path:
    """Pons' files: `connect4-pons` in the evaluation data folder, else the repository's copy.

    Raises:
        libs.data.MissingDataset: in neither.
    """
    return dataset("connect4-pons")


def split_of(moves: str) -> str:
    """"train" or "test": the parity of the first byte of SHA-256(moves)."""
    return "train" if hashlib.sha256(moves.encode()).digest()[0] % 2 == 0 else "test"


@dataclass(frozen=True)
class Position:
    """A Pons position: its move string, exact score for the player to move, and file."""

    moves: str
    score: int
    file: str


def mixed_positions(split: str, per_file: int, seed: int, directory: Path | None = None,
                    max_plies: int | None = None) -> list[Position]:
    """`per_file` positions of `split` from each of the six files (a seeded sample; all when fewer),
    shuffled together; with `max_plies`, only those of the sample with fewer moves played.

    Raises:
        ValueError: `split` is not "train" or "test", or `per_file` < 1.
    """
    if split not in ("train", "test") or per_file < 1:
        raise ValueError("split must be 'train' or 'test' and per_file >= 1")
    directory = directory or pons_dir()
    rng = random.Random(seed)
    chosen: list[Position] = []
    for name in PONS_FILES:
        rows = [Position(moves, score, name) for moves, score in read_pons(directory / name)
                if moves and split_of(moves) == split]
        chosen.extend(position for position in rng.sample(rows, min(per_file, len(rows)))
                      if max_plies is None or len(position.moves) < max_plies)
    rng.shuffle(chosen)
    return chosen


class Judge:
    """`keeps_outcome` with a JSON-lines cache at `cache` (None: in memory only)."""

    def __init__(self, cache: Path | None) -> None:
        self._cache = cache
        self._known: dict[tuple[str, int], bool] = {}
        if cache is not None and cache.is_file():
            for line in cache.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self._known[(row["moves"], int(row["column"]))] = bool(row["kept"])

    def kept(self, position: Position, column: int) -> bool:
        """Whether `column` (1..7) keeps the outcome of `position`."""
        key = (position.moves, column)
        if key not in self._known:
            self._known[key] = keeps_outcome(position.moves, column, position.score)
            if self._cache is not None:
                with self._cache.open("a") as handle:
                    handle.write(json.dumps({"moves": key[0], "column": column,
                                             "kept": self._known[key]}) + "\n")
        return self._known[key]


@dataclass(frozen=True)
class Answer:
    """One request's result: the column (0 when it failed), wall-clock ms, who routed, error, and
    whether the answer is exact (the checker proved the position's outcome:
    `ConnectFourAnswer.outcome` is set)."""

    column: int
    latency_ms: float
    decider: str
    error: str = ""
    exact: bool = False


def solve(stub: orchestrator_service_pb2_grpc.OrchestratorServiceStub, moves: str,
          agents: Sequence[str] = (), thread_id: str = "", timeout_s: float = 60.0) -> Answer:
    """One SolveProblem call (default budgets); `agents` names the agents ("" = the default)."""
    request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves=moves),
                                     agents=[AGENT_PROTO[name] for name in agents],
                                     thread_id=thread_id)
    started = time.perf_counter()
    try:
        response = stub.SolveProblem(request, timeout=timeout_s)
    except grpc.RpcError as error:
        return Answer(0, (time.perf_counter() - started) * 1e3, "",
                      f"{error.code().name}: {error.details()}")
    latency_ms = (time.perf_counter() - started) * 1e3
    decider = pb.RouteDecider.Name(response.route_decider).removeprefix("ROUTE_DECIDER_").lower()
    return Answer(response.connect_four.column, latency_ms, decider,
                  exact=response.connect_four.outcome != pb.OUTCOME_UNSPECIFIED)


class Mesh:
    """mcts, neural and one orchestrator per entry of `orchestrators` (name -> extra environment),
    each `mcts-mesh serve` child processes on loopback ports; a context manager that stops
    them all. `targets[name]` is each orchestrator's gRPC address.

    Ports: free ones chosen by the system (`port_base` None), or consecutive ones from
    `port_base`: mcts, neural, then the orchestrators in order (for a machine whose users keep to
    port ranges)."""

    def __init__(self, orchestrators: dict[str, dict[str, str]],
                 neural_env: dict[str, str] | None = None, start_timeout_s: float = 300.0,
                 port_base: int | None = None):
        if port_base is not None and not 1024 <= port_base <= 65535 - 2 - len(orchestrators):
            raise ValueError(f"port_base {port_base} leaves no room for "
                             f"{2 + len(orchestrators)} ports")
        self._orchestrators = orchestrators
        self._neural_env = neural_env or {}
        self._timeout = start_timeout_s
        self._port_base = port_base
        self._processes: list[subprocess.Popen] = []
        self.targets: dict[str, str] = {}
        self.log_dir = Path(tempfile.mkdtemp(prefix="router-mesh-"))

    def __enter__(self) -> Mesh:
        try:
            mcts = self._start("mcts", {"MCTS_PORT": self._port(0)})
            neural = self._start("neural", {"NEURAL_PORT": self._port(1), **self._neural_env})
            for index, (name, env) in enumerate(self._orchestrators.items()):
                port = self._start("orchestrator", {
                    "ORCHESTRATOR_PORT": self._port(2 + index), "ORCHESTRATOR_REST_PORT": "-1",
                    "ORCHESTRATOR_METRICS_PORT": "-1",
                    "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{mcts}",
                    "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{neural}", **env})
                self.targets[name] = f"127.0.0.1:{port}"
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _port(self, offset: int) -> str:
        return "0" if self._port_base is None else str(self._port_base + offset)

    def _start(self, service: str, env: dict[str, str]) -> int:
        port_file = self.log_dir / f"{service}-{len(self._processes)}.json"
        log = (self.log_dir / f"{port_file.stem}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "mcts_mesh.cli", "serve", service, "--port-file",
             str(port_file)], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
            cwd=REPO, start_new_session=True)
        self._processes.append(process)
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{service} exited at start-up; see {log.name}")
            if port_file.exists() and port_file.stat().st_size > 0:
                return int(json.loads(port_file.read_text())["grpc"])
            time.sleep(0.1)
        raise RuntimeError(f"{service} did not start in {self._timeout:.0f} s; see {log.name}")

    def stop(self) -> None:
        """Stops every child (SIGTERM, then SIGKILL after 10 s)."""
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()
