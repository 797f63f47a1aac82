"""Response building of the orchestrator's gRPC edge: a finished loop's SolveProblemResponse or
AnswerQueryResponse, and the StreamSolveProblemResponse of each loop event."""

from __future__ import annotations

import math

from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.api.enums import AGENT_TO_PROTO, OUTCOME_TO_PROTO
from services.orchestrator.loop.events import (
    AgentFinished,
    AgentStarted,
    IterationStarted,
    LoopEvent,
    TallyUpdated,
)
from services.orchestrator.loop.types import AgentName, Decider, LoopResult, Vote
from services.orchestrator.problems.connect_four import ConnectFourAnswer
from services.orchestrator.problems.maze import MazeAnswer
from services.orchestrator.problems.sudoku import SudokuAnswer
from services.orchestrator.text.query import NoDefaultCollection, TextAnswer
from services.orchestrator.text.self_consistency import Sampling


def _votes(result: LoopResult) -> list[pb.AgentVote]:
    return [_vote(vote) for vote in result.votes]


def _vote(vote: Vote) -> pb.AgentVote:
    return pb.AgentVote(agent=AGENT_TO_PROTO[vote.agent], proposal=vote.answer,
                        confidence=vote.confidence, latency_ms=vote.latency_ms,
                        iteration=vote.iteration, rationale=vote.rationale)


def stream_event(event: LoopEvent, elapsed_ms: float) -> pb.StreamSolveProblemResponse:
    """The StreamSolveProblemResponse of one loop event, `elapsed_ms` after the request came."""
    out = pb.StreamSolveProblemResponse(iteration=event.iteration, elapsed_ms=elapsed_ms)
    if isinstance(event, IterationStarted):
        out.iteration_started.CopyFrom(pb.IterationStarted(
            agents=[AGENT_TO_PROTO[name] for name in event.agents],
            simulations=event.simulations, reason=event.reason))
    elif isinstance(event, AgentStarted):
        out.agent_started.agent = AGENT_TO_PROTO[event.agent]
    elif isinstance(event, AgentFinished):
        finished = out.agent_finished
        finished.agent = AGENT_TO_PROTO[event.agent]
        finished.latency_ms = event.latency_ms
        proposal = event.proposal
        if event.error is not None:
            finished.error_code = event.error.code.name
            finished.error_message = event.error.message
        elif proposal is not None and proposal.answer is None:
            finished.abstain_reason = proposal.rationale or "abstained"
        elif proposal is not None:
            confidence = proposal.confidence if math.isfinite(proposal.confidence) else 0.0
            finished.vote.CopyFrom(pb.AgentVote(
                agent=finished.agent, proposal=proposal.answer,
                confidence=min(1.0, max(0.0, confidence)), latency_ms=event.latency_ms,
                iteration=event.iteration, rationale=proposal.rationale))
    elif isinstance(event, TallyUpdated):
        tally = event.tally
        out.tally.CopyFrom(pb.RoundTally(
            answer=tally.answer, confidence=tally.confidence,
            consensus_score=tally.consensus_score, agreed=tally.agreed, verified=tally.verified,
            votes=[_vote(vote) for vote in event.votes]))
    else:
        raise TypeError(f"not a LoopEvent: {type(event).__name__}")
    return out


def _failures(result: LoopResult) -> list[pb.AgentFailure]:
    iterations = result.failure_iterations or (0,) * len(result.failures)
    return [pb.AgentFailure(agent=AGENT_TO_PROTO[name], code=error.code.name,
                            message=error.message, iteration=iteration)
            for (name, error), iteration in zip(result.failures, iterations, strict=True)]


def _timings(result: LoopResult) -> list[pb.StepTiming]:
    return [pb.StepTiming(step=t.step, iteration=t.iteration, elapsed_ms=t.elapsed_ms)
            for t in result.timings]


