"""Checkpoints of the consensus loop: its state after a finished round, and how a loop resumes
from one.

A round is finished when CHECK_CONSENSUS has decided on its tally: the loop then goes on to the
next round (ITERATE) or to SYNTHESIZE. `ConsensusLoop.run` hands a `LoopCheckpoint` to its
`checkpoints` callback at each of those points; `ConsensusLoop.run(..., resume=checkpoint)` starts
from one instead of from the first round, so a run taken over after a crash continues from its
last finished round: the votes, the tally, the agents already asked and each agent's newest
proposal (the search's root statistics among them, which the next round's search adds to) are
the checkpoint's, and no finished round's agent is called again.

What is not in a checkpoint: the budget (the resumed attempt brings its own deadline) and
monotonic instants (`RunState.started` is the resumed attempt's start). `checkpoint_codec`
turns a checkpoint into bytes and back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from libs.errors import MeshError
from services.orchestrator.loop.state import LoopState, RunState
from services.orchestrator.loop.types import (
    AgentName,
    Budget,
    Proposal,
    RoutingDecision,
    StepTiming,
    Tally,
    Vote,
)

RESUMABLE_STATES = (LoopState.ROUTE, LoopState.SYNTHESIZE)
"""Where a checkpoint resumes: the next round's routing, or the synthesis of the last tally."""


@dataclass(frozen=True)
class LoopCheckpoint:
    """The loop's state after round `rounds_run` (1-based) was decided.

    Attributes:
        next_state: ROUTE (a further round follows) or SYNTHESIZE (the loop ends on this tally).
        iteration: the iteration the loop resumes in (rounds_run + 1 when next_state is ROUTE).
        simulations: MCTS simulations of the resumed iteration.
        The others are `RunState`'s fields of the same names, as immutable copies.
    """

    next_state: LoopState
    iteration: int
    rounds_run: int
    simulations: int
    context: tuple
    ran: tuple[AgentName, ...]
    last_agents: tuple[AgentName, ...]
    accepted: tuple[str, ...]
    votes: tuple[Vote, ...]
    latest: tuple[tuple[AgentName, Vote], ...]
    proposals: tuple[tuple[AgentName, Proposal], ...]
    failures: tuple[tuple[AgentName, MeshError], ...]
    failure_iterations: tuple[int, ...]
    degraded: bool
    timings: tuple[StepTiming, ...]
    routes: tuple[RoutingDecision, ...]
    tally: Tally | None
    consensus: bool

    def __post_init__(self) -> None:
        if self.next_state not in RESUMABLE_STATES:
            raise ValueError(f"a checkpoint resumes at ROUTE or SYNTHESIZE, not "
                             f"{self.next_state.name}")
        if self.iteration < 1 or self.rounds_run < 0:
            raise ValueError("a checkpoint's iteration is >= 1 and rounds_run >= 0")


def snapshot(run: RunState, next_state: LoopState) -> LoopCheckpoint:
    """An immutable copy of `run` that resumes at `next_state` (ROUTE or SYNTHESIZE)."""
    return LoopCheckpoint(
        next_state=next_state, iteration=run.iteration, rounds_run=run.rounds_run,
        simulations=run.simulations, context=tuple(run.context),
        ran=tuple(sorted(run.ran)), last_agents=tuple(run.last_agents),
        accepted=tuple(sorted(run.accepted)), votes=tuple(run.votes),
        latest=tuple(run.latest.items()), proposals=tuple(run.proposals.items()),
        failures=tuple(run.failures), failure_iterations=tuple(run.failure_iterations),
        degraded=run.degraded, timings=tuple(run.timings), routes=tuple(run.routes),
        tally=run.tally, consensus=run.consensus)


def restore(checkpoint: LoopCheckpoint, budget: Budget) -> RunState:
    """A fresh `RunState` equal to the checkpointed one, under `budget` and started now."""
    return RunState(
        budget=budget, started=time.monotonic(), iteration=checkpoint.iteration,
        rounds_run=checkpoint.rounds_run,
        simulations=min(checkpoint.simulations, max(budget.max_simulations, 1)),
        context=tuple(checkpoint.context), ran=set(checkpoint.ran),
        last_agents=list(checkpoint.last_agents), accepted=set(checkpoint.accepted),
        votes=list(checkpoint.votes), latest=dict(checkpoint.latest),
        proposals=dict(checkpoint.proposals), failures=list(checkpoint.failures),
        failure_iterations=list(checkpoint.failure_iterations), degraded=checkpoint.degraded,
        timings=list(checkpoint.timings), routes=list(checkpoint.routes),
        tally=checkpoint.tally, consensus=checkpoint.consensus)


@dataclass(frozen=True)
class Durable:
    """What a durable run's execution gives the loop it runs in: where the loop's events go,
    where a checkpoint goes after every finished round (both synchronous callables that must
    not block), and the checkpoint it resumes from (None: from the start)."""

    events: Callable[[Any], None]
    checkpoints: Callable[[LoopCheckpoint], None]
    resume: LoopCheckpoint | None = None
