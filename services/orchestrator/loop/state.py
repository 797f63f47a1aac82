"""The consensus loop's states, the per-run mutable record (`RunState`) and the optional agent
hooks the loop consults (`reconsiders`, `settles_first`)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from libs.errors import MeshError
from services.orchestrator.loop.types import (
    Agent,
    AgentName,
    Budget,
    Proposal,
    RoutingDecision,
    StepTiming,
    Tally,
    Vote,
)


class LoopState(enum.Enum):
    """States of the consensus loop."""

    RETRIEVE = "retrieve"
    ROUTE = "route"
    RUN_AGENTS = "run_agents"
    VERIFY = "verify"
    AGGREGATE = "aggregate"
    CHECK_CONSENSUS = "check_consensus"
    ITERATE = "iterate"
    SYNTHESIZE = "synthesize"
    DONE = "done"


STEP_NAMES = {
    LoopState.RETRIEVE: "retrieve",
    LoopState.ROUTE: "route",
    LoopState.RUN_AGENTS: "agents",
    LoopState.VERIFY: "verify",
    LoopState.AGGREGATE: "aggregate",
    LoopState.CHECK_CONSENSUS: "consensus",
    LoopState.SYNTHESIZE: "synthesize",
}
"""The step name reported in StepTiming for each timed state (ITERATE and DONE take no time)."""



@dataclass
class RunState:
    """Mutable state of one run of the loop (`ConsensusLoop.run`'s)."""

    budget: Budget
    started: float = field(default_factory=time.monotonic)
    iteration: int = 1
    rounds_run: int = 0
    simulations: int = 1
    context: tuple = ()
    routed: list[AgentName] = field(default_factory=list)
    ran: set[AgentName] = field(default_factory=set)
    last_agents: list[AgentName] = field(default_factory=list)
    fresh: list[AgentName] = field(default_factory=list)
    accepted: set[str] = field(default_factory=set)
    votes: list[Vote] = field(default_factory=list)
    latest: dict[AgentName, Vote] = field(default_factory=dict)
    proposals: dict[AgentName, Proposal] = field(default_factory=dict)
    failures: list[tuple[AgentName, MeshError]] = field(default_factory=list)
    failure_iterations: list[int] = field(default_factory=list)
    degraded: bool = False
    timings: list[StepTiming] = field(default_factory=list)
    routes: list[RoutingDecision] = field(default_factory=list)
    tally: Tally | None = None
    consensus: bool = False



def reconsiders(agent: Agent, proposal: Proposal | None, rivals: frozenset[str]) -> bool:
    """`agent.reconsiders(proposal, rivals)` for agents with the `Reconsiders` hook and a proposal
    with an answer; True otherwise."""
    hook = getattr(agent, "reconsiders", None)
    if hook is None or proposal is None or proposal.answer is None:
        return True
    return bool(hook(proposal, rivals))


def proves(vote: Vote | None, run: RunState) -> bool:
    """`vote` is this iteration's, verified, and carries the problem's value."""
    return vote is not None and vote.iteration == run.iteration and vote.verified \
        and vote.value is not None


def settles_first(agent: Agent, problem: Any) -> bool:
    """`agent.settles_first(problem)` for agents with the `SettlesFirst` hook, else False."""
    hook = getattr(agent, "settles_first", None)
    return bool(hook(problem)) if hook is not None else False
