"""SearchRequest parsed and validated at the edge into what the engines take: the root position,
the simulation budget, the threads and the engine's config (`SearchConfig` for rule UCT,
`BatchedConfig` for PUCT and Gumbel), built directly from the request. Every refusal is an
InvalidArgument naming the field."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mesh.mcts.v1 import mcts_service_pb2 as pb

from libs.connect4.board import Position
from libs.connect4_messages import parse_position
from libs.errors import InvalidArgument
from services.mcts.core.config import BatchedConfig, SearchConfig
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.settings import (
    GUMBEL_NUM_CONSIDERED,
    MAX_BATCH_SIZE,
    MAX_SIMULATIONS,
    MAX_THREADS,
    VIRTUAL_LOSS,
    MctsSettings,
)

PARALLELISMS = {
    pb.PARALLELISM_UNSPECIFIED: "root",
    pb.PARALLELISM_ROOT: "root",
    pb.PARALLELISM_TREE: "tree",
}
"""The core's `parallelism` for each Parallelism value."""
RULES = {pb.SELECTION_RULE_PUCT: "puct", pb.SELECTION_RULE_GUMBEL: "gumbel"}
"""The batched engine's rule for each batched SelectionRule."""
UCT_ONLY = ("widening_k", "widening_alpha", "rave_k")
"""SearchRequest fields that only the UCT rule reads (the batched PUCT and Gumbel searches have no
progressive widening or RAVE)."""
PUCT_ONLY = ("dirichlet_alpha", "dirichlet_epsilon")
"""SearchRequest fields that only the PUCT rule reads (UCT uses no priors; Gumbel MuZero's root
uses Gumbel noise instead)."""
BATCHED_ONLY = ("batch_size", "virtual_loss", "gumbel_num_considered")
"""Fields that only a PUCT or Gumbel search reads."""
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A neural model name as the neural service's registry names checkpoints (their directory)."""


@dataclass(frozen=True)
class ParsedSearch:
    """A validated Search request.

    Attributes:
        root: the Connect Four position to search, on its board (the game goes on).
        simulations: the budget, 1..MAX_SIMULATIONS.
        threads: threads for a UCT search (capped by `max_threads`; 1 for PUCT and Gumbel).
        config: the engine's options: `SearchConfig` (rule UCT) or `BatchedConfig` (PUCT,
            Gumbel).
    """

    root: Position
    simulations: int
    threads: int
    config: SearchConfig | BatchedConfig


def parse_search(request: pb.SearchRequest, settings: MctsSettings) -> ParsedSearch:
    """The validated request (defaults from `settings`).

    Raises:
        InvalidArgument: "game" not GAME_CONNECT_FOUR; "connect_four.board.columns" or
            "connect_four.board.rows" outside the limits; "connect_four.moves" malformed, illegal
            on the board or a finished game; "simulations" outside 1..10,000,000; "exploration"
            negative or not finite; "threads" outside 1..64; "parallelism" not a Parallelism
            value; "widening_k" or "rave_k" not finite and > 0, "widening_alpha" outside [0, 1];
            "rule" not a SelectionRule; and see `validate_rule_options`, `validate_leaf_options` and
            `batched_config`.
    """
    validate_rule_options(request)
    root = _root(request)
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
        raise InvalidArgument("parallelism", f"is {request.parallelism}; not a Parallelism "
                                            f"({', '.join(pb.Parallelism.keys())})")
    config = rollout_config(request, settings, exploration)
    if request.rule not in pb.SelectionRule.values():
        raise InvalidArgument("rule", f"is {request.rule}; not a SelectionRule "
                                     f"({', '.join(pb.SelectionRule.keys())})")
    validate_leaf_options(request)
    if request.rule in RULES:
        return ParsedSearch(root, simulations, 1, batched_config(request, settings))
    return ParsedSearch(root, simulations, min(threads, settings.max_threads), config)


def _root(request: pb.SearchRequest) -> Position:
    """The request's Connect Four position, on its board.

    Raises:
        InvalidArgument: "game", "connect_four.board.*" or "connect_four.moves", as
            `parse_search`.
    """
    if request.game != pb.GAME_CONNECT_FOUR:
        # An open enum: a value outside Game arrives as its number (Name() would raise).
        known = request.game in pb.Game.values()
        name = pb.Game.Name(request.game) if known else str(request.game)
        raise InvalidArgument("game", f"is {name}; only GAME_CONNECT_FOUR is supported")
    return parse_position(request.connect_four, "connect_four")


