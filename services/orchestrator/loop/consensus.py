"""The consensus loop: an explicit state machine over agents, bounded by iterations and a deadline.

    RETRIEVE -> ROUTE -> RUN_AGENTS -> [VERIFY] -> AGGREGATE -> CHECK_CONSENSUS -> ITERATE -> ROUTE
                                                                            \\-> SYNTHESIZE -> DONE

RETRIEVE runs the context agents once (retrieval for a text query; none for a game), ROUTE asks the
router which agents run next from the ten routing features (`routing.py`), RUN_AGENTS calls them
concurrently, VERIFY (only when the loop has a verifier agent: the puzzle checker) checks the new
answers and drops every vote for an answer it did not accept, so an unverified proposal never
becomes the answer, AGGREGATE tallies the newest vote of every agent, CHECK_CONSENSUS ends the
loop on agreement, on a verified answer, or when the budget (iterations, deadline, agents with
something new to say) is spent; ITERATE doubles the simulations of the next round. A repeatable
agent counts as having something new to say unless its `Reconsiders` hook says another round could
not bring its answer to the others' (the search, when their columns are far behind its own).
SYNTHESIZE turns the tally into the problem's answer.

Agents come in as objects (the `Agent` protocol), so the loop knows no transport: the orchestrator
passes gRPC-backed agents, tests pass fakes. An agent that fails with a `MeshError` is left out of
the tally and logged; when no agent answers at all the loop raises (DeadlineExceeded when time ran
out, otherwise the first failure, usually Unavailable).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic

import numpy as np

from libs.errors import DeadlineExceeded, FailedPrecondition, MeshError
from services.orchestrator.loop.checkpoint import (
    RESUMABLE_STATES,
    LoopCheckpoint,
    restore,
    snapshot,
)
from services.orchestrator.loop.events import (
    EventSink,
    IterationStarted,
    ObservedAgent,
    TallyUpdated,
)
from services.orchestrator.loop.routing import Router, RoutingState, routing_features
from services.orchestrator.loop.state import (
    STEP_NAMES,
    LoopState,
    RunState,
    proves,
    reconsiders,
    settles_first,
)
from services.orchestrator.loop.tally import aggregate
from services.orchestrator.loop.tracing import agent_span, step_span
from services.orchestrator.loop.types import (
    Agent,
    AgentName,
    AnswerT,
    Budget,
    LoopResult,
    Proposal,
    Role,
    Round,
    StepTiming,
    Synthesizer,
    Tally,
    Vote,
)

log = logging.getLogger(__name__)


MIN_ROUND_S = 0.05
"""A new iteration starts only when at least this many seconds of the deadline are left."""


class ConsensusLoop(Generic[AnswerT]):
    """The loop over a fixed set of agents and a router.

    Args:
        agents: the agents that apply to this problem (the servicer filters by the request).
        router: picks the next agents from the routing features (`RuleRouter` today).
        synthesize: builds the answer from the final tally.
        query_length_norm: the problem's size in [0, 1] (routing feature 8).
        weights: per-agent weights of the vote (default 1.0).
        events: receives the run's progress (`events.py`): every agent is wrapped in an
            `ObservedAgent`; None (the default) emits nothing.
        fallback: builds the answer from the context alone when every proposer failed but the
            context agents answered (a text query's passages when the LLM is down or frozen);
            None raises the failure instead.
        checkpoints: receives the loop's state after every finished round (`checkpoint.py`),
            synchronously; it must not block. None (the default) takes none.
    """

    def __init__(self, agents: Sequence[Agent], router: Router, synthesize: Synthesizer,
                 query_length_norm: float,
                 weights: dict[AgentName, float] | None = None,
                 events: EventSink | None = None,
                 fallback: Synthesizer | None = None,
                 checkpoints: Callable[[LoopCheckpoint], None] | None = None) -> None:
        names = [agent.name for agent in agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agents named twice: {names}")
        if not any(agent.role is Role.PROPOSER for agent in agents):
            raise ValueError("the loop needs at least one proposer agent")
        if events is not None:
            agents = [ObservedAgent(agent, events) for agent in agents]
        self._events = events
        self._agents = {agent.name: agent for agent in agents}
        self._verifiers = [agent for agent in agents if agent.role is Role.VERIFIER]
        self._router = router
        self._synthesize = synthesize
        self._query_length_norm = query_length_norm
        self._weights = weights or {}
        self._fallback = fallback
        self._checkpoints = checkpoints

    async def run(self, problem: Any, budget: Budget,
                  resume: LoopCheckpoint | None = None) -> LoopResult[AnswerT]:
        """Runs the loop to DONE: from the start, or from `resume` (a checkpoint of an earlier
        run of this loop on this problem), where its finished rounds are not run again.

        Raises:
            DeadlineExceeded: the deadline passed before any agent answered.
            FailedPrecondition: every agent that ran abstained (the checker alone on a position
                it cannot solve within its node budget), or, in a loop with a verifier, no answer
                passed verification within the budget.
            MeshError: a context agent failed (e.g. Unavailable, NotFound), or every proposer failed
                (the first failure that is not a deadline is raised).
        """
        if budget.max_iterations < 1:
            raise ValueError("max_iterations must be >= 1")
        if resume is not None:
            run, state = restore(resume, budget), resume.next_state
        else:
            run = RunState(budget=budget, simulations=max(1, budget.simulations))
            has_context = any(agent.role is Role.CONTEXT for agent in self._agents.values())
            state = LoopState.RETRIEVE if has_context else LoopState.ROUTE
        answer: Any = None
        while state is not LoopState.DONE:
            started = time.perf_counter()
            if state is LoopState.RETRIEVE:
                await self._retrieve(problem, run)
                next_state = LoopState.ROUTE
            elif state is LoopState.ROUTE:
                next_state = self._route(run)
            elif state is LoopState.RUN_AGENTS:
                await self._run_agents(problem, run)
                next_state = LoopState.VERIFY if self._verifiers else LoopState.AGGREGATE
            elif state is LoopState.VERIFY:
                await self._verify(problem, run)
                next_state = LoopState.AGGREGATE
            elif state is LoopState.AGGREGATE:
                next_state = self._aggregate(run)
            elif state is LoopState.CHECK_CONSENSUS:
                next_state = self._check_consensus(run)
            elif state is LoopState.ITERATE:
                run.iteration += 1
                run.simulations = min(run.simulations * 2, max(budget.max_simulations, 1))
                next_state = LoopState.ROUTE
            else:  # SYNTHESIZE
                answer = self._synthesized(run)
                next_state = LoopState.DONE
            if state in STEP_NAMES:
                run.timings.append(StepTiming(STEP_NAMES[state], run.iteration,
                                              (time.perf_counter() - started) * 1e3))
            if self._checkpoints is not None and next_state in RESUMABLE_STATES and \
                    state in (LoopState.ITERATE, LoopState.CHECK_CONSENSUS):
                self._checkpoints(snapshot(run, next_state))
            state = next_state
        return _result(run, answer)

    def _synthesized(self, run: RunState) -> Any:
        """The answer of SYNTHESIZE: the synthesizer's, or the fallback's when degraded."""
        # Every path to SYNTHESIZE sets the tally, and only a loop with a fallback degrades.
        synthesize = self._fallback if run.degraded else self._synthesize
        if run.tally is None or synthesize is None:
            raise RuntimeError("the consensus loop reached SYNTHESIZE without a tally or, "
                               "degraded, without a fallback")
        return synthesize(run.tally, dict(run.proposals), run.context)

    def _round(self, problem: Any, run: RunState,
               candidates: tuple[tuple[AgentName, str], ...] = ()) -> Round:
        return Round(problem=problem, iteration=run.iteration, simulations=run.simulations,
                     seed=(run.budget.seed + run.iteration - 1) % (1 << 64),
                     deadline=run.budget.deadline, context=run.context, candidates=candidates,
                     earlier=dict(run.proposals), started=run.started)

    async def _retrieve(self, problem: Any, run: RunState) -> None:
        """Runs every context agent once; their failures end the request (raised as they are)."""
        context: list = []
        for agent in self._agents.values():
            if agent.role is not Role.CONTEXT:
                continue
            self._check_time(run)
            proposal, latency_ms = await self._timed(agent, self._round(problem, run))
            run.ran.add(agent.name)
            self._record(run, agent.name, proposal, latency_ms)
            if proposal.detail:
                context.extend(proposal.detail)
        run.context = tuple(context)

    @step_span("route")
    def _route(self, run: RunState) -> LoopState:
        candidates = [name for name, agent in self._agents.items()
                      if agent.role is Role.PROPOSER and (
                          name not in run.ran
                          or (agent.repeatable and self._reconsiders(agent, run)))]
        decision = self._router.route(self.features(run), candidates)
        run.routes.append(decision)
        chosen = [name for name in decision.agents if name in candidates]
        if not chosen:
            if run.tally is None:
                if len(run.routes) == 1:
                    raise ValueError(
                        f"the router chose no agent in the first round ({decision.reason})")
                raise self._no_answer(run)  # every answer so far failed verification
            return LoopState.SYNTHESIZE
        run.routed = chosen
        if self._events is not None:
            self._events(IterationStarted(run.iteration, tuple(chosen), run.simulations,
                                          decision.reason))
        return LoopState.RUN_AGENTS

    @staticmethod
    def _reconsiders(agent: Agent, run: RunState) -> bool:
        """`reconsiders` on the agent's latest proposal against the other agents' answers."""
        own = run.latest.get(agent.name)
        rivals = frozenset(vote.answer for name, vote in run.latest.items()
                           if name != agent.name and (own is None or vote.answer != own.answer))
        return reconsiders(agent, run.proposals.get(agent.name), rivals)

    @step_span("agents")
    async def _run_agents(self, problem: Any, run: RunState) -> None:
        if time.monotonic() >= run.budget.deadline:
            if not run.latest:
                for name in run.routed:
                    self._failed(run, name, DeadlineExceeded(f"{name}: no time left before the "
                                                             "deadline"))
                if not self._falls_back(run):
                    raise self._no_answer(run)
            log.info("deadline passed before iteration %d ran: keeping the votes so far",
                     run.iteration)
            return
        run.fresh = []
        run.rounds_run = run.iteration
        round_ = self._round(problem, run)
        agents = [self._agents[name] for name in run.routed]
        first = [agent for agent in agents if agent.role is Role.PROPOSER
                 and settles_first(agent, problem)]
        answered: list[AgentName] = []
        if first and len(first) < len(agents):
            answered += await self._run_group(first, round_, run)
            proof = next((name for name in answered if proves(run.latest.get(name), run)),
                         None)
            if proof is not None:
                log.debug("iteration %d settled by %s; not run: %s", run.iteration, proof,
                          ", ".join(agent.name for agent in agents if agent not in first))
                agents = []
            else:
                agents = [agent for agent in agents if agent not in first]
        answered += await self._run_group(agents, round_, run)
        if answered:
            run.last_agents = answered
        run.fresh = answered

    async def _run_group(self, agents: list[Agent], round_: Round, run: RunState
                         ) -> list[AgentName]:
        """Runs `agents` side by side on `round_`, records their proposals and failures, and
        returns the names of those that answered."""
        if not agents:
            return []
        outcomes = await asyncio.gather(*(self._timed(agent, round_) for agent in agents),
                                        return_exceptions=True)
        answered: list[AgentName] = []
        for agent, outcome in zip(agents, outcomes, strict=True):
            run.ran.add(agent.name)
            if isinstance(outcome, MeshError):
                log.warning("agent %s failed in iteration %d: %s: %s", agent.name, run.iteration,
                            type(outcome).__name__, outcome.message)
                self._failed(run, agent.name, outcome)
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            proposal, latency_ms = outcome
            self._record(run, agent.name, proposal, latency_ms)
            answered.append(agent.name)
        return answered

    @step_span("verify")
    async def _verify(self, problem: Any, run: RunState) -> None:
        """Runs the verifiers on the round's new answers, then keeps only the votes for answers a
        verifier accepted (its own verified vote included). A verifier's failure accepts nothing."""
        candidates = tuple((name, run.latest[name].answer) for name in run.fresh
                           if name in run.latest and self._agents[name].role is Role.PROPOSER)
        if candidates:
            round_ = self._round(problem, run, candidates)
            for verifier in self._verifiers:
                try:
                    proposal, latency_ms = await self._timed(verifier, round_)
                except MeshError as error:
                    log.warning("verifier %s failed in iteration %d: %s: %s", verifier.name,
                                run.iteration, type(error).__name__, error.message)
                    self._failed(run, verifier.name, error)
                    continue
                run.ran.add(verifier.name)
                self._record(run, verifier.name, proposal, latency_ms)
                if proposal.verified and proposal.answer is not None:
                    run.accepted.add(proposal.answer)
                    run.last_agents.append(verifier.name)
        run.latest = {name: vote for name, vote in run.latest.items()
                      if vote.answer in run.accepted}

    @step_span("aggregate")
    def _aggregate(self, run: RunState) -> LoopState:
        if not run.latest:
            if self._verifiers:
                # Nothing verified yet: CHECK_CONSENSUS asks again while the budget lasts.
                run.tally = None
                return LoopState.CHECK_CONSENSUS
            if self._falls_back(run):
                log.warning("every proposer failed (%s): answering from the context alone",
                            ", ".join(name for name, _ in run.failures))
                run.degraded = True
                run.tally = Tally(answer="", confidence=0.0, consensus_score=0.0, agreed=False,
                                  verified=False)
                return LoopState.SYNTHESIZE
            raise self._no_answer(run)
        excluded: frozenset[str] = frozenset()
        for proposal in run.proposals.values():
            excluded |= proposal.excluded
        run.tally = aggregate(list(run.latest.values()), excluded, self._weights)
        if self._events is not None:
            self._events(TallyUpdated(run.iteration, run.tally, tuple(run.latest.values())))
        return LoopState.CHECK_CONSENSUS

    def _check_consensus(self, run: RunState) -> LoopState:
        if run.tally is None:  # verifier loops only: no answer passed verification yet
            if run.iteration >= run.budget.max_iterations or \
                    run.budget.deadline - time.monotonic() < MIN_ROUND_S:
                raise self._no_answer(run)
            return LoopState.ITERATE
        if run.tally.verified or (run.tally.agreed and self._settled(run)):
            run.consensus = True
            return LoopState.SYNTHESIZE
        if run.iteration >= run.budget.max_iterations:
            return LoopState.SYNTHESIZE
        if run.budget.deadline - time.monotonic() < MIN_ROUND_S:
            log.info("deadline near after iteration %d: synthesizing without consensus",
                     run.iteration)
            return LoopState.SYNTHESIZE
        return LoopState.ITERATE

    @staticmethod
    def _settled(run: RunState) -> bool:
        """No agent with a vote counted says its own answer is unsettled (`Proposal.settled`)."""
        return all(run.proposals[name].settled for name in run.latest if name in run.proposals)

    def features(self, run: RunState) -> np.ndarray:
        """The ten routing features of the run's current state (float32 [10])."""
        confidences = {vote.agent: vote.confidence for vote in run.votes}
        mcts = run.latest.get(AgentName.MCTS)
        state = RoutingState(
            confidences=confidences,
            mcts_value=mcts.value if mcts is not None and mcts.value is not None else None,
            consensus_score=run.tally.consensus_score if run.tally is not None else 0.0,
            last_agents=tuple(run.last_agents),
            iteration=run.iteration,
            max_iterations=run.budget.max_iterations,
            query_length_norm=self._query_length_norm,
            has_context=bool(run.context),
        )
        return routing_features(state)

    @agent_span
    async def _timed(self, agent: Agent, round_: Round) -> tuple[Proposal, float]:
        started = time.perf_counter()
        remaining = round_.remaining_s()
        if remaining <= 0:
            raise DeadlineExceeded(f"{agent.name}: no time left before the deadline")
        try:
            async with asyncio.timeout(remaining):
                proposal = await agent.propose(round_)
        except TimeoutError as error:
            raise DeadlineExceeded(f"{agent.name}: no answer before the deadline") from error
        return proposal, (time.perf_counter() - started) * 1e3

    def _record(self, run: RunState, name: AgentName, proposal: Proposal,
                latency_ms: float) -> None:
        run.proposals[name] = proposal
        if proposal.answer is None:
            # DEBUG: abstaining is the checker's normal answer on early positions (one per request).
            log.debug("agent %s abstained in iteration %d: %s", name, run.iteration,
                     proposal.rationale)
            return
        confidence = proposal.confidence
        if not math.isfinite(confidence):
            confidence = 0.0
        vote = Vote(agent=name, answer=proposal.answer, confidence=min(1.0, max(0.0, confidence)),
                    latency_ms=latency_ms, iteration=run.iteration, rationale=proposal.rationale,
                    value=proposal.value, verified=proposal.verified)
        run.votes.append(vote)
        if self._agents[name].role is not Role.CONTEXT:
            run.latest[name] = vote

    def _falls_back(self, run: RunState) -> bool:
        """The loop has a fallback, the context agents found something, and no proposer voted
        because they failed (not because they abstained)."""
        return self._fallback is not None and bool(run.context) and bool(run.failures)

    @staticmethod
    def _failed(run: RunState, name: AgentName, error: MeshError) -> None:
        run.failures.append((name, error))
        run.failure_iterations.append(run.iteration)

    def _check_time(self, run: RunState) -> None:
        if time.monotonic() >= run.budget.deadline:
            raise DeadlineExceeded("the deadline passed before any agent answered")

    def _no_answer(self, run: RunState) -> MeshError:
        """The error for a run in which no proposer voted."""
        if time.monotonic() >= run.budget.deadline:
            return DeadlineExceeded("the deadline passed before any agent answered")
        for _, error in run.failures:
            if not isinstance(error, DeadlineExceeded):
                return error
        if run.failures:
            return run.failures[0][1]
        if self._verifiers and run.votes:
            reasons = "; ".join(f"{name}: {proposal.rationale}"
                                for name, proposal in run.proposals.items())
            return FailedPrecondition(f"no proposal passed the checker ({reasons})")
        reasons = "; ".join(f"{name}: {proposal.rationale}"
                            for name, proposal in run.proposals.items())
        return FailedPrecondition(f"no agent proposed an answer ({reasons})")


def _result(run: RunState, answer: Any) -> LoopResult:
    """The LoopResult of a finished run."""
    if run.tally is None:  # DONE follows SYNTHESIZE only, which checked it
        raise RuntimeError("the consensus loop finished without a tally")
    agents_used: list[AgentName] = []
    for vote in run.votes:
        if vote.agent not in agents_used:
            agents_used.append(vote.agent)
    return LoopResult(
        answer=answer,
        tally=run.tally,
        consensus_reached=run.consensus,
        iterations=max(1, run.rounds_run),
        votes=tuple(run.votes),
        agents=tuple(agents_used),
        timings=tuple(run.timings),
        routes=tuple(run.routes),
        proposals=dict(run.proposals),
        failures=tuple(run.failures),
        degraded=run.degraded,
        failure_iterations=tuple(run.failure_iterations),
    )
