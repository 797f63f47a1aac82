"""The mcts service's one servicer: `Search` (UCT by rollouts in a worker thread of the search
queue; PUCT or Gumbel with leaves evaluated by rollouts or by the neural service) and the
`SearchExternal` stream, whose caller evaluates the leaves. Requests are parsed by
`api.requests` and `api.external`, results converted by `api.responses`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial

import grpc
from mesh.mcts.v1 import mcts_service_pb2 as pb
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.errors import DeadlineExceeded, InvalidArgument
from libs.telemetry import set_work_attributes
from services.mcts import metrics
from services.mcts.api.external import external_search, submit_reply
from services.mcts.api.neural_client import NeuralPositionClient
from services.mcts.api.requests import ParsedSearch, parse_search
from services.mcts.api.responses import to_external_result, to_response
from services.mcts.api.scheduling import SearchQueue
from services.mcts.batched.evaluators import (
    GameEvaluator,
    NeuralConnectFourEvaluator,
    run_batched_async,
)
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig
from services.mcts.core.result import SearchResult, SearchStopped
from services.mcts.games.connect4 import COLUMN_OFFSET, from_position, game
from services.mcts.rollout.connect4 import search_position
from services.mcts.settings import MctsSettings


class MctsServicer(mcts_service_pb2_grpc.MctsServiceServicer):
    """mesh.mcts.v1.MctsService.

    Args:
        settings: the service's settings.
        neural_channel: a channel to the neural service (for LEAF_EVALUATOR_NEURAL), owned by
            the caller.
    """

    def __init__(self, settings: MctsSettings,
                 neural_channel: grpc.aio.Channel | None = None) -> None:
        self._settings = settings
        self._neural_channel = neural_channel
        self.searches = SearchQueue(settings.search_slots)
        """Where UCT searches wait for one of `search_slots` threads, earliest deadline first."""
        metrics.SEARCHES_WAITING.set_function(lambda: self.searches.waiting)

    async def Search(self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
                     ) -> pb.SearchResponse:
        """`_search`, counted in the searches-running gauge; a finished search's simulations, rate
        and tree size go to the metrics and the SERVER span."""
        with metrics.SEARCHES_RUNNING.track_inprogress():
            response = await self._search(request, context)
        stats = response.statistics
        metrics.observe_search(stats.simulations, stats.simulations_per_second, stats.tree_size)
        set_work_attributes({
            "mesh.problem.kind": "connect_four",
            "mesh.mcts.rule": pb.SelectionRule.Name(request.rule),
            "mesh.mcts.simulations": stats.simulations,
            "mesh.mcts.simulations_per_second": stats.simulations_per_second,
            "mesh.mcts.tree_nodes": stats.tree_size,
            "mesh.mcts.threads": stats.threads,
        })
        return response

    async def _search(self, request: pb.SearchRequest, context: grpc.aio.ServicerContext
                      ) -> pb.SearchResponse:
        """Runs the request's search within the caller's deadline: with one, the search stops
        `deadline_margin_s` before it and returns the simulations done by then
        (`statistics.simulations` may be below the request's). A cancelled call stops its
        search.

        Raises:
            InvalidArgument: see `api.requests.parse_search`.
            DeadlineExceeded: the deadline came before any simulation finished.
            NotFound, Unavailable: from the neural service (`NeuralPositionClient`).
        """
        parsed = parse_search(request, self._settings)
        remaining = context.time_remaining()
        if isinstance(parsed.config, BatchedConfig):
            result = await self._batched(parsed, request, remaining)
        else:
            result = await self._rollout(parsed, remaining)
        if result.simulations == 0:
            raise DeadlineExceeded(
                f"the deadline left too little time for one simulation ({remaining} s)")
        return to_response(result)

    async def _rollout(self, parsed: ParsedSearch, remaining: float | None) -> SearchResult:
        """A UCT search in a worker thread of `searches`, after the waiting searches with
        earlier deadlines (`scheduling.SearchQueue`); the event loop stays free."""
        deadline = None if remaining is None else time.monotonic() + remaining
        stop = threading.Event()
        stop_at = None if deadline is None else deadline - self._settings.deadline_margin_s
        try:
            return await self.searches.run(deadline, partial(
                search_position, parsed.root, parsed.simulations, parsed.config, parsed.threads,
                deadline=stop_at, stop=stop))
        except asyncio.CancelledError:
            stop.set()
            raise
        except SearchStopped as error:
            raise DeadlineExceeded(
                f"the deadline left too little time for one simulation ({remaining} s)"
            ) from error

    async def _batched(self, parsed: ParsedSearch, request: pb.SearchRequest,
                       remaining: float | None) -> SearchResult:
        """A PUCT or Gumbel search, its leaves evaluated by the neural service (on the event
        loop, between its calls) or by rollouts (in a worker thread)."""
        root_game = game(parsed.root.board)
        search = BatchedSearch(root_game.num_actions, parsed.simulations, parsed.config,
                               players=root_game.players)
        margin = self._settings.deadline_margin_s
        if request.evaluator == pb.LEAF_EVALUATOR_NEURAL:
            timeout = self._settings.neural_timeout_s
            if remaining is not None:
                timeout = max(1e-3, min(timeout, remaining - margin))
            client = NeuralPositionClient(self._neural_channel, request.model, timeout,
                                          parsed.root.board)
            loop = asyncio.get_running_loop()
            deadline = None if remaining is None else loop.time() + remaining - margin
            result = await run_batched_async(
                search, NeuralConnectFourEvaluator(parsed.root, client), deadline)
        else:
            evaluator = GameEvaluator(root_game, from_position(parsed.root), seed=request.seed)
            deadline = None if remaining is None else time.monotonic() + remaining - margin
            stop = threading.Event()
            try:
                result = await asyncio.to_thread(run_batched, search, evaluator, deadline, stop)
            except asyncio.CancelledError:
                stop.set()
                raise
        return replace(result, action_offset=COLUMN_OFFSET)

    async def SearchExternal(self, request_iterator: AsyncIterator[pb.SearchExternalRequest],
                             context: grpc.aio.ServicerContext
                             ) -> AsyncIterator[pb.SearchExternalResponse]:
        """The SearchExternal stream (see the proto). Selection and backup run on the event loop
        between messages (microseconds per leaf).

        Raises:
            InvalidArgument: no settings first, a setting out of range ("settings.<field>"), or a
                malformed reply (see `api.external.submit_reply`); the stream ending before the
                result ("evaluations").
            DeadlineExceeded: no reply before the caller's deadline (without one, within
                `external_reply_timeout_s`); no partial result is sent.
        """
        iterator = aiter(request_iterator)
        first = await self._next(iterator, context)
        if first is None or first.WhichOneof("message") != "settings":
            raise InvalidArgument("settings", "the first request must carry the settings")
        try:
            search = external_search(first.settings, self._settings)
        except ValueError as error:
            raise InvalidArgument("settings", str(error)) from error
        while (batch := search.next_batch()) is not None:
            yield pb.SearchExternalResponse(batch=pb.LeafBatch(
                batch_id=batch.batch_id,
                leaves=[pb.Leaf(path=path) for path in batch.paths]))
            reply = await self._next(iterator, context)
            if reply is None:
                raise InvalidArgument("evaluations",
                                      f"the stream ended before batch {batch.batch_id} was "
                                      "answered")
            submit_reply(search, batch.batch_id, len(batch), reply)
        yield to_external_result(search.result())

    async def _next(self, iterator, context: grpc.aio.ServicerContext):
        """The caller's next message, None at the end of its stream.

        Raises:
            DeadlineExceeded: none came before the deadline (see `SearchExternal`).
        """
        remaining = context.time_remaining()
        timeout = self._settings.external_reply_timeout_s if remaining is None else remaining
        try:
            return await asyncio.wait_for(anext(iterator), timeout)
        except StopAsyncIteration:
            return None
        except TimeoutError as error:
            raise DeadlineExceeded(f"no reply from the caller within {timeout:.3f} s") from error
