"""gRPC edge of the orchestrator: each RPC parses and validates its request (`requests`), runs
the work within the caller's deadline (`solves`, `queries`, `ingest`, `documents`) and answers
the contract's response (`responses`).

Every field is validated before any downstream call: a bad one raises `InvalidArgument` naming
the proto field. Downstream failures arrive as domain errors from the agents
(`libs.errors.propagate`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.telemetry import set_work_attributes
from services.orchestrator.api.answer_stream import stream_answer
from services.orchestrator.api.documents import Documents
from services.orchestrator.api.ingest import ingest, stream_ingest
from services.orchestrator.api.queries import Queries
from services.orchestrator.api.requests import parse_query, parse_solve, sampling_options
from services.orchestrator.api.responses import stream_event
from services.orchestrator.api.roles import role_options
from services.orchestrator.api.solves import Solves
from services.orchestrator.loop.admission import RunningSolves
from services.orchestrator.loop.checkpoint import Durable
from services.orchestrator.loop.events import EventSink, LoopEvent
from services.orchestrator.routing.log import RoutingLog
from services.orchestrator.routing.selection import AgentSet, Routers
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.reasoning import RoleServices

DEADLINE_MARGIN_S = 0.25
"""At most this much of the caller's deadline (and at most 5% of it) is kept back for answering."""


