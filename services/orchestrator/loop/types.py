"""The consensus loop's vocabulary: the agents' names and roles, what an agent is asked (`Round`)
and answers (`Proposal`), what the loop records (`Vote`, `Tally`, `StepTiming`, `RoutingDecision`),
its limits (`Budget`) and what it returns (`LoopResult`).

Every layer of the orchestrator above the loop (the problem types, the text path, the agents,
routing, the gRPC edge) speaks these types; this module imports nothing of the orchestrator.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from libs.errors import MeshError

AnswerT = TypeVar("AnswerT")


class AgentName(enum.StrEnum):
    """Agents of the consensus loop (the contract's `Agent` enum without UNSPECIFIED)."""

    MCTS = "mcts"
    NEURAL = "neural"
    CHECKER = "checker"
    RETRIEVAL = "retrieval"
    LLM = "llm"
    SOLVER = "solver"
    HRM = "hrm"
    TRM = "trm"


class Role(enum.Enum):
    """How the loop uses an agent: PROPOSER votes in rounds; CONTEXT runs once, before routing;
    VERIFIER checks the proposers' new answers after every round (the puzzle checker), and only
    answers it accepts are counted."""

    PROPOSER = "proposer"
    CONTEXT = "context"
    VERIFIER = "verifier"


class Decider(enum.StrEnum):
    """Who made a routing decision."""

    RULES = "rules"
    LEARNED = "learned"


@dataclass(frozen=True)
class RoutingDecision:
    """Agents to run next (empty: stop and synthesize), why, and the features it was made from.

    `decided_by` says whether the rules or the learned router chose; `confidence` is the learned
    router's probability of its choice in [0, 1] when it was asked (also when the rules took over
    because it was below the threshold), None otherwise.
    """

    agents: tuple[AgentName, ...]
    reason: str
    features: np.ndarray
    decided_by: Decider = Decider.RULES
    confidence: float | None = None


@dataclass(frozen=True)
class Round:
    """What an agent is asked in one iteration.

    Attributes:
        problem: the problem object (a `ConnectFourProblem` or a `TextProblem`).
        iteration: 1-based consensus-loop iteration.
        simulations: MCTS simulations for this round (doubles per iteration).
        seed: seed for this round's searches (the request's seed plus iteration - 1).
        deadline: `time.monotonic()` instant by which the agent must answer.
        context: what the context agents found (retrieved passages), empty for games.
        candidates: for a verifier only: the proposers' new answers to check, `(agent, answer)`
            in the order the agents were routed.
        earlier: each agent's latest proposal from the earlier iterations of this run (empty in
            the first); an anytime agent continues from its own (the search adds simulations to
            reach this round's `simulations` in all, instead of starting again).
        started: `time.monotonic()` instant the run began (None outside a run): an agent's own
            budget for a whole request counts from it, so every round of one request carries the
            same deadline downstream.
    """

    problem: Any
    iteration: int
    simulations: int
    seed: int
    deadline: float
    context: tuple = ()
    candidates: tuple[tuple[AgentName, str], ...] = ()
    earlier: Mapping[AgentName, Proposal] = field(default_factory=dict)
    started: float | None = None

    def remaining_s(self) -> float:
        """Seconds left before `deadline` (0 when passed)."""
        return max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True)
class Proposal:
    """One agent's answer to a round.

    Attributes:
        answer: the proposed answer ("4" for column 4, a drafted text); None abstains (no vote).
        confidence: the agent's confidence in `answer`, in [0, 1].
        rationale: why, in a few words ("exact: win in 3", "visits 812/2000").
        value: the agent's value of the position for the player to move, in [-1, 1], if it has one.
        verified: the answer is proved right (the checker's exact or forced moves); it wins the
            tally and ends the loop.
        excluded: answers the agent proved wrong (moves that hand the opponent a win); votes for
            them are set aside unless every vote is for one.
        detail: the agent's own result (search statistics, exact scores, passages), for synthesis.
        settled: False when the agent's own answer is not settled yet (self-consistency whose vote
            share is below its agreement threshold): agreement among the agents then does not end
            the loop, and the agent stays a candidate for the next round.
    """

    answer: str | None
    confidence: float
    rationale: str
    value: float | None = None
    verified: bool = False
    excluded: frozenset[str] = frozenset()
    detail: Any = None
    settled: bool = True


