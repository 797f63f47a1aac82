"""A tree grown by the rollout engine, with the statistics its kernels kept beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.mcts.core.tree import Tree
from services.mcts.rollout.transpositions import TranspositionTable


@dataclass(frozen=True)
class Grown:
    """A tree after `grow` or `grow_tree_parallel`.

    Attributes:
        tree: the `Tree` arrays.
        amaf_visits, amaf_value_sum: AMAF statistics per node (int64 [N], float64 [N], same
            layout as `Tree.visits` / `Tree.value_sum`) with RAVE (`SearchConfig.rave_k`);
            empty (length 0) without it, when nothing is recorded.
        phases: int64 [4], work counters indexed by SELECT, EXPAND, ROLLOUT, BACKUP.
        simulations: simulations run (fewer than asked when a deadline or a stop event ended the
            search).
        phase_seconds: float64 [5], wall seconds spent in selection, expansion, rollout, backup
            and waiting for other threads (indexed by SELECT .. WAIT): each thread's measured
            kernel time split by its sampled phase shares, mean over the threads (the sum never
            exceeds the wall time of the search); all 0 when no simulation was timed (see
            docs/services/mcts.md).
        timed_simulations: simulations timed phase by phase (about 1 in TIMING_SAMPLE_EVERY).
        threads: threads that grew this tree (more than 1 only with tree parallelisation).
        virtual_loss: int64 [N], virtual losses still applied per node, arrivals minus visits
            (all 0 after a search: every one is reverted by its backup); None for `grow`'s
            sequential kernel.
        table: the transposition table, None when `SearchConfig.transpositions` is off.
        entry: int32 [N], each node's table entry (-1 for nodes never reached); None without a
            table.
    """

    tree: Tree
    amaf_visits: np.ndarray
    amaf_value_sum: np.ndarray
    phases: np.ndarray
    simulations: int
    phase_seconds: np.ndarray
    timed_simulations: int
    threads: int = 1
    virtual_loss: np.ndarray | None = None
    table: TranspositionTable | None = None
    entry: np.ndarray | None = None

    @property
    def transposition_hits(self) -> int:
        """Nodes whose position was already in the table when first reached (0 without one)."""
        return 0 if self.table is None else self.table.hits
