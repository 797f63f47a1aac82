"""The SearchExternal stream's messages at the edge: its settings parsed into a `BatchedSearch`,
and the caller's evaluations checked and submitted. Every refusal is an InvalidArgument naming
the field."""

from __future__ import annotations

import math

import numpy as np
from mesh.mcts.v1 import mcts_service_pb2 as pb

from libs.errors import InvalidArgument
from services.mcts.api.requests import (
    RULES,
    optional_float,
    optional_int,
    reject_ignored_batched_options,
)
from services.mcts.batched.leaves import EvaluationError
from services.mcts.batched.search import BatchedSearch
from services.mcts.core.config import BatchedConfig
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.settings import (
    GUMBEL_NUM_CONSIDERED,
    MAX_BATCH_SIZE,
    MAX_SIMULATIONS,
    MIN_CAPACITY,
    VIRTUAL_LOSS,
    MctsSettings,
)


def external_search(message: pb.ExternalSearchSettings, settings: MctsSettings) -> BatchedSearch:
    """The search a SearchExternal stream asked for.

    Raises:
        InvalidArgument: a setting out of range, or one the rule would ignore (see
            `requests.reject_ignored_batched_options`), named "settings.<field>";
            "settings.max_nodes" below max(8, num_actions + 1).
        ValueError: a combination the engine refuses (`batched.leaves.validate_config`).
    """
    if not 1 <= message.num_actions <= MAX_ACTIONS:
        raise InvalidArgument("settings.num_actions", f"is {message.num_actions}; must be in "
                                                      f"1..{MAX_ACTIONS}")
    if not 1 <= message.simulations <= MAX_SIMULATIONS:
        raise InvalidArgument("settings.simulations", f"is {message.simulations}; must be in "
                                                      f"1..{MAX_SIMULATIONS:,}")
    if message.rule == pb.SELECTION_RULE_UNSPECIFIED:
        rule = "puct"
    elif message.rule in RULES:
        rule = RULES[message.rule]
    else:
        raise InvalidArgument("settings.rule", "must be SELECTION_RULE_PUCT or "
                                               "SELECTION_RULE_GUMBEL")
    reject_ignored_batched_options(message, message.rule or pb.SELECTION_RULE_PUCT, "settings.",
                                   "c_puct")
    players = optional_int(message, "players", "settings.players", 2, 1, 2)
    return BatchedSearch(message.num_actions, message.simulations,
                         _external_config(message, rule, settings), players=players)


def _external_config(m: pb.ExternalSearchSettings, rule: str, settings: MctsSettings
                     ) -> BatchedConfig:
    """The batched engine's options from the stream's settings (errors as `external_search`)."""
    dirichlet_alpha = None
    if m.HasField("dirichlet_alpha"):
        if not (math.isfinite(m.dirichlet_alpha) and m.dirichlet_alpha > 0):
            raise InvalidArgument("settings.dirichlet_alpha",
                                  f"is {m.dirichlet_alpha}; must be a finite number > 0")
        dirichlet_alpha = m.dirichlet_alpha
    max_nodes = settings.max_tree_nodes
    if m.HasField("max_nodes"):
        least = max(MIN_CAPACITY, m.num_actions + 1)
        if m.max_nodes < least:
            raise InvalidArgument("settings.max_nodes",
                                  f"is {m.max_nodes}; must be >= {least} (at least "
                                  f"{MIN_CAPACITY} and num_actions + 1, the root and its "
                                  "children)")
        max_nodes = min(max_nodes, m.max_nodes)
    if max_nodes < m.num_actions + 1:
        raise InvalidArgument("settings.num_actions",
                              f"is {m.num_actions}; this service's trees hold at most "
                              f"{max_nodes} nodes (MCTS_MAX_TREE_NODES), fewer than the root "
                              "and its children")
    return BatchedConfig(
        rule=rule,
        c_puct=optional_float(m, "c_puct", "settings.c_puct", settings.c_puct),
        virtual_loss=optional_float(m, "virtual_loss", "settings.virtual_loss", VIRTUAL_LOSS),
        batch_size=optional_int(m, "batch_size", "settings.batch_size", 1, 1, MAX_BATCH_SIZE),
        max_nodes=max_nodes,
        seed=m.seed,
        dirichlet_alpha=dirichlet_alpha,
        dirichlet_epsilon=optional_float(m, "dirichlet_epsilon", "settings.dirichlet_epsilon",
                                         settings.dirichlet_epsilon, 1.0),
        temperature=_temperature(m.temperature),
        gumbel_num_considered=optional_int(m, "gumbel_num_considered",
                                           "settings.gumbel_num_considered",
                                           GUMBEL_NUM_CONSIDERED, 1, MAX_ACTIONS),
    )


def _temperature(value: float) -> float:
    """The stream's temperature, checked.

    Raises:
        InvalidArgument: "settings.temperature" negative or not finite.
    """
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgument("settings.temperature", f"is {value}; must be a finite number >= 0")
    return value


def submit_reply(search: BatchedSearch, batch_id: int, size: int,
                 reply: pb.SearchExternalRequest) -> None:
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
