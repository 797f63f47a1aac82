"""gRPC edge of the mcts service: validates SearchRequest, runs `uct_search` in a worker thread
within the caller's deadline, and turns the SearchResult into a SearchResponse."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from dataclasses import dataclass

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.connect4.board import IllegalPosition, Position
from libs.errors import DeadlineExceeded, InvalidArgument
from libs.telemetry import set_work_attributes
from services.mcts import metrics
from services.mcts.api.batched_servicer import MAX_BATCH_SIZE, RULES, BatchedSearches
from services.mcts.api.scheduling import SearchQueue
from services.mcts.rollout.connect4 import SearchResult, SearchStopped, uct_search
from services.mcts.settings import MAX_SIMULATIONS, MAX_THREADS, WIDENING_ALPHA, MctsSettings

PARALLELISMS = {
    mcts_service_pb2.PARALLELISM_UNSPECIFIED: "root",
    mcts_service_pb2.PARALLELISM_ROOT: "root",
    mcts_service_pb2.PARALLELISM_TREE: "tree",
}
"""The core's `parallelism` for each Parallelism value."""


@dataclass(frozen=True)
class SearchArgs:
    """A validated request: the arguments of `uct_search`."""

    moves: str
    simulations: int
    exploration: float
    seed: int
    threads: int
    parallelism: str = "root"
    transpositions: bool = False
    widening_k: float | None = None
    widening_alpha: float = WIDENING_ALPHA
    rave_k: float | None = None
    temperature: float = 0.0


UCT_ONLY = ("widening_k", "widening_alpha", "rave_k")
"""SearchRequest fields that only the UCT rule reads (the batched PUCT and Gumbel searches have no
progressive widening or RAVE)."""
PUCT_ONLY = ("dirichlet_alpha", "dirichlet_epsilon")
"""SearchRequest fields that only the PUCT rule reads (UCT uses no priors; Gumbel MuZero's root
uses Gumbel noise instead)."""


def optional_number(request, name: str, low: float, high: float = math.inf, *,
                    above_low: bool = False) -> float | None:
    """`request.<name>` when set (None when unset), checked to be finite and in [low, high]
    ((low, high] with `above_low`).

    Raises:
        InvalidArgument: naming the field, when the value is out of range or not finite.
    """
    if not request.HasField(name):
        return None
    value = getattr(request, name)
    if not (math.isfinite(value) and (value > low if above_low else value >= low)
            and value <= high):
        bounds = f"{'(' if above_low else '['}{low}, {high}{']' if high < math.inf else ')'}"
        raise InvalidArgument(name, f"is {value}; must be a finite number in {bounds}")
    return value


def validate_rule_options(request: mcts_service_pb2.SearchRequest) -> None:
    """Refuses the options the request's rule would ignore, naming the field, and checks the
    ranges of the rule options every rule shares (temperature).

    Raises:
        InvalidArgument: "widening_k", "widening_alpha" or "rave_k" set, "transpositions" true
            or "parallelism" PARALLELISM_TREE, with PUCT or Gumbel (one tree, no table);
            "dirichlet_alpha" or "dirichlet_epsilon" set without PUCT; "temperature" set with
            Gumbel (its move is the sequential-halving winner) or negative or not finite;
            "widening_alpha" without "widening_k", "dirichlet_epsilon" without
            "dirichlet_alpha".
    """
    rule = request.rule
    uct = rule in (mcts_service_pb2.SELECTION_RULE_UNSPECIFIED, mcts_service_pb2.SELECTION_RULE_UCT)
    for name in UCT_ONLY if not uct else ():
        if request.HasField(name):
            raise InvalidArgument(name, "applies to SELECTION_RULE_UCT only")
    if not uct and request.transpositions:
        raise InvalidArgument("transpositions", "applies to SELECTION_RULE_UCT only")
    if not uct and request.parallelism == mcts_service_pb2.PARALLELISM_TREE:
        raise InvalidArgument("parallelism", "PARALLELISM_TREE applies to SELECTION_RULE_UCT "
                                             "only (PUCT and Gumbel run one tree)")
    for name in PUCT_ONLY if rule != mcts_service_pb2.SELECTION_RULE_PUCT else ():
        if request.HasField(name):
            raise InvalidArgument(name, "applies to SELECTION_RULE_PUCT only")
    if rule == mcts_service_pb2.SELECTION_RULE_GUMBEL and request.HasField("temperature"):
        raise InvalidArgument("temperature", "does not apply to SELECTION_RULE_GUMBEL (it plays "
                                             "the sequential-halving winner)")
    optional_number(request, "temperature", 0.0)
    if request.HasField("widening_alpha") and not request.HasField("widening_k"):
        raise InvalidArgument("widening_alpha", "needs widening_k (progressive widening is off)")
    if request.HasField("dirichlet_epsilon") and not request.HasField("dirichlet_alpha"):
        raise InvalidArgument("dirichlet_epsilon", "needs dirichlet_alpha (the noise is off)")


