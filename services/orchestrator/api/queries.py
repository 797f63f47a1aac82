"""AnswerQuery's work once validated and admitted: self-consistent drafts in the consensus loop,
or a text role (decompose, refine, search) beside it, as the request or the text router chose;
each answered as an AnswerQueryResponse and written to the routing log."""

from __future__ import annotations

import logging
import time

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import DeadlineExceeded, FailedPrecondition, NotFound, Unavailable
from services.orchestrator.api.answer_stream import prestart_draft
from services.orchestrator.api.enums import decider_to_proto
from services.orchestrator.api.responses import query_response
from services.orchestrator.api.roles import (
    ROLE_TO_PROTO,
    failed_role_response,
    role_options,
    role_response,
)
from services.orchestrator.loop.checkpoint import Durable
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.events import EventSink
from services.orchestrator.loop.tracing import observe_result, observe_role
from services.orchestrator.loop.types import Budget
from services.orchestrator.routing.log import RoutingLog, log_loop, role_record, text_fields
from services.orchestrator.routing.predictors import TextRoutePredictor
from services.orchestrator.routing.selection import AgentSet, Routers, learned_text_role
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import (
    TextAnswer,
    TextProblem,
    synthesize_passages,
    synthesize_text,
)
from services.orchestrator.text.reasoning import RoleServices, answer_with_role
from services.orchestrator.text.roles import Ledger, RoleOptions, TextRole
from services.orchestrator.text.self_consistency import Sampling, SamplingOptions

log = logging.getLogger(__name__)


