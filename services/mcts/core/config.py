"""The options of the two search engines, one frozen type per engine, built directly from a
request by the gRPC edge (`services.mcts.api.requests`) or by a caller in-process; the kernels'
records are derived from them where the kernels are called (`services.mcts.rollout.records`,
`services.mcts.batched.search`)."""

from __future__ import annotations

from dataclasses import dataclass

from services.mcts.settings import (
    C_PUCT,
    DEFAULT_MAX_NODES,
    DIRICHLET_EPSILON,
    GUMBEL_NUM_CONSIDERED,
    UCT_EXPLORATION,
    VIRTUAL_LOSS,
    WIDENING_ALPHA,
)

PARALLELISMS = ("root", "tree")
"""Values of `SearchConfig.parallelism`."""


@dataclass(frozen=True)
class SearchConfig:
    """Options of the rollout engine (`services.mcts.rollout`; design in docs/services/mcts.md).

    Attributes:
        rule: "uct" or "puct".
        exploration: c of UCB1 or c_puct of PUCT, >= 0.
        widening_k, widening_alpha: progressive widening `ceil(k * N^alpha)`; None = off.
        rave_k: k of the RAVE schedule `sqrt(k / (3N + k))`; None = off.
        dirichlet_alpha, dirichlet_epsilon: root noise on the priors (PUCT); None = off.
        temperature: 0 plays the most visited action; T > 0 samples an action with probability
            proportional to `visits ** (1 / T)`.
        max_nodes: node capacity of the tree (at least MIN_CAPACITY); when full the search keeps
            simulating from the leaves it has and reports `tree_full`.
        seed: seeds the kernel, the noise and the temperature draw.
        parallelism: how more than one thread searches: "root" (one independent tree per
            thread, merged at the root) or "tree" (all threads on one shared tree with virtual
            loss).
        transpositions: share statistics between tree nodes of the same position through a
            transposition table (the game needs a `key`); off by default.
    """

    rule: str = "uct"
    exploration: float = UCT_EXPLORATION
    widening_k: float | None = None
    widening_alpha: float = WIDENING_ALPHA
    rave_k: float | None = None
    dirichlet_alpha: float | None = None
    dirichlet_epsilon: float = DIRICHLET_EPSILON
    temperature: float = 0.0
    max_nodes: int = DEFAULT_MAX_NODES
    seed: int = 0
    parallelism: str = "root"
    transpositions: bool = False


@dataclass(frozen=True)
class BatchedConfig:
    """Options of the batched engine (`services.mcts.batched.search.BatchedSearch`).

    Attributes:
        rule: "puct" or "gumbel" (docs/services/mcts.md, "The batched engine").
        c_puct: c_puct of PUCT, >= 0.
        virtual_loss: value subtracted per in-flight descent, >= 0 (0 = visits only).
        batch_size: most leaves per batch, >= 1.
        max_nodes: node capacity of the tree (>= MIN_CAPACITY); a full tree stops expanding and
            reports `tree_full`.
        seed: seeds the Dirichlet noise, the Gumbel noise and the temperature draw.
        dirichlet_alpha, dirichlet_epsilon: root noise on the priors (PUCT only); None = off.
        temperature: PUCT only; 0 plays the most visited action, T > 0 samples proportionally to
            `visits ** (1 / T)`.
        gumbel_num_considered: m, actions considered at the root by Gumbel-top-m (mctx default 16).
        c_visit, c_scale: sigma's constants (mctx's maxvisit_init = 50, value_scale = 0.1).
    """

    rule: str = "puct"
    c_puct: float = C_PUCT
    virtual_loss: float = VIRTUAL_LOSS
    batch_size: int = 1
    max_nodes: int = DEFAULT_MAX_NODES
    seed: int = 0
    dirichlet_alpha: float | None = None
    dirichlet_epsilon: float = DIRICHLET_EPSILON
    temperature: float = 0.0
    gumbel_num_considered: int = GUMBEL_NUM_CONSIDERED
    c_visit: float = 50.0
    c_scale: float = 0.1
