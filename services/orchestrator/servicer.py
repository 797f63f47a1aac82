"""gRPC edge of the orchestrator: validates requests, runs the consensus loop within the caller's
deadline, and turns its result into the contract's responses.

Every field is validated here, before any downstream call: a bad one raises `InvalidArgument` naming
the proto field. Downstream failures arrive as domain errors from the agents
(`libs.errors.propagate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc

from libs.connect4 import IllegalPosition, Position
from libs.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    MeshError,
    Unavailable,
)
from libs.telemetry import set_work_attributes
from services.orchestrator.agents.reasoning import ModelBackedAgent
from services.orchestrator.api.roles import (
    ROLE_TO_PROTO,
    failed_role_response,
    role_options,
    role_response,
)
from services.orchestrator.documents import Documents, retrieval_error, validate_document_fields
from services.orchestrator.loop.consensus import ConsensusLoop
from services.orchestrator.loop.events import (
    AgentFinished,
    AgentStarted,
    EventSink,
    IterationStarted,
    LoopEvent,
    TallyUpdated,
)
from services.orchestrator.loop.routing import Router, RoutingState, routing_features
from services.orchestrator.loop.tracing import observe_result, observe_role
from services.orchestrator.loop.types import (
    Agent,
    AgentName,
    Budget,
    Decider,
    LoopResult,
    Role,
    Vote,
)
from services.orchestrator.metrics import SOLVES_WAITING
from services.orchestrator.problems.connect_four import (
    ConnectFourAnswer,
    ConnectFourProblem,
    Outcome,
    synthesize_connect_four,
)
from services.orchestrator.problems.maze import MazeAnswer, parse_maze_grid, synthesize_maze
from services.orchestrator.problems.sudoku import SudokuAnswer, parse_sudoku, synthesize_sudoku
from services.orchestrator.routing.learned import LearnedRouter, choose_text_role
from services.orchestrator.routing.log import RoutingLog, role_record, routing_record, text_fields
from services.orchestrator.routing.predictors import RoutePredictor, TextRoutePredictor
from services.orchestrator.routing.rules import (
    DEEP_SEARCH_FACTOR,
    PuzzleRouter,
    Route,
    RuleRouter,
    TextRouter,
)
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.query import (
    MAX_QUERY_CHARS,
    TextAnswer,
    TextProblem,
    synthesize_passages,
    synthesize_text,
)
from services.orchestrator.text.reasoning import RoleServices, answer_with_role
from services.orchestrator.text.roles import Ledger, RoleOptions, TextRole
from services.orchestrator.text.self_consistency import Sampling, SamplingOptions

log = logging.getLogger(__name__)

MAX_SIMULATIONS = 10_000_000
MAX_ITERATIONS = 10
MAX_TOP_K = 20
MAX_MCTS_ITERATIONS = 10_000
MAX_DOCUMENTS = 10_000
THREAD_ID = re.compile(r"[a-zA-Z0-9_-]{1,100}")
COLLECTION = re.compile(r"[a-zA-Z0-9_-]{1,64}")

AGENT_TO_PROTO = {
    AgentName.MCTS: pb.AGENT_MCTS,
    AgentName.NEURAL: pb.AGENT_NEURAL,
    AgentName.CHECKER: pb.AGENT_CHECKER,
    AgentName.RETRIEVAL: pb.AGENT_RETRIEVAL,
    AgentName.LLM: pb.AGENT_LLM,
    AgentName.SOLVER: pb.AGENT_SOLVER,
    AgentName.HRM: pb.AGENT_HRM,
    AgentName.TRM: pb.AGENT_TRM,
}
PROTO_TO_AGENT = {value: key for key, value in AGENT_TO_PROTO.items()}
OUTCOME_TO_PROTO = {
    None: pb.OUTCOME_UNSPECIFIED,
    Outcome.WIN: pb.OUTCOME_WIN,
    Outcome.DRAW: pb.OUTCOME_DRAW,
    Outcome.LOSS: pb.OUTCOME_LOSS,
}
CONNECT_FOUR_AGENTS = (AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL)
"""Agents that apply to a Connect Four position, in the order they vote (ties go to the first)."""
PUZZLE_AGENTS = (AgentName.HRM, AgentName.TRM, AgentName.SOLVER, AgentName.CHECKER)
"""Agents that apply to a Sudoku or a maze: the proposers in routing order (the learned models
first, the exact solver when they fail), then the checker, which verifies every answer and takes
part whether named or not. HRM and TRM serve a grid only when the neural service has a model for
it (`ModelBackedAgent.model_for`)."""

DEADLINE_MARGIN_S = 0.25
"""At most this much of the caller's deadline (and at most 5% of it) is kept back for answering."""