class Agent(Protocol):
    """An agent of the loop. `role` is PROPOSER (votes every round it is routed to), CONTEXT
    (runs once in RETRIEVE and supplies `Round.context`) or VERIFIER (runs after every round that
    produced answers, on `Round.candidates`; it votes `verified` for the answer it accepts, or
    abstains, and votes for answers it did not accept are dropped); `repeatable` is True when a
    later round with more simulations can change its answer (MCTS), False for deterministic agents
    (the network, the checker), which run once."""

    name: AgentName
    role: Role
    repeatable: bool

    async def propose(self, round_: Round) -> Proposal:
        """The agent's proposal. Raises a `MeshError` subclass when it cannot answer."""
        ...


class SettlesFirst(Protocol):
    """An optional hook of a proposer that can often prove the answer cheaply (the exact checker
    on a position whose node budget is small). Where `settles_first(problem)` is True, the loop
    runs it before the round's other agents, and ends the round there when its proposal is
    verified and carries the problem's value: a verified vote wins the tally, and the value is
    proved too, so nothing the others could answer would change the answer (they would only cost
    their calls: for early Connect Four positions, the search and the network's two hops)."""

    def settles_first(self, problem: Any) -> bool:
        """True when this agent should run before the others on `problem`."""
        ...


class Reconsiders(Protocol):
    """An optional hook of a repeatable proposer that can tell from its own result whether a
    further round could bring its answer to one the other agents vote for (the search, from its
    visit counts). Where `reconsiders` says False, the loop does not offer the agent to the router
    again: the disagreement stands, and the loop synthesizes from the votes it has instead of
    paying for rounds that would only confirm them. Agents without the hook stay candidates while
    they are `repeatable`."""

    def reconsiders(self, proposal: Proposal, rivals: frozenset[str]) -> bool:
        """True when another round could move `proposal.answer` to one of `rivals` (the other
        agents' answers that differ from it)."""
        ...


@dataclass(frozen=True)
class Vote:
    """A proposal as recorded by the loop (the AgentVote of the contract)."""

    agent: AgentName
    answer: str
    confidence: float
    latency_ms: float
    iteration: int
    rationale: str
    value: float | None = None
    verified: bool = False


@dataclass(frozen=True)
class StepTiming:
    """Wall-clock milliseconds spent in one step of one iteration."""

    step: str
    iteration: int
    elapsed_ms: float


@dataclass(frozen=True)
class Tally:
    """The aggregate of the newest vote of each agent.

    Attributes:
        answer: the winning answer.
        confidence: weighted support of `answer` over the total weight of the votes, in [0, 1]
            (1 for a verified answer).
        consensus_score: share of the weighted confidence behind `answer`, in [0, 1].
        agreed: every counted vote proposes `answer`.
        verified: `answer` comes from a verified proposal.
    """

    answer: str
    confidence: float
    consensus_score: float
    agreed: bool
    verified: bool


@dataclass(frozen=True)
class Budget:
    """Limits of one run of the loop.

    Attributes:
        max_iterations: iterations at most, >= 1.
        deadline: `time.monotonic()` instant by which the loop must have synthesized.
        simulations: MCTS simulations of the first round; doubled per iteration.
        max_simulations: ceiling of the doubling.
        seed: the request's seed.
    """

    max_iterations: int
    deadline: float
    simulations: int = 1
    max_simulations: int = 10_000_000
    seed: int = 0


@dataclass(frozen=True)
class LoopResult(Generic[AnswerT]):
    """What the loop returns.

    Attributes:
        answer: the synthesized answer (the problem's own type).
        tally: the final tally.
        consensus_reached: the loop ended on agreement or a verified answer, not on its budget.
        iterations: iterations run.
        votes: every vote cast, in order.
        agents: agents that voted, in order of first vote (in a loop with a verifier, proposers
            whose answers it rejected too).
        timings: time per step.
        routes: every routing decision, with its feature vector (for training a learned router).
        proposals: the newest proposal of each agent that answered.
        failures: agents that failed, with the error and the iteration, in order.
        degraded: every proposer failed, and the loop's fallback built the answer from the
            context alone (a text query's passages).
    """

    answer: AnswerT
    tally: Tally
    consensus_reached: bool
    iterations: int
    votes: tuple[Vote, ...]
    agents: tuple[AgentName, ...]
    timings: tuple[StepTiming, ...]
    routes: tuple[RoutingDecision, ...]
    proposals: dict[AgentName, Proposal]
    failures: tuple[tuple[AgentName, MeshError], ...]
    degraded: bool = False
    failure_iterations: tuple[int, ...] = ()


Synthesizer = Callable[[Tally, dict[AgentName, Proposal], tuple], AnswerT]
"""Builds the problem's answer from the final tally, the newest proposal per agent and the
context."""
