"""The HRM and TRM agents: clients of mesh.neural.v1.NeuralService.Solve for Sudoku and mazes.

One agent per architecture (the Hierarchical Reasoning Model, Wang et al. 2025, arXiv:2506.21734;
the Tiny Recursive Model, Jolicoeur-Martineau 2025, arXiv:2510.04871). The model comes from the
neural service's registry: `ReasoningModels` lists it (ListModels, cached) and picks the model of
the agent's architecture whose `Model.task` is the puzzle's (`GridPuzzle.model_task`, e.g.
"sudoku-6x6", "maze-9x9"), or the one the settings name. Where several fit the grid, the choice is
a decision with the puzzle's blank count as its feature (`choose_model`): the model whose training
distribution (the checkpoint's recorded `task.blanks`) is nearest the puzzle's blanks, ties to the
better held-out exact accuracy the trainer recorded, then by name. The agent sends the grid to
`Solve` with a deadline and proposes the decoded prediction; like every proposal it counts only
once the puzzle checker has verified it, and the exact solver answers when it does not
(`PuzzleRouter`).
In the routing features both agents fill the MODEL slot; deterministic, so each runs once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Unavailable,
    failure_detail,
    propagate,
)
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round

log = logging.getLogger(__name__)

REASONING_AGENTS = (AgentName.HRM, AgentName.TRM)
"""The agents of this module; `AgentName.value` is the checkpoint's architecture ("hrm", "trm")."""
HALTING_MODES = {
    "paper": neural_service_pb2.HALTING_MODE_PAPER,
    "act": neural_service_pb2.HALTING_MODE_ACT,
}
"""Settings word -> the contract's HaltingMode: "paper" runs a fixed number of segments (as the
papers evaluate), "act" stops at the first segment whose halting head says halt."""
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)
"""Solve's answers for an unknown model or a grid it does not read: the orchestrator's caller is
not at fault, so the agent fails UNAVAILABLE (and the solver answers), not INVALID_ARGUMENT."""
MAX_SEGMENTS = 64
"""Upper bound of SolveRequest.max_segments in the neural contract."""


class GridPuzzle(Protocol):
    """What the agents need from a puzzle (`SudokuProblem`, `MazeProblem`)."""

    @property
    def model_task(self) -> str:
        """The `Model.task` of the reasoning models that solve this grid, e.g. "sudoku-6x6"."""
        ...

    def model_input(self) -> str:
        """The grid as SolveRequest.grid: row-major, one character per cell, no separators."""
        ...

    def answer_from_model(self, grid: str) -> str:
        """A SolveResponse.grid as an answer string of the orchestrator's contract (not checked:
        the checker judges it)."""
        ...


@dataclass(frozen=True)
class TrainedOn:
    """What a checkpoint records about its training, read from `Model.metadata` (the trainer's
    JSON `task` and `metrics`).

    Attributes:
        blanks: blanks per training puzzle (Sudoku), or None when the checkpoint names none.
        held_out_exact: the trainer's held-out exact accuracy in [0, 1] for the halting mode
            ("paper" or "act"; "paper" where the mode was not evaluated), or None.
    """

    blanks: int | None
    held_out_exact: float | None


