"""gRPC edge of the batched searches (`services.mcts.batched.search`): `Search` with rule PUCT or
Gumbel (leaves evaluated by rollouts or by the neural service) and the `SearchExternal` stream,
whose caller evaluates the leaves. Converts protos to core calls and validates input at the edge."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator

import grpc
import numpy as np
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2

from libs.connect4.board import Position
from libs.errors import DeadlineExceeded, InvalidArgument
from services.mcts.api.neural_client import NeuralPositionClient
from services.mcts.batched.evaluators import (
    GameEvaluator,
    NeuralConnectFourEvaluator,
    run_batched_async,
)
from services.mcts.batched.search import (
    BatchedConfig,
    BatchedResult,
    BatchedSearch,
    EvaluationError,
    run_batched,
)
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.core.tree import MIN_CAPACITY
from services.mcts.games.connect4 import GAME, from_position
from services.mcts.settings import (
    GUMBEL_NUM_CONSIDERED,
    MAX_BATCH_SIZE,
    MAX_SIMULATIONS,
    VIRTUAL_LOSS,
    MctsSettings,
)

RULES = {mcts_service_pb2.SELECTION_RULE_PUCT: "puct",
         mcts_service_pb2.SELECTION_RULE_GUMBEL: "gumbel"}
"""The core's rule for each batched SelectionRule."""


def _optional_int(message, name: str, field: str, default: int, low: int, high: int) -> int:
    value = getattr(message, name) if message.HasField(name) else default
    if not low <= value <= high:
        raise InvalidArgument(field, f"is {value}; must be in {low}..{high:,}")
    return value


def _optional_float(message, name: str, field: str, default: float, high: float = math.inf
                    ) -> float:
    value = getattr(message, name) if message.HasField(name) else default
    if not (math.isfinite(value) and 0 <= value <= high):
        raise InvalidArgument(field, f"is {value}; must be a finite number in [0, {high}]")
    return value