def solve_response(result: LoopResult[ConnectFourAnswer | SudokuAnswer | MazeAnswer],
                   thread_id: str) -> pb.SolveProblemResponse:
    """The SolveProblemResponse of a finished loop; statistics of the newest search, if any."""
    answer = result.answer
    answered_by = next(vote.agent for vote in result.votes
                       if vote.answer == result.tally.answer)
    response = pb.SolveProblemResponse(
        confidence=result.tally.confidence,
        votes=_votes(result),
        agents=[AGENT_TO_PROTO[name] for name in result.agents],
        answered_by=AGENT_TO_PROTO[answered_by],
        iterations=result.iterations,
        consensus_reached=result.consensus_reached,
        timings=_timings(result),
        thread_id=thread_id,
        failures=_failures(result),
        route_decider=(pb.ROUTE_DECIDER_LEARNED
                       if any(d.decided_by is Decider.LEARNED for d in result.routes)
                       else pb.ROUTE_DECIDER_RULES),
        route_confidence=next((d.confidence for d in result.routes if d.confidence is not None),
                              0.0),
    )
    if isinstance(answer, ConnectFourAnswer):
        response.connect_four.CopyFrom(pb.ConnectFourAnswer(
            column=answer.column, value=answer.value, outcome=OUTCOME_TO_PROTO[answer.outcome],
            score=answer.score))
    elif isinstance(answer, SudokuAnswer):
        response.sudoku.CopyFrom(pb.SudokuAnswer(solution=answer.solution, valid=answer.valid))
    else:
        response.maze.CopyFrom(pb.MazeAnswer(grid=answer.grid, path_length=answer.path_length,
                                             optimal=answer.optimal))
    search = result.proposals.get(AgentName.MCTS)
    if search is not None and isinstance(search.detail, common_pb2.SearchStatistics):
        response.search_statistics.CopyFrom(search.detail)
    return response


def query_response(result: LoopResult[TextAnswer], thread_id: str,
                   sampling: Sampling | None = None) -> pb.AnswerQueryResponse:
    """The AnswerQueryResponse of a finished loop, with the self-consistency drafts, their votes,
    tokens, cost and why sampling stopped when `sampling` is given."""
    answer = result.answer
    response = pb.AnswerQueryResponse(
        answer=answer.answer,
        confidence=result.tally.confidence,
        sources=[pb.Source(document_id=p.document_id, title=p.title, text=p.text, score=p.score,
                           source=p.source) for p in answer.sources],
        votes=_votes(result),
        agents=[AGENT_TO_PROTO[name] for name in result.agents],
        provider=answer.provider,
        offline=answer.offline,
        iterations=result.iterations,
        timings=_timings(result),
        thread_id=thread_id,
        failures=_failures(result),
        passages_only=answer.passages_only,
    )
    retrieval = result.proposals.get(AgentName.RETRIEVAL)
    response.ungrounded = retrieval is not None and isinstance(retrieval.detail,
                                                               NoDefaultCollection)
    if sampling is not None:
        _add_drafts(response, result, sampling)
    elif answer.draft is not None:
        draft = answer.draft
        response.prompt_tokens = draft.prompt_tokens
        response.completion_tokens = draft.completion_tokens
        response.total_tokens = draft.prompt_tokens + draft.completion_tokens
        response.cost_usd = draft.cost_usd or 0.0
        response.cost_known = draft.cost_usd is not None
        response.finish_reason = draft.finish_reason
    return response


def _add_drafts(response: pb.AnswerQueryResponse, result: LoopResult[TextAnswer],
                sampling: Sampling) -> None:
    """Fills `drafts`, `stop_reason`, `total_tokens`, `cost_usd` and `cost_known`."""
    counts = sampling.tally()
    if not sampling.offline:
        response.drafts.extend(
            pb.TextDraft(text=draft.text, answer=draft.answer,
                         votes=counts[draft.answer] if draft.votes else 0,
                         iteration=draft.iteration, provider=draft.provider, model=draft.model,
                         total_tokens=draft.total_tokens, cost_usd=draft.cost_usd or 0.0)
            for draft in sampling.drafts)
    if not sampling.stop_reason and sampling.wants_more():
        sampling.stop_reason = (f"iteration limit: {result.iterations} iteration(s) run, "
                                f"agreement {sampling.share():.2f} < "
                                f"{sampling.options.agreement:.2f}")
    response.stop_reason = sampling.stop_reason
    response.total_tokens = sampling.total_tokens
    response.prompt_tokens = sampling.prompt_tokens
    response.completion_tokens = sampling.completion_tokens
    response.cost_usd = sampling.cost_usd
    response.cost_known = sampling.cost_known