def _json_field(metadata, key: str) -> dict:
    try:
        value = json.loads(metadata.get(key, "") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def trained_on(model: neural_service_pb2.Model, mode: str = "paper") -> TrainedOn:
    """The training facts of `model` (`TrainedOn`); a field the metadata lacks or garbles is
    None."""
    task = _json_field(model.metadata, "task")
    metrics = _json_field(model.metadata, "metrics")
    blanks = task.get("blanks")
    scores = metrics.get(mode) or metrics.get("paper") or {}
    exact = scores.get("exact_accuracy") if isinstance(scores, dict) else None
    return TrainedOn(blanks if isinstance(blanks, int) and not isinstance(blanks, bool) else None,
                     float(exact) if isinstance(exact, (int, float)) else None)


def choose_model(candidates: Sequence[neural_service_pb2.Model], blanks: int | None,
                 mode: str = "paper") -> neural_service_pb2.Model | None:
    """The model of `candidates` (all for the same grid) whose training fits a puzzle with `blanks`
    blank cells: the nearest recorded training blank count, ties to the higher held-out exact
    accuracy, then the first by name. Models that record no blank count rank after those that do;
    with `blanks` None (a maze) only accuracy and name decide. None when `candidates` is empty."""
    def key(model: neural_service_pb2.Model) -> tuple:
        facts = trained_on(model, mode)
        if blanks is None:
            distance = 0
        elif facts.blanks is None:
            distance = float("inf")
        else:
            distance = abs(facts.blanks - blanks)
        exact = -1.0 if facts.held_out_exact is None else facts.held_out_exact
        return (distance, -exact, model.name)

    return min(candidates, key=key, default=None)


def why_chosen(model: neural_service_pb2.Model, blanks: int | None, mode: str = "paper") -> str:
    """A few words for the vote's rationale: what the chosen model was trained on."""
    facts = trained_on(model, mode)
    parts = []
    if facts.blanks is not None:
        parts.append(f"trained on {facts.blanks} blanks")
    if blanks is not None:
        parts.append(f"puzzle has {blanks}")
    if facts.held_out_exact is not None:
        parts.append(f"held-out exact {facts.held_out_exact:.1%}")
    return ", ".join(parts)


class ReasoningModels:
    """The reasoning models of the neural service's registry, listed once per `ttl_s`.

    Args:
        stub: a NeuralService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one ListModels call in seconds (a caller's deadline shortens it).
        ttl_s: seconds a listing is reused; a model loaded later is seen after at most this long
            (0 lists on every lookup).
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(self, stub: neural_service_pb2_grpc.NeuralServiceStub, deadline_s: float,
                 ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if deadline_s <= 0 or ttl_s < 0:
            raise ValueError("deadline_s must be positive and ttl_s >= 0")
        self._stub = stub
        self._deadline_s = deadline_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._models: tuple[neural_service_pb2.Model, ...] | None = None
        self._listed_at = 0.0
        self._lock = asyncio.Lock()

    async def find(self, architecture: str, task: str, name: str = "",
                   timeout_s: float | None = None, blanks: int | None = None,
                   mode: str = "paper") -> neural_service_pb2.Model | None:
        """The model of `architecture` ("hrm", "trm") whose task is `task`: the one called `name`
        when given, else the one `choose_model` picks for a puzzle with `blanks` blank cells
        (None: no blank count, so the best held-out exact accuracy in `mode`, then the first by
        name); None when there is none.

        Raises:
            Unavailable: the neural service is down or answered an error.
            DeadlineExceeded: `timeout_s` (or the call's deadline) ran out.
        """
        candidates = [model for model in await self.models(timeout_s)
                      if model.architecture == architecture and model.task == task
                      and (not name or model.name == name)]
        return choose_model(candidates, blanks, mode)

    async def models(self, timeout_s: float | None = None
                     ) -> tuple[neural_service_pb2.Model, ...]:
        """Every model of the registry, sorted by name (listed when the cache is stale).

        Raises:
            Unavailable, DeadlineExceeded: as `find`.
        """
        async with self._lock:
            if self._models is not None and self._clock() - self._listed_at < self._ttl_s:
                return self._models
            timeout = self._deadline_s if timeout_s is None else min(self._deadline_s, timeout_s)
            if timeout <= 0:
                raise DeadlineExceeded("neural: no time left to list the models")
            try:
                response = await self._stub.ListModels(neural_service_pb2.ListModelsRequest(),
                                                       timeout=timeout)
            except grpc.aio.AioRpcError as error:
                raise propagate(error, "neural") from error
            self._models = tuple(sorted(response.models, key=lambda model: model.name))
            self._listed_at = self._clock()
            return self._models

    def forget(self) -> None:
        """Drops the cached listing (a model went away): the next lookup lists again."""
        self._models = None


@runtime_checkable
class ModelBackedAgent(Protocol):
    """A proposer that serves a puzzle only when the neural service has a model for it; the
    servicer asks `model_for` before it lets the agent take part."""

    async def model_for(self, problem: GridPuzzle, timeout_s: float | None = None
                        ) -> neural_service_pb2.Model | None:
        ...


class ReasoningAgent:
    """HRM or TRM through NeuralService.Solve.

    Args:
        name: `AgentName.HRM` or `AgentName.TRM`; its value is the architecture looked up.
        stub: a NeuralService stub.
        models: the shared model listing.
        deadline_s: deadline of one Solve call in seconds; the round's deadline shortens it.
        halting_mode: "paper" (fixed segments) or "act" (early halt); see `HALTING_MODES`.
        max_segments: segments at most, 1..64; None means the model's own maximum.
        model: a model name to use; empty lets `choose_model` pick, among the models of the
            architecture whose task matches the grid, the one trained nearest the puzzle's blank
            count (`GridPuzzle` problems with a `blanks` attribute; others by held-out accuracy).
    """

    role = Role.PROPOSER
    repeatable = False

    def __init__(self, name: AgentName, stub: neural_service_pb2_grpc.NeuralServiceStub,
                 models: ReasoningModels, deadline_s: float, halting_mode: str = "paper",
                 max_segments: int | None = None, model: str = "") -> None:
        if name not in REASONING_AGENTS:
            raise ValueError(f"{name} is not a reasoning agent; expected one of "
                             f"{[agent.value for agent in REASONING_AGENTS]}")
        if halting_mode not in HALTING_MODES:
            raise ValueError(f"unknown halting mode {halting_mode!r}; expected one of "
                             f"{sorted(HALTING_MODES)}")
        if max_segments is not None and not 1 <= max_segments <= MAX_SEGMENTS:
            raise ValueError(f"max_segments must be in 1..{MAX_SEGMENTS}")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        self.name = name
        self._stub = stub
        self._models = models
        self._deadline_s = deadline_s
        self._halting_mode = HALTING_MODES[halting_mode]
        self._mode = halting_mode
        self._max_segments = max_segments
        self._model = model

    @property
    def architecture(self) -> str:
        """"hrm" or "trm": `Model.architecture` of the models this agent uses."""
        return self.name.value

    async def model_for(self, problem: GridPuzzle, timeout_s: float | None = None
                        ) -> neural_service_pb2.Model | None:
        """The model this agent would ask about `problem`, or None when the registry has none.

        Raises:
            Unavailable, DeadlineExceeded: the listing failed (`ReasoningModels.find`).
        """
        return await self._models.find(self.architecture, problem.model_task, self._model,
                                       timeout_s, _blanks(problem), self._mode)

    async def propose(self, round_: Round) -> Proposal:
        """The model's prediction as an answer string; confidence is the halting head's
        probability that the prediction is final; `detail` is the SolveResponse.

        Raises:
            FailedPrecondition: the registry has no model for the grid (any more).
            DeadlineExceeded: no time left, or a call ran past its deadline.
            Unavailable: the neural service is down, failed the call, or refused it (the model
                went away since the listing, or it does not read the grid).
        """
        problem: GridPuzzle = round_.problem
        model = await self.model_for(problem, round_.remaining_s())
        if model is None:
            raise FailedPrecondition(f"{self.name}: the neural service has no "
                                     f"{self.architecture} model for {problem.model_task}")
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded(f"{self.name}: no time left for Solve")
        request = neural_service_pb2.SolveRequest(model=model.name, grid=problem.model_input(),
                                                  halting_mode=self._halting_mode)
        if self._max_segments is not None:
            request.max_segments = self._max_segments
        try:
            response = await self._stub.Solve(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() in REFUSED:
                # The caller's request was fine: the model went away since the listing, or the
                # service reads the grid differently. List again next time.
                self._models.forget()
                refused = Unavailable(f"neural refused Solve with {model.name}: "
                                      f"{error.code().name}: {failure_detail(error)}")
                refused.failed_service = "neural"
                raise refused from error
            raise propagate(error, "neural") from error
        confidence = min(1.0, max(0.0, float(response.halt_probability)))
        served = response.model.name or model.name
        version = response.model.version or model.version
        chosen = "named in the settings" if self._model \
            else why_chosen(model, _blanks(problem), self._mode)
        return Proposal(problem.answer_from_model(response.grid), confidence,
                        f"{served} {version}{f' ({chosen})' if chosen else ''}: "
                        f"{response.segments_used} "
                        f"segment{'' if response.segments_used == 1 else 's'}, "
                        f"halt {confidence:.2f}",
                        detail=response)


def _blanks(problem: GridPuzzle) -> int | None:
    """The puzzle's blank count (Sudoku), the feature of the model choice; None for a grid that
    has none (a maze)."""
    blanks = getattr(problem, "blanks", None)
    return blanks if isinstance(blanks, int) else None