class OrchestratorServicer(orchestrator_service_pb2_grpc.OrchestratorServiceServicer):
    """mesh.orchestrator.v1.OrchestratorService over the consensus loop.

    Args:
        settings: the orchestrator's settings (budgets, defaults, per-call deadlines).
        game_agents: the agents that can vote on a Connect Four position (some of checker, mcts,
            neural); a request may narrow them.
        text_agents: the agents of a text query (retrieval as context, then the LLM).
        retrieval: the retrieval stub used by IngestDocuments.
        router: picks the next agents of games and text queries; `RuleRouter` when None.
        puzzle_agents: the agents of Sudoku and maze problems: proposers (HRM and TRM, which
            are `ModelBackedAgent`s, and the exact solver) and the checker (a VERIFIER), which
            must be among them when any are.
        puzzle_router: picks the next puzzle agents; `PuzzleRouter` when None.
        route_predictor: the neural service's meta-controller; when set, a Connect Four request
            asks it for the first round's agents and follows it above `router_threshold`
            (`LearnedRouter`); None: the rules alone.
        quick_checker: the checker on the quick budget (`routing.QUICK_CHECKER_MAX_NODES`),
            run instead of the checker when the followed route says "checker@quick"; None: such
            routes are left to the rules.
        routing_log: where every request's routing decisions and outcome are appended; None
            logs nothing.
        roles: what the text roles (decompose, refine, the search over steps) call; requests
            that ask for one are FAILED_PRECONDITION when None.
        text_route_predictor: the neural service's text router; when set, a text query that
            names no role asks it which role answers and follows it above
            `text_router_threshold` (`choose_text_role`); None: the rules (drafts).
    """

    def __init__(self, settings: OrchestratorSettings, game_agents: Sequence[Agent],
                 text_agents: Sequence[Agent],
                 retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub,
                 router: Router | None = None, puzzle_agents: Sequence[Agent] = (),
                 puzzle_router: Router | None = None,
                 route_predictor: RoutePredictor | None = None,
                 routing_log: RoutingLog | None = None,
                 roles: RoleServices | None = None,
                 quick_checker: Agent | None = None,
                 text_route_predictor: TextRoutePredictor | None = None) -> None:
        self._settings = settings
        self._text_route_predictor = text_route_predictor
        self._quick_checker = quick_checker
        self._route_predictor = route_predictor
        self._routing_log = routing_log
        self._roles = roles
        self._game_agents = {agent.name: agent for agent in game_agents}
        self._text_agents = list(text_agents)
        self._retrieval = retrieval
        self._documents = Documents(retrieval, settings.retrieval_deadline_s,
                                    settings.ingest_deadline_s)
        self._router = router or RuleRouter()
        self._text_router = router or TextRouter()
        self._puzzle_agents = {agent.name: agent for agent in puzzle_agents}
        if self._puzzle_agents and not any(agent.role is Role.VERIFIER
                                           for agent in puzzle_agents):
            raise ValueError("puzzle agents need the checker (a VERIFIER agent)")
        self._puzzle_router = puzzle_router or PuzzleRouter()
        self._running_solves = (asyncio.Semaphore(settings.max_running_solves)
                                 if settings.max_running_solves else None)

    async def SolveProblem(self, request: pb.SolveProblemRequest,
                           context: grpc.aio.ServicerContext,
                           events: EventSink | None = None) -> pb.SolveProblemResponse:
        """Runs the loop on the request's problem: a Connect Four position, a Sudoku or a maze.
        `events` (StreamSolveProblem's) receives the loop's progress.

        Raises:
            InvalidArgument: "problem", "connect_four.moves", "sudoku.puzzle", "sudoku.box_rows",
                "sudoku.box_cols", "maze.grid", "agents", "simulations", "max_iterations" or
                "thread_id" is bad (a Sudoku with no solution is found by the solver and reported
                on "sudoku.puzzle" too).
            FailedPrecondition: the request names AGENT_HRM or AGENT_TRM and the neural service
                has no model of that architecture for the grid, or no proposal passed the
                checker.
            Unavailable: every agent that ran failed (their services are down).
            DeadlineExceeded: the deadline passed before any agent answered.
        """
        kind = request.WhichOneof("problem") or "unspecified"
        set_work_attributes({"mesh.problem.kind": kind})
        problem, agents, router, synthesize = self._validate_solve(request)
        validate_thread_id(request.thread_id)
        deadline = self._deadline(context)
        if agents is None:
            agents = await self._puzzle_agents_for(request.agents, problem, deadline)
        simulations = (request.simulations if request.HasField("simulations")
                       else self._settings.default_simulations)
        max_iterations = (request.max_iterations if request.HasField("max_iterations")
                          else self._settings.max_iterations)
        async with self._running_solve(deadline):
            started = time.perf_counter()
            predictor = self._route_predictor
            if isinstance(problem, ConnectFourProblem) and predictor is not None:
                router, agents, route = await self._learned_router(
                    predictor, problem, agents, max_iterations, deadline, router)
                if route is not None and route.deep_search:
                    simulations = min(simulations * DEEP_SEARCH_FACTOR, MAX_SIMULATIONS)
            loop: ConsensusLoop = ConsensusLoop(agents, router, synthesize,
                                                problem.query_length_norm, events=events)
            budget = Budget(max_iterations=max_iterations, deadline=deadline,
                            simulations=simulations,
                            max_simulations=max(simulations, self._settings.max_simulations),
                            seed=request.seed)
            result = await loop.run(problem, budget)
        observe_result(kind, result)
        self._log_routes(kind, problem_text(problem), request.thread_id, result, started)
        return solve_response(result, request.thread_id)

    @contextlib.asynccontextmanager
    async def _running_solve(self, deadline: float) -> AsyncIterator[None]:
        """Holds one of `max_running_solves` for a solve's consensus loop; a solve waits for one
        in arrival order, until `deadline` (`time.monotonic()`) at most. No limit at 0.

        Raises:
            DeadlineExceeded: the deadline passed while the solve waited.
        """
        slots = self._running_solves
        if slots is None:
            yield
            return
        SOLVES_WAITING.inc()
        try:
            await asyncio.wait_for(slots.acquire(), max(0.0, deadline - time.monotonic()))
        except TimeoutError as error:
            raise DeadlineExceeded(
                f"the deadline passed while {self._settings.max_running_solves} other solves "
                "and queries ran (ORCHESTRATOR_MAX_RUNNING_SOLVES)") from error
        finally:
            SOLVES_WAITING.dec()
        try:
            yield
        finally:
            slots.release()

    async def _learned_router(self, predictor: RoutePredictor, problem: ConnectFourProblem,
                              agents: list[Agent], max_iterations: int, deadline: float,
                              rules: Router) -> tuple[Router, list[Agent], Route | None]:
        """A `LearnedRouter` over `rules`, with `predictor`'s prediction for the first round's
        features (known before any agent runs), the request's agents (the checker replaced by
        the quick checker when the followed route asks for it), and the followed route (None:
        the rules decide)."""
        first = routing_features(RoutingState(
            confidences={}, mcts_value=None, consensus_score=0.0, last_agents=(), iteration=1,
            max_iterations=max_iterations, query_length_norm=problem.query_length_norm,
            has_context=False))
        prediction = await predictor.predict([first], deadline - time.monotonic())
        learned = LearnedRouter(prediction, self._settings.router_threshold, rules,
                                quick_checker=self._quick_checker is not None,
                                network_check_below=self._settings.router_network_check_below)
        route, _ = learned.choice([agent.name for agent in agents])
        if route is not None and route.quick_checker:
            agents = [self._quick_checker if agent.name is AgentName.CHECKER
                      and self._quick_checker is not None else agent for agent in agents]
        return learned, agents, route

    def _log_routes(self, kind: str, query: str, thread_id: str, result: LoopResult,
                    started: float, extra: dict[str, Any] | None = None) -> None:
        """Appends the request's routing record (with `extra` fields) to the routing log, when
        there is one."""
        if self._routing_log is not None:
            self._routing_log.write({**routing_record(
                kind, query, thread_id, result, (time.perf_counter() - started) * 1e3),
                **(extra or {})})

    async def StreamSolveProblem(self, request: pb.StreamSolveProblemRequest,
                                 context: grpc.aio.ServicerContext
                                 ) -> AsyncIterator[pb.StreamSolveProblemResponse]:
        """SolveProblem, yielding one event per step of the loop as it happens and the
        SolveProblemResponse last (see `events.py` for what is emitted when).

        The loop runs in its own task; when the caller goes away (the generator is closed or
        cancelled) the task is cancelled, so no work goes on for nobody.

        Raises:
            the errors of SolveProblem; a bad request fails before any event.
        """
        started = time.perf_counter()
        queue: asyncio.Queue[pb.StreamSolveProblemResponse | None] = asyncio.Queue()

        def sink(event: LoopEvent) -> None:
            queue.put_nowait(stream_event(event, (time.perf_counter() - started) * 1e3))

        solve_request = pb.SolveProblemRequest.FromString(request.SerializeToString())
        solve = asyncio.ensure_future(self.SolveProblem(solve_request, context, sink))
        solve.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            response = solve.result()  # raises the loop's error
            yield pb.StreamSolveProblemResponse(
                iteration=response.iterations,
                elapsed_ms=(time.perf_counter() - started) * 1e3, response=response)
        finally:
            solve.cancel()

    async def AnswerQuery(self, request: pb.AnswerQueryRequest,
                          context: grpc.aio.ServicerContext) -> pb.AnswerQueryResponse:
        """Retrieves passages and drafts an answer grounded in them. When the gateway fails or
        does not answer before the deadline, the answer is the passages alone, flagged
        `passages_only`, with the failure in `failures`.

        Raises:
            InvalidArgument: "query", "collection", "top_k", "mcts_iterations", "thread_id",
                the sampling fields, "role", "step_branching", "max_steps" or "max_refinements"
                is bad.
            FailedPrecondition: a role or the search (mcts_iterations) is asked for and only the
                offline provider answers (a language model is needed), or no role is configured.
            NotFound: the collection does not exist.
            Unavailable: retrieval is down, or the gateway is and no passage matched.
            DeadlineExceeded: the deadline passed first (or while it waited for one of
                `max_running_solves`, which queries share with solves).
        """
        set_work_attributes({"mesh.problem.kind": "text_query"})
        problem = self._validate_query(request)
        options = sampling_options(request, self._settings)
        chosen_role = role_options(request, self._settings, options)
        deadline = self._deadline(context)
        async with self._running_solve(deadline):
            return await self._answer_query(request, problem, options, chosen_role, deadline)

    async def _answer_query(self, request: pb.AnswerQueryRequest, problem: TextProblem,
                            options: SamplingOptions, chosen_role: RoleOptions | None,
                            deadline: float) -> pb.AnswerQueryResponse:
        """AnswerQuery's work, once validated and holding a running-solves slot."""
        if chosen_role is not None:
            return await self._answer_with_role(problem, chosen_role, request.thread_id,
                                                deadline, "request", None)
        confidence: float | None = None
        decided_by = "rules"
        predictor = self._text_route_predictor
        if predictor is not None and request.role == pb.TEXT_ROLE_UNSPECIFIED:
            role, learned, confidence, why_not = await self._learned_role(
                predictor, request, problem, options, deadline)
            if learned is not None:
                try:
                    return await self._answer_with_role(problem, learned, request.thread_id,
                                                        deadline, "learned", confidence)
                except FailedPrecondition as error:  # e.g. only the offline provider answers
                    log.info("text router's %s role cannot run (%s); the rules decide",
                             learned.role, error.message)
            elif role is TextRole.DRAFT:
                decided_by = "learned"
            else:
                log.debug("text query left to the rules: %s", why_not)
        sampling = Sampling(options) if options.sample_count > 1 else None
        agents = [agent.for_request(sampling)
                  if sampling is not None and hasattr(agent, "for_request") else agent
                  for agent in self._text_agents]
        loop: ConsensusLoop[TextAnswer] = ConsensusLoop(
            agents, self._text_router, synthesize_text, problem.query_length_norm,
            fallback=synthesize_passages)
        budget = Budget(max_iterations=self._settings.text_max_iterations, deadline=deadline)
        started = time.perf_counter()
        result = await loop.run(problem, budget)
        observe_result("text_query", result)
        response = query_response(result, request.thread_id, sampling)
        response.role = pb.TEXT_ROLE_DRAFT
        response.route_decider = (pb.ROUTE_DECIDER_LEARNED if decided_by == "learned"
                                  else pb.ROUTE_DECIDER_RULES)
        response.route_confidence = confidence or 0.0
        self._log_routes("text", problem.query, request.thread_id, result, started,
                         text_fields(str(TextRole.DRAFT), decided_by, confidence,
                                     response.provider,
                                     response.offline, response.total_tokens,
                                     response.cost_usd))
        return response

    async def _learned_role(self, predictor: TextRoutePredictor, request: pb.AnswerQueryRequest,
                            problem: TextProblem, options: SamplingOptions, deadline: float
                            ) -> tuple[TextRole | None, RoleOptions | None, float | None, str]:
        """The role the text router (`predictor`) chose for `problem` when it is followed (its
        probability clears `text_router_threshold` and the role can run here), else None; that
        role's limits (None for drafts, which run in the consensus loop); the router's probability
        of its choice (None when it did not answer); and why it is not followed."""
        prediction = await predictor.predict_text(problem.query, deadline - time.monotonic())
        if prediction is None:
            return None, None, None, "no text router prediction"
        available = [TextRole.DRAFT]
        if self._roles is not None:
            available += [TextRole.DECOMPOSE, TextRole.REFINE]
            if self._roles.mcts is not None:
                available.append(TextRole.SEARCH)
        role, confidence, why_not = choose_text_role(prediction, self._settings
                                                     .text_router_threshold, available)
        if role is None or role is TextRole.DRAFT:
            return role, None, confidence, why_not
        routed = pb.AnswerQueryRequest()
        routed.CopyFrom(request)
        routed.role = ROLE_TO_PROTO[role]
        if role is TextRole.SEARCH:
            routed.mcts_iterations = self._settings.text_router_search_iterations
        return role, role_options(routed, self._settings, options), confidence, ""

    async def _answer_with_role(self, problem: TextProblem, options: RoleOptions,
                                thread_id: str, deadline: float, decided_by: str,
                                confidence: float | None) -> pb.AnswerQueryResponse:
        """Retrieves the problem's passages, then runs the role (`answer_with_role`). A failed
        gateway or mcts service answers the passages alone (`passages_only`), as drafts do.
        `decided_by` ("request", "learned") and `confidence` (the text router's) are logged and
        answered as `route_decider` / `route_confidence`.

        Raises:
            FailedPrecondition: no role is configured here, or only the offline provider answers.
            NotFound, Unavailable, DeadlineExceeded: retrieval failed, or time ran out.
        """
        if self._roles is None:
            raise FailedPrecondition(f"the {options.role} role is not configured here")
        started = time.perf_counter()
        timeout = min(self._roles.retrieval_deadline_s, deadline - time.monotonic())
        if timeout <= 0:
            raise DeadlineExceeded("retrieval: no time left for a search")
        passages = await self._roles.retrieve(problem, timeout)
        retrieved = time.perf_counter()
        timings = [pb.StepTiming(step="retrieve", iteration=1,
                                 elapsed_ms=(retrieved - started) * 1e3)]
        ledger = Ledger(options.max_tokens, options.max_cost_usd)
        try:
            result, ledger, provider = await answer_with_role(
                problem, passages, options, self._roles, deadline, ledger)
        except (Unavailable, DeadlineExceeded) as error:
            observe_role(str(options.role), ledger)
            if error.failed_service not in ("llm", "mcts"):
                raise
            timings.append(pb.StepTiming(step=str(options.role), iteration=1,
                                         elapsed_ms=(time.perf_counter() - retrieved) * 1e3))
            response = failed_role_response(options.role, error, ledger, passages, thread_id,
                                            timings)
        else:
            observe_role(str(options.role), ledger)
            elapsed_ms = (time.perf_counter() - retrieved) * 1e3
            timings.append(pb.StepTiming(step=str(options.role), iteration=1,
                                         elapsed_ms=elapsed_ms))
            response = role_response(result, ledger, provider, passages, thread_id, timings,
                                     elapsed_ms)
        response.route_decider = (pb.ROUTE_DECIDER_LEARNED if decided_by == "learned"
                                  else pb.ROUTE_DECIDER_RULES)
        response.route_confidence = confidence or 0.0
        if self._routing_log is not None:
            self._routing_log.write(role_record(
                problem.query, thread_id, response.answer, response.confidence,
                (time.perf_counter() - started) * 1e3,
                text_fields(str(options.role), decided_by, confidence, response.provider,
                            response.offline, response.total_tokens, response.cost_usd)))
        return response

    async def IngestDocuments(self, request: pb.IngestDocumentsRequest,
                              context: grpc.aio.ServicerContext) -> pb.IngestDocumentsResponse:
        """Forwards the documents to RetrievalService.IngestDocuments.

        Raises:
            InvalidArgument: "collection" or "documents" (or one document's id or text) is bad.
            Unavailable: retrieval is down. DeadlineExceeded: the deadline passed first.
        """
        validate_collection(request.collection, required=True)
        validate_documents(request.documents)
        remaining = context.time_remaining()
        timeout = self._settings.ingest_deadline_s if remaining is None \
            else min(self._settings.ingest_deadline_s, remaining)
        if timeout <= 0:
            raise DeadlineExceeded("no time left to ingest")
        try:
            response = await self._retrieval.IngestDocuments(
                retrieval_service_pb2.IngestDocumentsRequest(
                    collection=request.collection, documents=request.documents),
                timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise retrieval_error(error) from error
        return pb.IngestDocumentsResponse(
            document_count=response.document_count, chunk_count=response.chunk_count,
            skipped_document_count=response.skipped_document_count,
            updated_document_count=response.updated_document_count)

    async def StreamIngestDocuments(self, request_iterator,
                                    context: grpc.aio.ServicerContext
                                    ) -> pb.StreamIngestDocumentsResponse:
        """Forwards a stream of documents to RetrievalService.StreamIngestDocuments, message by
        message (retrieval validates each; a bad message ends the stream with its error).

        Raises:
            InvalidArgument: a message's collection or documents are bad (from retrieval).
            Unavailable: retrieval is down. DeadlineExceeded: the deadline passed first.
        """
        remaining = context.time_remaining()
        timeout = self._settings.ingest_deadline_s if remaining is None else remaining

        async def forward():
            async for request in request_iterator:
                yield retrieval_service_pb2.StreamIngestDocumentsRequest(
                    collection=request.collection, documents=request.documents)

        try:
            response = await self._retrieval.StreamIngestDocuments(forward(), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise retrieval_error(error) from error
        return pb.StreamIngestDocumentsResponse(
            document_count=response.document_count, chunk_count=response.chunk_count,
            skipped_document_count=response.skipped_document_count,
            updated_document_count=response.updated_document_count)

    async def GetDocument(self, request, context):
        """Forwards to RetrievalService.GetDocument (see `documents.Documents`)."""
        return await self._documents.get(request, context)

    async def ListDocuments(self, request, context):
        """Forwards to RetrievalService.ListDocuments (see `documents.Documents`)."""
        return await self._documents.list(request, context)

    async def DeleteDocument(self, request, context):
        """Forwards to RetrievalService.DeleteDocument (see `documents.Documents`)."""
        return await self._documents.delete(request, context)

    async def DeleteCollection(self, request, context):
        """Forwards to RetrievalService.DeleteCollection (see `documents.Documents`)."""
        return await self._documents.delete_collection(request, context)

    def _deadline(self, context: grpc.aio.ServicerContext) -> float:
        """The loop's `time.monotonic()` deadline: the caller's, less a margin for answering."""
        remaining = context.time_remaining()
        if remaining is None:
            remaining = self._settings.request_deadline_s
        margin = min(DEADLINE_MARGIN_S, 0.05 * max(0.0, remaining))
        return time.monotonic() + remaining - margin

    def _validate_solve(self, request: pb.SolveProblemRequest
                        ) -> tuple[Any, list[Agent] | None, Router, Callable]:
        """The problem, its agents (None for a puzzle: `_puzzle_agents_for` asks the neural
        service which models it has), its router and its synthesizer, after validating every
        field."""
        kind = request.WhichOneof("problem")
        if kind is None:
            raise InvalidArgument("problem", "set exactly one problem: connect_four, sudoku or "
                                             "maze")
        problem: Any
        if kind == "connect_four":
            problem = ConnectFourProblem(parse_position(request.connect_four.moves))
            names = validate_agents(request.agents, CONNECT_FOUR_AGENTS)
            missing = [name for name in names if name not in self._game_agents]
            if missing:
                raise InvalidArgument("agents", f"{', '.join(missing)} is not configured here")
            agents = [self._game_agents[name] for name in names]
            router, synthesize = self._router, functools.partial(synthesize_connect_four,
                                                                 problem)
        else:
            if kind == "sudoku":
                sudoku = request.sudoku
                problem = parse_sudoku(
                    sudoku.puzzle,
                    sudoku.box_rows if sudoku.HasField("box_rows") else None,
                    sudoku.box_cols if sudoku.HasField("box_cols") else None)
                synthesize = functools.partial(synthesize_sudoku, problem)
            else:
                problem = parse_maze_grid(request.maze.grid)
                synthesize = functools.partial(synthesize_maze, problem)
            if request.agents:
                names = validate_agents(request.agents, PUZZLE_AGENTS)
                if names == [AgentName.CHECKER]:
                    raise InvalidArgument("agents", "AGENT_CHECKER only verifies answers; allow "
                                                    "a proposer too, e.g. AGENT_SOLVER")
            agents = None
            router = self._puzzle_router
        if request.HasField("simulations") and not 1 <= request.simulations <= MAX_SIMULATIONS:
            raise InvalidArgument("simulations", f"is {request.simulations}; must be in "
                                                 f"1..{MAX_SIMULATIONS:,}")
        if request.HasField("max_iterations") and \
                not 1 <= request.max_iterations <= MAX_ITERATIONS:
            raise InvalidArgument("max_iterations", f"is {request.max_iterations}; must be in "
                                                    f"1..{MAX_ITERATIONS}")
        return problem, agents, router, synthesize

    async def _puzzle_agents_for(self, requested: Sequence[int], problem: Any,
                                 deadline: float) -> list[Agent]:
        """The agents of a Sudoku or maze request: the requested proposers, or, when none are
        named, HRM and TRM where the neural service has a model for the grid and the exact
        solver; always the checker.

        A named HRM/TRM whose model lookup fails (the neural service is down) still takes part,
        so the loop reports its failure, or the solver answers beside it; an unnamed one is left
        out.

        Raises:
            InvalidArgument: "agents" names an agent that does not apply.
            FailedPrecondition: "agents" names AGENT_HRM or AGENT_TRM and the neural service has
                no model of that architecture for the grid, or names an agent not configured
                here.
        """
        names = validate_agents(requested, PUZZLE_AGENTS) if requested else list(PUZZLE_AGENTS)
        chosen: list[Agent] = []
        for name in names:
            agent = self._puzzle_agents.get(name)
            label = pb.Agent.Name(AGENT_TO_PROTO[name])
            if agent is None:
                if requested:
                    raise FailedPrecondition(f"{label}: it is not configured here; use "
                                             f"AGENT_SOLVER")
                continue
            if agent.role is not Role.PROPOSER:
                continue
            if isinstance(agent, ModelBackedAgent):
                try:
                    model = await agent.model_for(problem, deadline - time.monotonic())
                except MeshError as error:
                    if not requested:
                        log.warning("leaving %s out: listing the neural service's models "
                                    "failed: %s", name, error.message)
                        continue
                    chosen.append(agent)  # its failure is reported by the loop
                    continue
                if model is None:
                    if requested:
                        raise FailedPrecondition(
                            f"{label}: the neural service has no {name.value} model for "
                            f"{problem.model_task}; use AGENT_SOLVER")
                    continue
            chosen.append(agent)
        if not chosen:  # only when none are named: a named proposer is chosen or refused
            raise FailedPrecondition("no puzzle agent is configured here")
        verifiers = [agent for agent in self._puzzle_agents.values()
                     if agent.role is Role.VERIFIER]
        return chosen + verifiers

    def _validate_query(self, request: pb.AnswerQueryRequest) -> TextProblem:
        if not request.query.strip():
            raise InvalidArgument("query", "must not be empty")
        if len(request.query) > MAX_QUERY_CHARS:
            raise InvalidArgument("query", f"has {len(request.query)} characters; at most "
                                           f"{MAX_QUERY_CHARS:,}")
        validate_collection(request.collection, required=False)
        top_k = request.top_k if request.HasField("top_k") else self._settings.default_top_k
        if not 1 <= top_k <= MAX_TOP_K:
            raise InvalidArgument("top_k", f"is {top_k}; must be in 1..{MAX_TOP_K}")
        validate_thread_id(request.thread_id)
        if request.HasField("mcts_iterations"):
            if not 1 <= request.mcts_iterations <= MAX_MCTS_ITERATIONS:
                raise InvalidArgument("mcts_iterations", f"is {request.mcts_iterations}; must be "
                                                         f"in 1..{MAX_MCTS_ITERATIONS:,}")
        if request.search_mode not in common_pb2.SearchMode.values():
            raise InvalidArgument("search_mode", f"is {request.search_mode}; not a SearchMode")
        if request.fusion not in common_pb2.FusionMethod.values():
            raise InvalidArgument("fusion", f"is {request.fusion}; not a FusionMethod")
        return TextProblem(request.query, request.collection or self._settings.default_collection,
                           top_k, request.search_mode, request.fusion)


MAX_SAMPLE_COUNT = 20
MAX_TEXT_TOKENS = 10_000_000
MAX_COST_USD = 1_000.0


def sampling_options(request: pb.AnswerQueryRequest,
                     settings: OrchestratorSettings) -> SamplingOptions:
    """The request's self-consistency options, the settings filling what it leaves unset.

    Raises:
        InvalidArgument: "sample_count" outside 1..20, "temperature" outside 0..2,
            "max_tokens" outside 1..10,000,000 or "max_cost_usd" outside 0..1,000 (or not a
            number).
    """
    count = request.sample_count if request.HasField("sample_count") \
        else settings.text_sample_count
    if not 1 <= count <= MAX_SAMPLE_COUNT:
        raise InvalidArgument("sample_count", f"is {count}; must be in 1..{MAX_SAMPLE_COUNT}")
    temperature = request.temperature if request.HasField("temperature") \
        else settings.text_temperature
    if not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
        raise InvalidArgument("temperature", f"is {temperature}; must be in 0..2")
    max_tokens = request.max_tokens if request.HasField("max_tokens") else None
    if max_tokens is not None and not 1 <= max_tokens <= MAX_TEXT_TOKENS:
        raise InvalidArgument("max_tokens", f"is {max_tokens}; must be in 1..{MAX_TEXT_TOKENS:,}")
    max_cost = request.max_cost_usd if request.HasField("max_cost_usd") else None
    if max_cost is not None and not (math.isfinite(max_cost) and 0.0 <= max_cost <= MAX_COST_USD):
        raise InvalidArgument("max_cost_usd", f"is {max_cost}; must be in 0..{MAX_COST_USD:,.0f}")
    return SamplingOptions(sample_count=count, temperature=temperature,
                           agreement=settings.text_agreement, max_tokens=max_tokens,
                           max_cost_usd=max_cost, draft_tokens=settings.max_answer_tokens)


def problem_text(problem: Any) -> str:
    """The problem as the routing log writes it: the move string of a Connect Four position, the
    grid of a Sudoku or a maze."""
    if isinstance(problem, ConnectFourProblem):
        return problem.position.moves
    for attribute in ("puzzle", "grid"):
        value = getattr(problem, attribute, None)
        if isinstance(value, str):
            return value
    return ""


def parse_position(moves: str) -> Position:
    """The position of a Pons move string.

    Raises:
        InvalidArgument: "connect_four.moves" malformed, illegal, or a finished game.
    """
    try:
        position = Position.from_moves(moves)
    except IllegalPosition as error:
        raise InvalidArgument("connect_four.moves", error.message) from error
    if position.won:
        raise InvalidArgument("connect_four.moves", "the game is over: the last move made four "
                                                    "in a row")
    if position.is_full:
        raise InvalidArgument("connect_four.moves", "the game is over: the board is full")
    return position


def validate_agents(requested: Sequence[int], applicable: Sequence[AgentName]) -> list[AgentName]:
    """The agents to run: `applicable` when none are requested, else the requested ones (in the
    order of `applicable`, duplicates dropped).

    Raises:
        InvalidArgument: "agents" holds AGENT_UNSPECIFIED, an unknown value, or an agent that does
            not apply to the problem.
    """
    if not requested:
        return list(applicable)
    chosen: set[AgentName] = set()
    for index, value in enumerate(requested):
        if value == pb.AGENT_UNSPECIFIED:
            raise InvalidArgument("agents", f"agents[{index}] is AGENT_UNSPECIFIED")
        if value not in PROTO_TO_AGENT:
            raise InvalidArgument("agents", f"agents[{index}] is {value}, not an Agent")
        name = PROTO_TO_AGENT[value]
        if name not in applicable:
            raise InvalidArgument(
                "agents", f"{pb.Agent.Name(value)} does not apply to this problem; use "
                          f"{', '.join(pb.Agent.Name(AGENT_TO_PROTO[a]) for a in applicable)}")
        chosen.add(name)
    return [name for name in applicable if name in chosen]


def validate_thread_id(thread_id: str) -> None:
    """Raises InvalidArgument("thread_id") unless empty or ^[a-zA-Z0-9_-]{1,100}$."""
    if thread_id and not THREAD_ID.fullmatch(thread_id):
        raise InvalidArgument("thread_id", "must match ^[a-zA-Z0-9_-]{1,100}$")


def validate_collection(collection: str, required: bool) -> None:
    """Raises InvalidArgument("collection") unless it matches ^[a-zA-Z0-9_-]{1,64}$ (or is empty
    and not `required`)."""
    if not collection and not required:
        return
    if not COLLECTION.fullmatch(collection):
        raise InvalidArgument("collection", "must match ^[a-zA-Z0-9_-]{1,64}$")


def validate_documents(documents: Sequence[common_pb2.Document]) -> None:
    """Raises InvalidArgument on "documents" (count outside 1..10,000), on
    "documents[i].id" / "documents[i].text" (empty) or on "documents[i].id" / ".title" /
    ".source" (longer than 1,024 / 1,024 / 2,048 characters)."""
    if not 1 <= len(documents) <= MAX_DOCUMENTS:
        raise InvalidArgument("documents", f"has {len(documents)} documents; must be 1.."
                                           f"{MAX_DOCUMENTS:,}")
    for index, document in enumerate(documents):
        if not document.id:
            raise InvalidArgument(f"documents[{index}].id", "must not be empty")
        if not document.text.strip():
            raise InvalidArgument(f"documents[{index}].text", "must not be empty")
    validate_document_fields(documents)


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
    if sampling is not None:
        _add_drafts(response, result, sampling)
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
    response.cost_usd = sampling.cost_usd
    response.cost_known = sampling.cost_known