def rollout_config(request: pb.SearchRequest, settings: MctsSettings,
                   exploration: float) -> SearchConfig:
    """The rollout engine's options for the request (UCT; `exploration` already checked).

    Raises:
        InvalidArgument: "widening_alpha" outside [0, 1], "widening_k" or "rave_k" not finite
            and > 0, "temperature" negative or not finite.
    """
    widening_alpha = optional_number(request, "widening_alpha", 0.0, 1.0)
    return SearchConfig(
        rule="uct", exploration=exploration, max_nodes=settings.max_tree_nodes,
        seed=request.seed, parallelism=PARALLELISMS[request.parallelism],
        transpositions=request.transpositions,
        widening_k=optional_number(request, "widening_k", 0.0, above_low=True),
        widening_alpha=settings.widening_alpha if widening_alpha is None else widening_alpha,
        rave_k=optional_number(request, "rave_k", 0.0, above_low=True),
        temperature=optional_number(request, "temperature", 0.0) or 0.0)


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


def optional_int(message, name: str, field: str, default: int, low: int, high: int) -> int:
    """`message.<name>` when set, else `default`, checked to be in low..high.

    Raises:
        InvalidArgument: `field`, when out of range.
    """
    value = getattr(message, name) if message.HasField(name) else default
    if not low <= value <= high:
        raise InvalidArgument(field, f"is {value}; must be in {low}..{high:,}")
    return value


def optional_float(message, name: str, field: str, default: float, high: float = math.inf
                   ) -> float:
    """`message.<name>` when set, else `default`, checked to be finite and in [0, high].

    Raises:
        InvalidArgument: `field`, when out of range or not finite.
    """
    value = getattr(message, name) if message.HasField(name) else default
    if not (math.isfinite(value) and 0 <= value <= high):
        raise InvalidArgument(field, f"is {value}; must be a finite number in [0, {high}]")
    return value


def validate_rule_options(request: pb.SearchRequest) -> None:
    """Refuses the options the request's rule would ignore, naming the field, and checks the
    ranges of the rule options every rule shares (temperature).

    Raises:
        InvalidArgument: "widening_k", "widening_alpha" or "rave_k" set, "transpositions" true
            or "parallelism" PARALLELISM_TREE, with PUCT or Gumbel (one tree, no table);
            "temperature" negative or not finite; "widening_alpha" without "widening_k"; and see
            `reject_ignored_batched_options`.
    """
    rule = request.rule
    uct = rule in (pb.SELECTION_RULE_UNSPECIFIED, pb.SELECTION_RULE_UCT)
    for name in UCT_ONLY if not uct else ():
        if request.HasField(name):
            raise InvalidArgument(name, "applies to SELECTION_RULE_UCT only")
    if not uct and request.transpositions:
        raise InvalidArgument("transpositions", "applies to SELECTION_RULE_UCT only")
    if not uct and request.parallelism == pb.PARALLELISM_TREE:
        raise InvalidArgument("parallelism", "PARALLELISM_TREE applies to SELECTION_RULE_UCT "
                                             "only (PUCT and Gumbel run one tree)")
    reject_ignored_batched_options(request, rule)
    optional_number(request, "temperature", 0.0)
    if request.HasField("widening_alpha") and not request.HasField("widening_k"):
        raise InvalidArgument("widening_alpha", "needs widening_k (progressive widening is off)")


def _is_set(message, name: str) -> bool:
    """Whether the caller set `message.<name>`: present for a field with presence, otherwise
    different from its zero value (SearchExternal's plain `temperature`)."""
    if message.DESCRIPTOR.fields_by_name[name].has_presence:
        return message.HasField(name)
    return bool(getattr(message, name))