def _temperature(value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgument("settings.temperature", f"is {value}; must be a finite number >= 0")
    return value


def search_config(request: mcts_service_pb2.SearchRequest, settings: MctsSettings
                  ) -> BatchedConfig:
    """The batched search's options for a Search request with rule PUCT or Gumbel.

    Raises:
        InvalidArgument: "threads" above 1, "evaluator" unknown, "batch_size" outside 1..1,024,
            "virtual_loss" or "exploration" negative or not finite, "gumbel_num_considered"
            outside 1..127, "dirichlet_alpha" not finite and > 0, "dirichlet_epsilon" outside
            [0, 1], "temperature" negative or not finite. (Which rule reads which option is
            checked by `services.mcts.api.servicer.validate_rule_options` first.)
    """
    if request.HasField("threads") and request.threads != 1:
        raise InvalidArgument("threads", f"is {request.threads}; PUCT and Gumbel searches run "
                                         "one tree (threads must be 1)")
    if request.evaluator not in mcts_service_pb2.LeafEvaluator.values():
        raise InvalidArgument("evaluator", f"is {request.evaluator}; not a LeafEvaluator")
    neural = request.evaluator == mcts_service_pb2.LEAF_EVALUATOR_NEURAL
    default_batch = settings.neural_batch_size if neural else 1
    dirichlet_alpha = None
    if request.HasField("dirichlet_alpha"):
        if not (math.isfinite(request.dirichlet_alpha) and request.dirichlet_alpha > 0):
            raise InvalidArgument("dirichlet_alpha",
                                  f"is {request.dirichlet_alpha}; must be a finite number > 0")
        dirichlet_alpha = request.dirichlet_alpha
    return BatchedConfig(
        rule=RULES[request.rule],
        c_puct=_optional_float(request, "exploration", "exploration", settings.c_puct),
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_epsilon=_optional_float(request, "dirichlet_epsilon", "dirichlet_epsilon",
                                          settings.dirichlet_epsilon, 1.0),
        temperature=_optional_float(request, "temperature", "temperature", 0.0),
        virtual_loss=_optional_float(request, "virtual_loss", "virtual_loss", VIRTUAL_LOSS),
        batch_size=_optional_int(request, "batch_size", "batch_size", default_batch, 1,
                                 MAX_BATCH_SIZE),
        max_nodes=settings.max_tree_nodes,
        seed=request.seed,
        gumbel_num_considered=_optional_int(request, "gumbel_num_considered",
                                            "gumbel_num_considered", GUMBEL_NUM_CONSIDERED, 1,
                                            MAX_ACTIONS),
    )


def external_search(settings_message: mcts_service_pb2.ExternalSearchSettings,
                    settings: MctsSettings) -> BatchedSearch:
    """The search a SearchExternal stream asked for.

    Raises:
        InvalidArgument: a setting out of range, named "settings.<field>".
    """
    m = settings_message
    num_actions = m.num_actions
    if not 1 <= num_actions <= MAX_ACTIONS:
        raise InvalidArgument("settings.num_actions", f"is {num_actions}; must be in "
                                                      f"1..{MAX_ACTIONS}")
    if not 1 <= m.simulations <= MAX_SIMULATIONS:
        raise InvalidArgument("settings.simulations", f"is {m.simulations}; must be in "
                                                      f"1..{MAX_SIMULATIONS:,}")
    if m.rule == mcts_service_pb2.SELECTION_RULE_UNSPECIFIED:
        rule = "puct"
    elif m.rule in RULES:
        rule = RULES[m.rule]
    else:
        raise InvalidArgument("settings.rule", "must be SELECTION_RULE_PUCT or "
                                               "SELECTION_RULE_GUMBEL")
    players = _optional_int(m, "players", "settings.players", 2, 1, 2)
    dirichlet_alpha = None
    if m.HasField("dirichlet_alpha"):
        if not (math.isfinite(m.dirichlet_alpha) and m.dirichlet_alpha > 0):
            raise InvalidArgument("settings.dirichlet_alpha",
                                  f"is {m.dirichlet_alpha}; must be a finite number > 0")
        dirichlet_alpha = m.dirichlet_alpha
    max_nodes = settings.max_tree_nodes
    if m.HasField("max_nodes"):
        if m.max_nodes < MIN_CAPACITY:
            raise InvalidArgument("settings.max_nodes",
                                  f"is {m.max_nodes}; must be >= {MIN_CAPACITY}")
        max_nodes = min(max_nodes, m.max_nodes)
    config = BatchedConfig(
        rule=rule,
        c_puct=_optional_float(m, "c_puct", "settings.c_puct", settings.c_puct),
        virtual_loss=_optional_float(m, "virtual_loss", "settings.virtual_loss", VIRTUAL_LOSS),
        batch_size=_optional_int(m, "batch_size", "settings.batch_size", 1, 1, MAX_BATCH_SIZE),
        max_nodes=max_nodes,
        seed=m.seed,
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_epsilon=_optional_float(m, "dirichlet_epsilon", "settings.dirichlet_epsilon",
                                          settings.dirichlet_epsilon, 1.0),
        temperature=_temperature(m.temperature),
        gumbel_num_considered=_optional_int(m, "gumbel_num_considered",
                                            "settings.gumbel_num_considered",
                                            GUMBEL_NUM_CONSIDERED, 1,
                                            MAX_ACTIONS),
    )
    return BatchedSearch(num_actions, m.simulations, config, players=players)


def statistics(result: BatchedResult, seed: int, action_offset: int
               ) -> common_pb2.SearchStatistics:
    """SearchStatistics of a batched search; `actions` lists the actions with a root child
    (prior > 0), numbered from `action_offset` (1 for Connect Four columns, 0 otherwise)."""
    actions = [
        common_pb2.ActionStatistics(
            action=a + action_offset,
            visits=int(result.visits[a]),
            value=0.0 if math.isnan(result.values[a]) else float(result.values[a]),
            prior=float(result.priors[a]),
        )
        for a in range(len(result.priors))
        if result.priors[a] > 0
    ]
    return common_pb2.SearchStatistics(
        simulations=result.simulations,
        simulations_per_second=result.simulations_per_second,
        tree_size=result.tree_size,
        max_depth=result.max_depth,
        root_value=result.root_value,
        actions=actions,
        elapsed_ms=result.elapsed_s * 1e3,
        seed=seed,
        threads=1,
        tree_full=result.tree_full,
        collisions=result.collisions,
        evaluations=result.evaluations,
        batches=result.batches,
        batch_selection_ms=result.select_s * 1e3,
        evaluation_ms=result.evaluate_s * 1e3,
        batch_backup_ms=result.backup_s * 1e3,
    )


def submit_reply(search: BatchedSearch, batch_id: int, size: int,
                 reply: mcts_service_pb2.SearchExternalRequest) -> None:
    """Checks the caller's answer to batch `batch_id` (of `size` leaves) and submits it.

    Raises:
        InvalidArgument: "evaluations" missing, "evaluations.batch_id" not the batch's,
            "evaluations.leaves" of the wrong count, "evaluations.leaves[i].priors" of the wrong
            length, negative, not finite or all zero on a non-terminal leaf,
            "evaluations.leaves[i].value" outside [-1, 1] or not finite.
    """
    if reply.WhichOneof("message") != "evaluations":
        raise InvalidArgument("evaluations", "expected the evaluations of the last batch")
    answer = reply.evaluations
    if answer.batch_id != batch_id:
        raise InvalidArgument("evaluations.batch_id",
                              f"is {answer.batch_id}; the batch waiting is {batch_id}")
    if len(answer.leaves) != size:
        raise InvalidArgument("evaluations.leaves",
                              f"has {len(answer.leaves)} leaves; the batch has {size}")
    priors = np.zeros((size, search.num_actions), dtype=np.float64)
    values = np.empty(size, dtype=np.float64)
    terminal = np.empty(size, dtype=np.bool_)
    for i, leaf in enumerate(answer.leaves):
        if leaf.terminal and len(leaf.priors) == 0:
            pass
        elif len(leaf.priors) != search.num_actions:
            raise InvalidArgument(f"evaluations.leaves[{i}].priors",
                                  f"has {len(leaf.priors)} entries; num_actions is "
                                  f"{search.num_actions}")
        else:
            priors[i] = leaf.priors
        values[i] = leaf.value
        terminal[i] = leaf.terminal
    try:
        search.submit(priors, values, terminal)
    except EvaluationError as error:
        name = {"values": "value", "priors": "priors", "terminal": "terminal"}[error.argument]
        raise InvalidArgument(f"evaluations.leaves[{error.row}].{name}",
                              error.description) from error


class BatchedSearches:
    """Runs the batched searches of the mcts service.

    Args:
        settings: the service's settings.
        neural_channel: a channel to the neural service (for LEAF_EVALUATOR_NEURAL), owned by
            the caller.
    """

    def __init__(self, settings: MctsSettings, neural_channel: grpc.aio.Channel | None) -> None:
        self._settings = settings
        self._neural_channel = neural_channel

    async def search(self, request: mcts_service_pb2.SearchRequest, moves: str,
                     simulations: int, context: grpc.aio.ServicerContext
                     ) -> mcts_service_pb2.SearchResponse:
        """A Search request with rule PUCT or Gumbel; `moves` and `simulations` were validated
        by the caller. With a deadline, the search stops `deadline_margin_s` before it and returns
        the simulations done by then.

        Raises:
            InvalidArgument: see `search_config`.
            DeadlineExceeded: the deadline came before any simulation finished.
            NotFound, Unavailable: from the neural service (`NeuralPositionClient`).
        """
        config = search_config(request, self._settings)
        search = BatchedSearch(GAME.num_actions, simulations, config, players=GAME.players)
        remaining = context.time_remaining()
        margin = self._settings.deadline_margin_s
        if request.evaluator == mcts_service_pb2.LEAF_EVALUATOR_NEURAL:
            timeout = self._settings.neural_timeout_s
            if remaining is not None:
                timeout = max(1e-3, min(timeout, remaining - margin))
            client = NeuralPositionClient(self._neural_channel, request.model, timeout)
            loop = asyncio.get_running_loop()
            deadline = None if remaining is None else loop.time() + remaining - margin
            result = await run_batched_async(
                search, NeuralConnectFourEvaluator(moves, client), deadline)
        else:
            evaluator = GameEvaluator(GAME, from_position(Position.from_moves(moves)),
                                      seed=request.seed)
            deadline = None if remaining is None else time.monotonic() + remaining - margin
            stop = threading.Event()
            try:
                result = await asyncio.to_thread(run_batched, search, evaluator, deadline, stop)
            except asyncio.CancelledError:
                stop.set()
                raise
        if result.simulations == 0:
            raise DeadlineExceeded(
                f"the deadline left too little time for one simulation ({remaining} s)")
        return mcts_service_pb2.SearchResponse(
            best_action=result.action + 1,
            statistics=statistics(result, request.seed, action_offset=1))

    async def search_external(
        self, requests: AsyncIterator[mcts_service_pb2.SearchExternalRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[mcts_service_pb2.SearchExternalResponse]:
        """The SearchExternal stream (see the proto). Selection and backup run on the event loop
        between messages (microseconds per leaf).

        Raises:
            InvalidArgument: no settings first, a setting out of range ("settings.<field>"), or a
                malformed reply (see `submit_reply`); the stream ending before the result
                ("evaluations").
            DeadlineExceeded: no reply before the caller's deadline (without one, within
                `external_reply_timeout_s`); no partial result is sent.
        """
        iterator = aiter(requests)
        first = await self._next(iterator, context)
        if first is None or first.WhichOneof("message") != "settings":
            raise InvalidArgument("settings", "the first request must carry the settings")
        try:
            search = external_search(first.settings, self._settings)
        except ValueError as error:
            raise InvalidArgument("settings", str(error)) from error
        while (batch := search.next_batch()) is not None:
            yield mcts_service_pb2.SearchExternalResponse(batch=mcts_service_pb2.LeafBatch(
                batch_id=batch.batch_id,
                leaves=[mcts_service_pb2.Leaf(path=path) for path in batch.paths]))
            reply = await self._next(iterator, context)
            if reply is None:
                raise InvalidArgument("evaluations",
                                      f"the stream ended before batch {batch.batch_id} was "
                                      "answered")
            submit_reply(search, batch.batch_id, len(batch), reply)
        result = search.result()
        yield mcts_service_pb2.SearchExternalResponse(result=mcts_service_pb2.ExternalSearchResult(
            best_action=result.action, policy=result.policy.tolist(),
            statistics=statistics(result, first.settings.seed, action_offset=0)))

    async def _next(self, iterator, context: grpc.aio.ServicerContext):
        """The caller's next message, None at the end of its stream.

        Raises:
            DeadlineExceeded: none came before the deadline (see `search_external`).
        """
        remaining = context.time_remaining()
        timeout = self._settings.external_reply_timeout_s if remaining is None else remaining
        try:
            return await asyncio.wait_for(anext(iterator), timeout)
        except StopAsyncIteration:
            return None
        except TimeoutError as error:
            raise DeadlineExceeded(f"no reply from the caller within {timeout:.3f} s") from error
