"""Events of one run of the consensus loop, for watching it progress (StreamSolveProblem).

The loop emits them through an `EventSink`, a plain synchronous callable that must not block (the
servicer's puts the event on an `asyncio.Queue`): `IterationStarted` when the router has chosen an
iteration's agents, `AgentStarted` / `AgentFinished` around every agent call (`ObservedAgent` wraps
each agent of a loop built with a sink), and `TallyUpdated` after each round's aggregation. A loop
built without a sink emits nothing and runs exactly as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from libs.errors import DeadlineExceeded, MeshError
from services.orchestrator.loop.types import Agent, AgentName, Proposal, Round, Tally, Vote


@dataclass(frozen=True)
class IterationStarted:
    """The router chose `agents` for iteration `iteration` (1-based), searching with
    `simulations` MCTS simulations; `reason` is the router's."""

    iteration: int
    agents: tuple[AgentName, ...]
    simulations: int
    reason: str


@dataclass(frozen=True)
class AgentStarted:
    """`agent` was asked for a proposal in iteration `iteration`."""

    iteration: int
    agent: AgentName


@dataclass(frozen=True)
class AgentFinished:
    """`agent`'s call in iteration `iteration` ended after `latency_ms` milliseconds (wall clock)
    with `proposal` (its `answer` None when it abstained), or failed with `error`."""

    iteration: int
    agent: AgentName
    latency_ms: float
    proposal: Proposal | None = None
    error: MeshError | None = None


@dataclass(frozen=True)
class TallyUpdated:
    """The aggregate after iteration `iteration`'s round over `votes` (the newest counted vote of
    each agent)."""

    iteration: int
    tally: Tally
    votes: tuple[Vote, ...]


LoopEvent = IterationStarted | AgentStarted | AgentFinished | TallyUpdated
EventSink = Callable[[LoopEvent], None]
"""Receives every event of a run, synchronously, in order; must not block or raise."""


class ObservedAgent:
    """An agent that reports each call to `sink` and otherwise behaves as the agent it wraps
    (same name, role, repeatability, proposals and errors; other attributes are forwarded)."""

    def __init__(self, agent: Agent, sink: EventSink) -> None:
        self._agent = agent
        self._sink = sink
        self.name = agent.name
        self.role = agent.role
        self.repeatable = agent.repeatable

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._agent, attribute)

    async def propose(self, round_: Round) -> Proposal:
        """The wrapped agent's proposal; emits AgentStarted before and AgentFinished after (also
        when it fails or is stopped by the deadline or a cancellation, which are re-raised)."""
        self._sink(AgentStarted(round_.iteration, self.name))
        started = time.perf_counter()

        def finished(proposal: Proposal | None = None, error: MeshError | None = None) -> None:
            self._sink(AgentFinished(round_.iteration, self.name,
                                     (time.perf_counter() - started) * 1e3, proposal, error))

        try:
            proposal = await self._agent.propose(round_)
        except MeshError as error:
            finished(error=error)
            raise
        except (asyncio.CancelledError, TimeoutError):
            stopped = (DeadlineExceeded(f"{self.name}: no answer before the deadline")
                       if round_.remaining_s() <= 0 else _Cancelled(f"{self.name}: cancelled"))
            finished(error=stopped)
            raise
        finished(proposal)
        return proposal


class _Cancelled(MeshError):
    """An agent call stopped because the request was cancelled (reported, never raised)."""

    code = grpc.StatusCode.CANCELLED
    reason = "CANCELLED"