class Queries:
    """Answers validated text queries (see `answer`)."""

    def __init__(self, settings: OrchestratorSettings, agents: AgentSet, routers: Routers,
                 routing_log: RoutingLog | None, roles: RoleServices | None) -> None:
        self._settings = settings
        self._agents = agents
        self._routers = routers
        self._routing_log = routing_log
        self._roles = roles

    async def answer(self, request: pb.AnswerQueryRequest, problem: TextProblem,
                     options: SamplingOptions, chosen_role: RoleOptions | None,
                     deadline: float, durable: Durable | None = None,
                     events: EventSink | None = None) -> pb.AnswerQueryResponse:
        """The request's role when it names one; else the text router's when it is followed
        and can run; else drafts in the loop (whose events and checkpoints go to a durable
        run's `durable`, which may resume it; or its events to `events`, a streamed answer's)."""
        if chosen_role is not None:
            return await self._with_role(problem, chosen_role, request.thread_id, deadline,
                                         "request", None)
        confidence: float | None = None
        decided_by = "rules"
        predictor = self._routers.text_predictor
        if predictor is not None and request.role == pb.TEXT_ROLE_UNSPECIFIED:
            role, learned, confidence, why_not = await self._learned_role(
                predictor, request, problem, options, deadline)
            if learned is not None:
                try:
                    return await self._with_role(problem, learned, request.thread_id,
                                                 deadline, "learned", confidence)
                except FailedPrecondition as error:  # e.g. only the offline provider answers
                    log.info("text router's %s role cannot run (%s); the rules decide",
                             learned.role, error.message)
            elif role is TextRole.DRAFT:
                decided_by = "learned"
            else:
                log.debug("text query left to the rules: %s", why_not)
        return await self._drafts(request, problem, options, deadline, decided_by, confidence,
                                  durable, events)

    async def _drafts(self, request: pb.AnswerQueryRequest, problem: TextProblem,
                      options: SamplingOptions, deadline: float, decided_by: str,
                      confidence: float | None, durable: Durable | None = None,
                      events: EventSink | None = None) -> pb.AnswerQueryResponse:
        """Drafts (self-consistent when the request samples) in the consensus loop."""
        sampling = Sampling(options) if options.sample_count > 1 else None
        loop: ConsensusLoop[TextAnswer] = ConsensusLoop(
            self._agents.for_text(sampling), self._routers.text, synthesize_text,
            problem.query_length_norm, fallback=synthesize_passages,
            events=durable.events if durable is not None else events,
            checkpoints=durable.checkpoints if durable is not None else None)
        budget = Budget(max_iterations=self._settings.text_max_iterations, deadline=deadline)
        started = time.perf_counter()
        if sampling is None and durable is None:
            prestart_draft(self._agents.text, problem, deadline)  # a streamed fresh mesh's draft
        result = await loop.run(problem, budget, durable.resume if durable is not None else None)
        observe_result("text_query", result)
        response = query_response(result, request.thread_id, sampling)
        response.role = pb.TEXT_ROLE_DRAFT
        response.route_decider = decider_to_proto(decided_by)
        response.route_confidence = confidence or 0.0
        log_loop(self._routing_log, "text", problem.query, request.thread_id, result, started,
                 text_fields(str(TextRole.DRAFT), decided_by, confidence, response.provider,
                             response.offline, response.total_tokens, response.cost_usd))
        return response

    async def _learned_role(self, predictor: TextRoutePredictor, request: pb.AnswerQueryRequest,
                            problem: TextProblem, options: SamplingOptions, deadline: float
                            ) -> tuple[TextRole | None, RoleOptions | None, float | None, str]:
        """The role the text router (`predictor`) chose for `problem` when it is followed (its
        probability clears `text_router_threshold` and the role can run here), else None; that
        role's limits (None for drafts, which run in the consensus loop); the router's
        probability of its choice (None when it did not answer); and why it is not followed."""
        available = [TextRole.DRAFT]
        if self._roles is not None:
            available += [TextRole.DECOMPOSE, TextRole.REFINE]
            if self._roles.mcts is not None:
                available.append(TextRole.SEARCH)
        role, confidence, why_not = await learned_text_role(
            predictor, problem.query, deadline - time.monotonic(),
            self._settings.text_router_threshold, available)
        if role is None or role is TextRole.DRAFT:
            return role, None, confidence, why_not
        routed = pb.AnswerQueryRequest()
        routed.CopyFrom(request)
        routed.role = ROLE_TO_PROTO[role]
        if role is TextRole.SEARCH:
            routed.mcts_iterations = self._settings.text_router_search_iterations
        return role, role_options(routed, self._settings, options), confidence, ""

    async def _with_role(self, problem: TextProblem, options: RoleOptions, thread_id: str,
                         deadline: float, decided_by: str,
                         confidence: float | None) -> pb.AnswerQueryResponse:
        """Retrieves the problem's passages, then runs the role (`answer_with_role`). A failed
        gateway or mcts service answers the passages alone (`passages_only`), as drafts do.
        `decided_by` ("request", "learned") and `confidence` (the text router's) are logged and
        answered as `route_decider` / `route_confidence`.

        Raises:
            FailedPrecondition: no role is configured here, or only the offline provider answers.
            NotFound: the collection the request named does not exist (the default one, not
                named, is searched as empty: the response is `ungrounded`).
            Unavailable, DeadlineExceeded: retrieval failed, or time ran out.
        """
        if self._roles is None:
            raise FailedPrecondition(f"the {options.role} role is not configured here")
        started = time.perf_counter()
        timeout = min(self._roles.retrieval_deadline_s, deadline - time.monotonic())
        if timeout <= 0:
            raise DeadlineExceeded("retrieval: no time left for a search")
        missing = False
        try:
            passages = await self._roles.retrieve(problem, timeout)
        except NotFound:
            if problem.collection_named:
                raise
            passages, missing = (), True  # a fresh mesh: the default collection is not there
        timings = [pb.StepTiming(step="retrieve", iteration=1,
                                 elapsed_ms=(time.perf_counter() - started) * 1e3)]
        response = await self._run_role(self._roles, problem, options, thread_id, deadline,
                                        passages, timings)
        response.ungrounded = missing
        response.route_decider = decider_to_proto(decided_by)
        response.route_confidence = confidence or 0.0
        if self._routing_log is not None:
            self._routing_log.write(role_record(
                problem.query, thread_id, response.answer, response.confidence,
                (time.perf_counter() - started) * 1e3,
                text_fields(str(options.role), decided_by, confidence, response.provider,
                            response.offline, response.total_tokens, response.cost_usd)))
        return response

    @staticmethod
    async def _run_role(roles: RoleServices, problem: TextProblem, options: RoleOptions,
                        thread_id: str, deadline: float, passages: list,
                        timings: list[pb.StepTiming]) -> pb.AnswerQueryResponse:
        """The role's response over the retrieved `passages`; the passages alone when the
        gateway or the mcts service failed."""
        retrieved = time.perf_counter()
        ledger = Ledger(options.max_tokens, options.max_cost_usd)
        try:
            result, ledger, provider = await answer_with_role(
                problem, passages, options, roles, deadline, ledger)
        except (Unavailable, DeadlineExceeded) as error:
            observe_role(str(options.role), ledger)
            if error.failed_service not in ("llm", "mcts"):
                raise
            timings.append(pb.StepTiming(step=str(options.role), iteration=1,
                                         elapsed_ms=(time.perf_counter() - retrieved) * 1e3))
            return failed_role_response(options.role, error, ledger, passages, thread_id,
                                        timings)
        observe_role(str(options.role), ledger)
        elapsed_ms = (time.perf_counter() - retrieved) * 1e3
        timings.append(pb.StepTiming(step=str(options.role), iteration=1, elapsed_ms=elapsed_ms))
        return role_response(result, ledger, provider, passages, thread_id, timings, elapsed_ms)
