"""The batched engine's leaves (`LeafBatch`), its check of a search's sizes and options
(`validate_config`) and its evaluation errors (`EvaluationError`, `raise_for`)."""

from __future__ import annotations

import math

import numpy as np

from services.mcts.batched.kernels import BAD_PRIOR, BAD_VALUE, RULES, ZERO_PRIORS
from services.mcts.core.config import BatchedConfig
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.core.tree import Tree
from services.mcts.settings import MIN_CAPACITY


class EvaluationError(ValueError):
    """A malformed evaluation passed to `BatchedSearch.submit`.

    Attributes:
        argument: "priors", "values" or "terminal".
        row: the leaf (row) at fault, -1 for a wrong shape.
    """

    def __init__(self, argument: str, row: int, description: str) -> None:
        where = f"row {row} " if row >= 0 else ""
        super().__init__(f"{argument}: {where}{description}")
        self.argument = argument
        self.row = row
        self.description = description


class LeafBatch:
    """Leaves to evaluate; B = leaves in the batch. Read-only by convention (a plain class with
    slots: a frozen dataclass would cost more to build than a descent of a small tree).

    Attributes:
        nodes: int64 [B], leaf node ids.
        parents: int64 [B], parent node ids (-1 for the root).
        actions: int64 [B], action from the parent into the leaf (-1 for the root).
        depths: int64 [B], plies from the root.
        batch_id: 0 for the root batch, then 1, 2, ...
        paths: list of B lists of int, the actions from the root to each leaf (computed on access).
    """

    __slots__ = ("nodes", "parents", "actions", "depths", "batch_id", "_tree")

    def __init__(self, nodes: np.ndarray, parents: np.ndarray, actions: np.ndarray,
                 depths: np.ndarray, batch_id: int, tree: Tree) -> None:
        self.nodes = nodes
        self.parents = parents
        self.actions = actions
        self.depths = depths
        self.batch_id = batch_id
        self._tree = tree

    def __len__(self) -> int:
        return int(self.nodes.shape[0])

    def __repr__(self) -> str:
        return f"LeafBatch(batch_id={self.batch_id}, nodes={self.nodes.tolist()})"

    @property
    def paths(self) -> list[list[int]]:
        """The actions from the root to each leaf, root first."""
        paths = []
        for node in self.nodes.tolist():
            path = []
            while node > 0:
                path.append(int(self._tree.action[node]))
                node = int(self._tree.parent[node])
            path.reverse()
            paths.append(path)
        return paths


def validate_config(num_actions: int, simulations: int, config: BatchedConfig,
                    players: int) -> None:
    """Raises ValueError naming the option that is out of range."""
    if not 1 <= num_actions <= MAX_ACTIONS:
        raise ValueError(f"num_actions must be in 1..{MAX_ACTIONS}")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if players not in (1, 2):
        raise ValueError("players must be 1 or 2")
    if config.rule not in RULES:
        raise ValueError("rule must be 'puct' or 'gumbel'")
    if not (math.isfinite(config.c_puct) and config.c_puct >= 0):
        raise ValueError("c_puct must be a finite number >= 0")
    if not (math.isfinite(config.virtual_loss) and config.virtual_loss >= 0):
        raise ValueError("virtual_loss must be a finite number >= 0")
    if config.batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if config.max_nodes < max(MIN_CAPACITY, num_actions + 1):
        raise ValueError(f"max_nodes must be at least {MIN_CAPACITY} and hold the root's children "
                         "(num_actions + 1)")
    if config.dirichlet_alpha is not None and not (config.dirichlet_alpha > 0 and
                                                   0 <= config.dirichlet_epsilon <= 1):
        raise ValueError("Dirichlet noise needs alpha > 0 and 0 <= epsilon <= 1")
    if not (math.isfinite(config.temperature) and config.temperature >= 0):
        raise ValueError("temperature must be a finite number >= 0")
    if config.gumbel_num_considered < 1:
        raise ValueError("gumbel_num_considered must be at least 1")
    if not (config.c_visit >= 0 and config.c_scale >= 0):
        raise ValueError("c_visit and c_scale must be >= 0")


def raise_for(code: int, row: int, values: np.ndarray) -> None:
    """Raises the EvaluationError of a kernel's error code (nothing for _OK)."""
    if code == BAD_VALUE:
        raise EvaluationError("values", row, f"is {values[row]}; must be in [-1, 1]")
    if code == BAD_PRIOR:
        raise EvaluationError("priors", row, "has a negative or non-finite prior")
    if code == ZERO_PRIORS:
        raise EvaluationError("priors", row, "is all zero on a non-terminal leaf")