def to_search_args(request: mcts_service_pb2.SearchRequest, settings: MctsSettings) -> SearchArgs:
    """The core's arguments for a proto request (defaults from `settings`).

    Raises:
        InvalidArgument: "game" not GAME_CONNECT_FOUR; "connect_four.moves" malformed, illegal or a
            finished game; "simulations" outside 1..10,000,000; "exploration" negative or not
            finite; "threads" outside 1..64; "parallelism" not a Parallelism value;
            "widening_k" or "rave_k" not finite and > 0, "widening_alpha" outside [0, 1]; and
            see `validate_rule_options`.
    """
    validate_rule_options(request)
    if request.game != mcts_service_pb2.GAME_CONNECT_FOUR:
        # An open enum: a value outside Game arrives as its number (Name() would raise).
        known = request.game in mcts_service_pb2.Game.values()
        name = mcts_service_pb2.Game.Name(request.game) if known else str(request.game)
        raise InvalidArgument("game", f"is {name}; only GAME_CONNECT_FOUR is supported")
    moves = request.connect_four.moves
    try:
        position = Position.from_moves(moves)
    except IllegalPosition as error:
        raise InvalidArgument("connect_four.moves", error.message) from error
    if position.is_finished:
        raise InvalidArgument("connect_four.moves", "the game is over; there is no move to search")
    simulations = (request.simulations if request.HasField("simulations")
                   else settings.default_simulations)
    if not 1 <= simulations <= MAX_SIMULATIONS:
        raise InvalidArgument("simulations", f"is {simulations}; must be in 1..{MAX_SIMULATIONS:,}")
    exploration = request.exploration if request.HasField("exploration") else settings.exploration
    if not (math.isfinite(exploration) and exploration >= 0):
        raise InvalidArgument("exploration", f"is {exploration}; must be a finite number >= 0")
    threads = request.threads if request.HasField("threads") else 1
    if not 1 <= threads <= MAX_THREADS:
        raise InvalidArgument("threads", f"is {threads}; must be in 1..{MAX_THREADS}")
    if request.parallelism not in PARALLELISMS:
        raise InvalidArgument("parallelism", f"is {request.parallelism}; not a Parallelism")
    widening_alpha = optional_number(request, "widening_alpha", 0.0, 1.0)
    return SearchArgs(moves=moves, simulations=simulations, exploration=exploration,
                      seed=request.seed, threads=min(threads, settings.max_threads),
                      parallelism=PARALLELISMS[request.parallelism],
                      transpositions=request.transpositions,
                      widening_k=optional_number(request, "widening_k", 0.0, above_low=True),
                      widening_alpha=(settings.widening_alpha if widening_alpha is None
                                      else widening_alpha),
                      rave_k=optional_number(request, "rave_k", 0.0, above_low=True),
                      temperature=optional_number(request, "temperature", 0.0) or 0.0)


MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A neural model name as the neural service's registry names checkpoints (their directory)."""
BATCHED_ONLY = ("batch_size", "virtual_loss", "gumbel_num_considered")
"""Fields that only a PUCT or Gumbel search reads."""


def validate_leaf_options(request: mcts_service_pb2.SearchRequest) -> None:
    """Rejects leaf-evaluation options that the request's rule or evaluator would ignore, so a
    caller never believes a network guided a search that ran rollouts.

    Raises:
        InvalidArgument: "evaluator" is LEAF_EVALUATOR_NEURAL (or "batch_size", "virtual_loss",
            "gumbel_num_considered" is set) under the default UCT rule; "model" is set without
            LEAF_EVALUATOR_NEURAL, or is not a model name; "batch_size" outside 1..1,024.
    """
    if request.evaluator not in mcts_service_pb2.LeafEvaluator.values():
        raise InvalidArgument("evaluator", f"is {request.evaluator}; not a LeafEvaluator")
    batched = request.rule in RULES
    neural = request.evaluator == mcts_service_pb2.LEAF_EVALUATOR_NEURAL
    if request.HasField("batch_size") and not 1 <= request.batch_size <= MAX_BATCH_SIZE:
        raise InvalidArgument("batch_size", f"is {request.batch_size}; must be in "
                                            f"1..{MAX_BATCH_SIZE:,}")
    if not batched:
        if neural:
            raise InvalidArgument("evaluator", "LEAF_EVALUATOR_NEURAL needs rule "
                                               "SELECTION_RULE_PUCT or SELECTION_RULE_GUMBEL; "
                                               "UCT evaluates leaves by rollouts")
        for name in BATCHED_ONLY:
            if request.HasField(name):
                raise InvalidArgument(name, "applies to SELECTION_RULE_PUCT and "
                                            "SELECTION_RULE_GUMBEL only; unset it for UCT")
    if request.model:
        if not neural:
            raise InvalidArgument("model", "names a network for LEAF_EVALUATOR_NEURAL; unset "
                                           "it for rollouts")
        if MODEL_NAME.fullmatch(request.model) is None:
            raise InvalidArgument("model", f"{request.model[:100]!r} is not a model name "
                                           "(letters, digits, '.', '_', '-'; at most 100)")