class OrchestratorServicer(orchestrator_service_pb2_grpc.OrchestratorServiceServicer):
    """mesh.orchestrator.v1.OrchestratorService over the consensus loop.

    Args:
        settings: the orchestrator's settings (budgets, defaults, per-call deadlines).
        agents: the agents of games, text queries and puzzles, and the quick checker.
        routers: the rule routers and the neural service's predictors (`Routers()`: the rules
            alone).
        routing_log: where every request's routing decisions and outcome are appended; None
            logs nothing.
        roles: what the text roles (decompose, refine, the search over steps) call; requests
            that ask for one are FAILED_PRECONDITION when None.
        retrieval: the retrieval stub behind the document RPCs.
    """

    def __init__(self, settings: OrchestratorSettings, agents: AgentSet,
                 routers: Routers | None = None, routing_log: RoutingLog | None = None,
                 roles: RoleServices | None = None,
                 retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub | None = None
                 ) -> None:
        self._settings = settings
        self._agents = agents
        self._routers = routers or Routers()
        self._retrieval = retrieval
        self._documents = Documents(retrieval, settings.retrieval_deadline_s,
                                    settings.ingest_deadline_s)
        self._admission = RunningSolves(settings.max_running_solves)
        self._solves = Solves(settings, agents, self._routers, routing_log, self._admission)
        self._queries = Queries(settings, agents, self._routers, routing_log, roles)

    async def SolveProblem(self, request: pb.SolveProblemRequest,
                           context: grpc.aio.ServicerContext,
                           events: EventSink | None = None,
                           durable: Durable | None = None) -> pb.SolveProblemResponse:
        """Runs the loop on the request's problem: a Connect Four position, a Sudoku or a maze.
        `events` (StreamSolveProblem's) receives the loop's progress; `durable` (a durable
        run's execution, `api/run_execution.py`) its events and checkpoints, and resumes it.

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
        solve = parse_solve(request, self._settings, self._agents, self._routers)
        deadline = self._deadline(context)
        return await self._solves.run(kind, solve, request.seed, request.thread_id, deadline,
                                      events, durable)

    async def StreamSolveProblem(self, request: pb.StreamSolveProblemRequest,
                                 context: grpc.aio.ServicerContext
                                 ) -> AsyncIterator[pb.StreamSolveProblemResponse]:
        """SolveProblem, yielding one event per step of the loop as it happens and the
        SolveProblemResponse last (see `loop/events.py` for what is emitted when).

        The loop runs in its own task; when the caller goes away (the generator is closed or
        cancelled) the task is cancelled, so no work goes on for nobody.

        Raises:
            the errors of SolveProblem; a bad request fails before any event.
        """
        started = time.perf_counter()
        queue: asyncio.Queue[pb.StreamSolveProblemResponse | None] = asyncio.Queue()
        sink = _QueueSink(queue, started)
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
                          context: grpc.aio.ServicerContext,
                          durable: Durable | None = None,
                          events: EventSink | None = None) -> pb.AnswerQueryResponse:
        """Retrieves passages and drafts an answer grounded in them. When the gateway fails or
        does not answer before the deadline, the answer is the passages alone, flagged
        `passages_only`, with the failure in `failures`. With no collection named and the
        default one missing (a fresh mesh), the answer has no sources and is `ungrounded`.
        `durable`: as for SolveProblem (the drafts' loop only; a text role runs again from its
        start when resumed); `events` (StreamAnswerQuery's) receives the drafts' loop events.

        Raises:
            InvalidArgument: "query", "collection", "top_k", "mcts_iterations", "thread_id",
                the sampling fields, "role", "step_branching", "max_steps" or "max_refinements"
                is bad.
            FailedPrecondition: a role or the search (mcts_iterations) is asked for and only the
                offline provider answers (a language model is needed), or no role is configured.
            NotFound: the collection the request named does not exist.
            Unavailable: retrieval is down, or the gateway is and no passage matched.
            DeadlineExceeded: the deadline passed first (or while it waited for one of
                `max_running_solves`, which queries share with solves).
        """
        set_work_attributes({"mesh.problem.kind": "text_query"})
        problem = parse_query(request, self._settings)
        options = sampling_options(request, self._settings)
        chosen_role = role_options(request, self._settings, options)
        deadline = self._deadline(context)
        async with self._admission.hold(deadline):
            return await self._queries.answer(request, problem, options, chosen_role, deadline,
                                              durable, events)

    async def StreamAnswerQuery(self, request: pb.StreamAnswerQueryRequest,
                                context: grpc.aio.ServicerContext
                                ) -> AsyncIterator[pb.StreamAnswerQueryResponse]:
        """AnswerQuery, streamed (`answer_stream.stream_answer`): on the single-draft path
        (sample_count 1, no role) the passages and the draft's text deltas as the gateway
        streams them, on the others the loop's events and the answer in one delta; then the
        AnswerQueryResponse. A caller that leaves cancels the work and the gateway's stream.

        Raises:
            the errors of AnswerQuery; a bad request fails before any message.
        """
        started = time.perf_counter()
        answer_request = pb.AnswerQueryRequest.FromString(request.SerializeToString())
        self.validate(answer_request)
        single_draft = (sampling_options(answer_request, self._settings).sample_count == 1
                        and role_options(answer_request, self._settings,
                                         sampling_options(answer_request, self._settings))
                        is None)
        async for message in stream_answer(
                lambda events: self.AnswerQuery(answer_request, context, events=events),
                started, single_draft):
            yield message

    def validate(self, request: pb.SolveProblemRequest | pb.AnswerQueryRequest) -> None:
        """The checks SolveProblem or AnswerQuery make of `request` before any work, alone (what
        RunService's CreateRun and CreateBatch check up front).

        Raises:
            InvalidArgument: naming the request's field, as SolveProblem / AnswerQuery would.
        """
        if isinstance(request, pb.SolveProblemRequest):
            parse_solve(request, self._settings, self._agents, self._routers)
            return
        parse_query(request, self._settings)
        role_options(request, self._settings, sampling_options(request, self._settings))

    async def IngestDocuments(self, request: pb.IngestDocumentsRequest,
                              context: grpc.aio.ServicerContext) -> pb.IngestDocumentsResponse:
        """Forwards the documents to RetrievalService.IngestDocuments (see `ingest.ingest`)."""
        return await ingest(self._retrieval, request, context.time_remaining(),
                            self._settings.ingest_deadline_s)

    async def StreamIngestDocuments(self, request_iterator,
                                    context: grpc.aio.ServicerContext
                                    ) -> pb.StreamIngestDocumentsResponse:
        """Forwards a stream of documents to RetrievalService.StreamIngestDocuments (see
        `ingest.stream_ingest`)."""
        return await stream_ingest(self._retrieval, request_iterator, context.time_remaining(),
                                   self._settings.ingest_deadline_s)

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


class _QueueSink:
    """StreamSolveProblem's event sink: each loop event's response on the queue, with the
    milliseconds since `started` (`time.perf_counter()`)."""

    def __init__(self, queue: asyncio.Queue, started: float) -> None:
        self._queue = queue
        self._started = started

    def __call__(self, event: LoopEvent) -> None:
        self._queue.put_nowait(stream_event(event, (time.perf_counter() - self._started) * 1e3))