def reject_ignored_batched_options(message, rule: int, prefix: str = "",
                                   c_puct: str = "exploration") -> None:
    """Refuses the root-noise, Gumbel and temperature options that `rule` would ignore, naming
    the field (`prefix` + name). Shared by Search (`rule` as requested) and SearchExternal
    (`rule` SELECTION_RULE_PUCT when unset, `prefix` "settings.", `c_puct` "c_puct": the field
    holding c_puct).

    Raises:
        InvalidArgument: "dirichlet_alpha" or "dirichlet_epsilon" set without PUCT;
            "gumbel_num_considered" set with UCT or PUCT; "temperature" set with Gumbel (its move
            is the sequential-halving winner); `c_puct` set with Gumbel (its selection uses
            completed Q-values, not PUCT); "dirichlet_epsilon" without "dirichlet_alpha".
    """
    for name in PUCT_ONLY if rule != pb.SELECTION_RULE_PUCT else ():
        if _is_set(message, name):
            raise InvalidArgument(prefix + name, "applies to SELECTION_RULE_PUCT only")
    if rule == pb.SELECTION_RULE_PUCT and _is_set(message, "gumbel_num_considered"):
        raise InvalidArgument(prefix + "gumbel_num_considered",
                              "applies to SELECTION_RULE_GUMBEL only")
    if rule == pb.SELECTION_RULE_GUMBEL and _is_set(message, c_puct):
        raise InvalidArgument(prefix + c_puct, "does not apply to SELECTION_RULE_GUMBEL (it "
                                               "selects by completed Q-values, not PUCT)")
    if rule == pb.SELECTION_RULE_GUMBEL and _is_set(message, "temperature"):
        raise InvalidArgument(prefix + "temperature", "does not apply to SELECTION_RULE_GUMBEL "
                                                      "(it plays the sequential-halving winner)")
    if _is_set(message, "dirichlet_epsilon") and not _is_set(message, "dirichlet_alpha"):
        raise InvalidArgument(prefix + "dirichlet_epsilon",
                              "needs dirichlet_alpha (the noise is off)")


def validate_leaf_options(request: pb.SearchRequest) -> None:
    """Rejects leaf-evaluation options that the request's rule or evaluator would ignore, so a
    caller never believes a network guided a search that ran rollouts.

    Raises:
        InvalidArgument: "evaluator" is LEAF_EVALUATOR_NEURAL (or "batch_size", "virtual_loss",
            "gumbel_num_considered" is set) under the default UCT rule; "model" is set without
            LEAF_EVALUATOR_NEURAL, or is not a model name; "batch_size" outside 1..1,024.
    """
    if request.evaluator not in pb.LeafEvaluator.values():
        raise InvalidArgument("evaluator", f"is {request.evaluator}; not a LeafEvaluator "
                                          f"({', '.join(pb.LeafEvaluator.keys())})")
    batched = request.rule in RULES
    neural = request.evaluator == pb.LEAF_EVALUATOR_NEURAL
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


def batched_config(request: pb.SearchRequest, settings: MctsSettings) -> BatchedConfig:
    """The batched engine's options for a Search request with rule PUCT or Gumbel.

    Raises:
        InvalidArgument: "threads" above 1, "batch_size" outside 1..1,024, "virtual_loss" or
            "exploration" negative or not finite, "gumbel_num_considered" outside 1..127,
            "dirichlet_alpha" not finite and > 0, "dirichlet_epsilon" outside [0, 1],
            "temperature" negative or not finite.
    """
    if request.HasField("threads") and request.threads != 1:
        raise InvalidArgument("threads", f"is {request.threads}; PUCT and Gumbel searches run "
                                         "one tree (threads must be 1)")
    neural = request.evaluator == pb.LEAF_EVALUATOR_NEURAL
    dirichlet_alpha = None
    if request.HasField("dirichlet_alpha"):
        if not (math.isfinite(request.dirichlet_alpha) and request.dirichlet_alpha > 0):
            raise InvalidArgument("dirichlet_alpha",
                                  f"is {request.dirichlet_alpha}; must be a finite number > 0")
        dirichlet_alpha = request.dirichlet_alpha
    return BatchedConfig(
        rule=RULES[request.rule],
        c_puct=optional_float(request, "exploration", "exploration", settings.c_puct),
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_epsilon=optional_float(request, "dirichlet_epsilon", "dirichlet_epsilon",
                                         settings.dirichlet_epsilon, 1.0),
        temperature=optional_float(request, "temperature", "temperature", 0.0),
        virtual_loss=optional_float(request, "virtual_loss", "virtual_loss", VIRTUAL_LOSS),
        batch_size=optional_int(request, "batch_size", "batch_size",
                                settings.neural_batch_size if neural else 1, 1, MAX_BATCH_SIZE),
        max_nodes=settings.max_tree_nodes,
        seed=request.seed,
        gumbel_num_considered=optional_int(request, "gumbel_num_considered",
                                           "gumbel_num_considered", GUMBEL_NUM_CONSIDERED, 1,
                                           MAX_ACTIONS),
    )