def to_response(result: SearchResult) -> mcts_service_pb2.SearchResponse:
    """The proto response; `actions` lists the legal columns (prior > 0) in increasing order, with
    value 0 for a column the search never visited."""
    actions = [
        common_pb2.ActionStatistics(
            action=col + 1,
            visits=int(result.visits[col]),
            value=0.0 if math.isnan(result.values[col]) else float(result.values[col]),
            prior=float(result.priors[col]),
        )
        for col in range(len(result.priors))
        if result.priors[col] > 0
    ]
    return mcts_service_pb2.SearchResponse(
        best_action=result.best_action,
        statistics=common_pb2.SearchStatistics(
            simulations=result.simulations,
            simulations_per_second=result.simulations_per_second,
            tree_size=result.tree_size,
            max_depth=result.max_depth,
            root_value=result.root_value,
            actions=actions,
            elapsed_ms=result.elapsed_s * 1e3,
            seed=result.seed,
            threads=result.threads,
            tree_full=result.tree_full,
            transposition_hits=result.transposition_hits,
            selection_ms=result.selection_s * 1e3,
            expansion_ms=result.expansion_s * 1e3,
            rollout_ms=result.rollout_s * 1e3,
            backup_ms=result.backup_s * 1e3,
            wait_ms=result.wait_s * 1e3,
            timed_simulations=result.timed_simulations,
        ),
    )


class MctsServicer(mcts_service_pb2_grpc.MctsServiceServicer):
    """mesh.mcts.v1.MctsService over `services.mcts.rollout.connect4.uct_search`."""

    def __init__(self, settings: MctsSettings,
                 neural_channel: grpc.aio.Channel | None = None) -> None:
        self._settings = settings
        self.batched = BatchedSearches(settings, neural_channel)
        """PUCT and Gumbel searches (rule PUCT / GUMBEL, and SearchExternal)."""
        self.searches = SearchQueue(settings.search_slots)
        """Where UCT searches wait for one of `search_slots` threads, earliest deadline first."""
        metrics.SEARCHES_WAITING.set_function(lambda: self.searches.waiting)

    async def Search(
        self, request: mcts_service_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> mcts_service_pb2.SearchResponse:
        """`_search`, counted in the searches-running gauge; a finished search's simulations, rate
        and tree size go to the metrics and the SERVER span."""
        with metrics.SEARCHES_RUNNING.track_inprogress():
            response = await self._search(request, context)
        stats = response.statistics
        metrics.observe_search(stats.simulations, stats.simulations_per_second, stats.tree_size)
        set_work_attributes({
            "mesh.problem.kind": "connect_four",
            "mesh.mcts.rule": mcts_service_pb2.SelectionRule.Name(request.rule),
            "mesh.mcts.simulations": stats.simulations,
            "mesh.mcts.simulations_per_second": stats.simulations_per_second,
            "mesh.mcts.tree_nodes": stats.tree_size,
            "mesh.mcts.threads": stats.threads,
        })
        return response

    async def _search(
        self, request: mcts_service_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> mcts_service_pb2.SearchResponse:
        """Runs the search in a worker thread of `searches` (the event loop stays free), after the
        waiting searches with earlier deadlines (`scheduling.SearchQueue`).

        With a deadline, the search stops `deadline_margin_s` before it and returns the simulations
        done by then (`statistics.simulations` may be below the request's). A cancelled call stops
        its search.

        Raises:
            InvalidArgument: see `to_search_args`.
            DeadlineExceeded: the deadline came before any simulation finished.
        """
        args = to_search_args(request, self._settings)
        if request.rule not in mcts_service_pb2.SelectionRule.values():
            raise InvalidArgument("rule", f"is {request.rule}; not a SelectionRule")
        validate_leaf_options(request)
        if request.rule in RULES:
            return await self.batched.search(request, args.moves, args.simulations, context)
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        margin = self._settings.deadline_margin_s
        stop = threading.Event()

        def search() -> SearchResult:  # the time limit counts from the search's start
            time_limit = (None if deadline is None
                          else max(0.0, deadline - time.monotonic() - margin))
            return uct_search(
                args.moves, args.simulations, args.exploration, args.seed, args.threads,
                self._settings.max_tree_nodes, time_limit_s=time_limit, stop=stop,
                parallelism=args.parallelism, transpositions=args.transpositions,
                widening_k=args.widening_k, widening_alpha=args.widening_alpha,
                rave_k=args.rave_k, temperature=args.temperature)

        try:
            result = await self.searches.run(deadline, search)
        except asyncio.CancelledError:
            stop.set()
            raise
        except SearchStopped as error:
            raise DeadlineExceeded(
                f"the deadline left too little time for one simulation ({remaining} s)"
            ) from error
        return to_response(result)

    def SearchExternal(self, request_iterator, context: grpc.aio.ServicerContext):
        """The caller evaluates the leaves; see `BatchedSearches.search_external`."""
        return self.batched.search_external(request_iterator, context)
