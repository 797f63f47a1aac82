"""Settings of the mcts service (env prefix `MCTS_`), read once in `main()` and passed down, and
the search's limits and default constants, each defined here once: the settings' defaults, the
core's option types (`core.config.SearchConfig`, `core.config.BatchedConfig`), the tree and the
edge's range checks all read them from this module."""

from __future__ import annotations

import math
import os

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ChannelSettings, ServiceSettings

MIN_CAPACITY = 8
"""Fewest nodes of any tree: the root and all seven of its children (Connect Four) fit."""
MAX_SIMULATIONS = 10_000_000
"""Most simulations of one search (`SearchRequest.simulations`, SearchExternal's settings and
`default_simulations`)."""
MAX_THREADS = 64
"""Most threads a request may ask for (`SearchRequest.threads`, `max_threads`)."""
MAX_BATCH_SIZE = 1024
"""Most leaves per batch of a batched search (`batch_size`, `neural_batch_size`)."""
UCT_EXPLORATION = 2.0
"""Default c of UCB1 `Q + c * sqrt(ln N / n)`, with Q in [-1, 1] (`exploration`)."""
C_PUCT = 1.25
"""Default c_puct of PUCT `Q + c_puct * P * sqrt(N) / (1 + n)` (`c_puct`; mctx's default)."""
DEFAULT_MAX_NODES = 2_000_000
"""Default node capacity of one tree (`max_tree_nodes`, and the core's `max_nodes` when not
given): 30 bytes per node, 16 more with RAVE; a small search allocates only what it can use
(`rollout.connect4.uct_search`), and pages are mapped as they are touched. At least
MIN_CAPACITY."""
WIDENING_ALPHA = 0.5
"""Default exponent alpha of progressive widening `ceil(k * N^alpha)` (`widening_alpha`)."""
DIRICHLET_EPSILON = 0.25
"""Default weight of the root Dirichlet noise (`dirichlet_epsilon`; AlphaZero's 0.25)."""
VIRTUAL_LOSS = 1.0
"""Default value a batched search subtracts per descent in flight (`virtual_loss`)."""
GUMBEL_NUM_CONSIDERED = 16
"""Default m of Gumbel-top-m at the root (`gumbel_num_considered`; mctx's default)."""


class MctsSettings(ServiceSettings, ChannelSettings):
    """The mcts service's one frozen settings object."""

    model_config = SettingsConfigDict(
        env_prefix="MCTS_", frozen=True, extra="ignore", populate_by_name=True
    )

    port: int = 50052

    default_simulations: int = 100_000
    """Simulations of a search whose request leaves `simulations` unset."""
    exploration: float = UCT_EXPLORATION
    """UCB1 constant c of a UCT search whose request leaves `exploration` unset."""
    c_puct: float = C_PUCT
    """c_puct of a PUCT or Gumbel search whose request (`exploration`, or SearchExternal's
    `settings.c_puct`) leaves it unset."""
    widening_alpha: float = WIDENING_ALPHA
    """Exponent alpha of progressive widening `ceil(k * N^alpha)` when a request sets `widening_k`
    but not `widening_alpha`."""
    dirichlet_epsilon: float = DIRICHLET_EPSILON
    """Weight of the root Dirichlet noise when a request sets `dirichlet_alpha` but not
    `dirichlet_epsilon` (AlphaZero's 0.25)."""
    max_threads: int = 4
    """Most trees one search runs in parallel; a request asking for more (up to the contract's 64)
    gets this many, and the response's `threads` says so."""
    search_slots: int = Field(default_factory=lambda: len(os.sched_getaffinity(0)))
    """UCT searches running at once (default: the cores this process may run on); the others wait,
    the one whose deadline comes first starting next (`scheduling.SearchQueue`). PUCT and Gumbel
    searches, which wait on the neural service, are not counted. A CPU quota is not seen by the
    default: deploy/k8s sets it to the container's CPU limit."""
    max_tree_nodes: int = DEFAULT_MAX_NODES
    """Most nodes of each tree (30 bytes per node; a small search allocates only what it can use);
    a search that fills it keeps simulating from the leaves it has and reports `tree_full`."""
    deadline_margin_s: float = 0.05
    """Seconds kept back from the caller's deadline to build and send the response."""
    neural_target: str = "127.0.0.1:50053"
    """host:port of the neural service (EvaluatePositions) for LEAF_EVALUATOR_NEURAL searches."""
    neural_timeout_s: float = 10.0
    """Deadline of one EvaluatePositions call, seconds."""
    neural_batch_size: int = 16
    """Leaves per batch of a neural search whose request leaves `batch_size` unset."""
    external_reply_timeout_s: float = 60.0
    """Seconds SearchExternal waits for one reply when the caller set no deadline."""

    @model_validator(mode="after")
    def _ranges(self) -> MctsSettings:
        if not 1 <= self.default_simulations <= MAX_SIMULATIONS:
            raise ValueError(f"default_simulations must be in 1..{MAX_SIMULATIONS:,}")
        if not (math.isfinite(self.exploration) and self.exploration >= 0):
            raise ValueError("exploration must be a finite number >= 0")
        if not (math.isfinite(self.c_puct) and self.c_puct >= 0):
            raise ValueError("c_puct must be a finite number >= 0")
        if not 0 <= self.widening_alpha <= 1:
            raise ValueError("widening_alpha must be in [0, 1]")
        if not 0 <= self.dirichlet_epsilon <= 1:
            raise ValueError("dirichlet_epsilon must be in [0, 1]")
        if not 1 <= self.max_threads <= MAX_THREADS:
            raise ValueError(f"max_threads must be in 1..{MAX_THREADS}")
        if self.search_slots < 1:
            raise ValueError("search_slots must be >= 1")
        if self.max_tree_nodes < MIN_CAPACITY:
            raise ValueError(f"max_tree_nodes must be >= {MIN_CAPACITY}")
        if self.deadline_margin_s < 0:
            raise ValueError("deadline_margin_s must be >= 0")
        if self.neural_timeout_s <= 0 or self.external_reply_timeout_s <= 0:
            raise ValueError("neural_timeout_s and external_reply_timeout_s must be > 0")
        if not 1 <= self.neural_batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"neural_batch_size must be in 1..{MAX_BATCH_SIZE}")
        return self
