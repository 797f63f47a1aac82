"""The search tree as a struct of preallocated arrays (as mctx's `Tree`), one row per node.

Node 0 is the root. The children of a node are created together, by decreasing prior (ties in the
game's action order), in one contiguous block `first_child .. first_child + num_children - 1`, so
a node's statistics and its children's are reached by index arithmetic with no pointers or
allocation. When the arrays are full the search stops expanding (`full` is set) and keeps
simulating from the leaves it has: the tree is reported as it is, never overwritten.
"""

from __future__ import annotations

import mmap
import threading
from dataclasses import dataclass

import numpy as np

from services.mcts.settings import MIN_CAPACITY

OPEN = 0
"""`terminal` code: the game goes on at this node (or the node was never reached)."""
ENDED = 1
"""`terminal` code: the move into this node ended the game."""

UNEXPANDED = -1
"""`first_child` of a node without children (in `Tree` and in the batched search's rows)."""

MAX_VISITS = 2**31 - 1
"""The most simulations one tree can count (int32 `visits`)."""


@dataclass(frozen=True)
class Tree:
    """Arrays of one search tree; N is the capacity (nodes).

    Attributes:
        visits: int32 [N], simulations that passed through the node (at most MAX_VISITS; int32
            rather than int64 keeps a node's children's counts in fewer cache lines: 6% faster
            per simulation at 200,000 Connect Four simulations).
        value_sum: float64 [N], sum of simulation results for the player who made the move into the
            node (the player to move at its parent): +1 win, 0 draw, -1 loss. For the root, the
            player who moved last (the opponent of the player to move at the root).
        prior: float32 [N], prior probability of the move into the node (uniform for UCT).
        first_child: int32 [N], index of the first child, -1 while not expanded.
        num_children: int32 [N], number of children, 0 while not expanded or terminal.
        parent: int32 [N], index of the parent, -1 for the root.
        Rows at and past `size` are unused and not part of the tree (zero in a new tree; in one
        reused through `TreePool`, left from its last search).
        action: int8 [N], the game's action of the move into the node (a Connect Four column
            0..6), -1 for the root.
        terminal: int8 [N], OPEN or ENDED (see the module constants).
        counters: int64 [3]: nodes in use, deepest node reached (plies below the root), and 1 once
            an expansion was refused because the arrays were full.
    """

    visits: np.ndarray
    value_sum: np.ndarray
    prior: np.ndarray
    first_child: np.ndarray
    num_children: np.ndarray
    parent: np.ndarray
    action: np.ndarray
    terminal: np.ndarray
    counters: np.ndarray

    @staticmethod
    def allocate(capacity: int) -> Tree:
        """A tree holding only the root, with room for `capacity` nodes (at least MIN_CAPACITY).

        Memory: 30 bytes per node.
        """
        capacity = max(int(capacity), MIN_CAPACITY)
        # Zero-filled arrays are mapped lazily by the OS; rows past `size` are never read, and the
        # search writes every field of a node when it creates it.
        tree = Tree(
            visits=_zeros(capacity, np.int32),
            value_sum=_zeros(capacity, np.float64),
            prior=_zeros(capacity, np.float32),
            first_child=_zeros(capacity, np.int32),
            num_children=_zeros(capacity, np.int32),
            parent=_zeros(capacity, np.int32),
            action=_zeros(capacity, np.int8),
            terminal=_zeros(capacity, np.int8),
            counters=np.zeros(3, dtype=np.int64),
        )
        tree.reset()
        return tree

    def reset(self) -> None:
        """Makes this the tree of the root alone again (rows 1 and up keep old values: they are
        past `size`, never read, and rewritten whole when a search creates their node)."""
        self.visits[0] = 0
        self.value_sum[0] = 0.0
        self.prior[0] = 1.0
        self.first_child[0] = UNEXPANDED
        self.num_children[0] = 0
        self.parent[0] = -1
        self.action[0] = -1
        self.terminal[0] = OPEN
        self.counters[:] = (1, 0, 0)

    @property
    def capacity(self) -> int:
        """Nodes the arrays can hold."""
        return int(self.visits.shape[0])

    @property
    def size(self) -> int:
        """Nodes in use (the root included)."""
        return int(self.counters[0])

    @property
    def max_depth(self) -> int:
        """Deepest node reached, in plies below the root."""
        return int(self.counters[1])

    @property
    def full(self) -> bool:
        """True once an expansion was refused for lack of room."""
        return bool(self.counters[2])

    def children(self, node: int = 0) -> range:
        """Indices of the children of `node` (empty while it is not expanded)."""
        start = int(self.first_child[node])
        if start < 0:
            return range(0)
        return range(start, start + int(self.num_children[node]))


HUGE_PAGE_BYTES = 1 << 21
"""Arrays of at least this size (x86-64's 2 MB huge page) ask the OS for huge pages."""


def _zeros(count: int, dtype) -> np.ndarray:
    """A zero-filled array of `count` elements; from `HUGE_PAGE_BYTES` on, in its own anonymous
    mapping marked for transparent huge pages (`madvise(MADV_HUGEPAGE)`, Linux) where the OS
    offers them. A descent through a large tree reads rows scattered over megabytes: with 2 MB
    pages their addresses stay in the TLB (Connect Four, 200,000 simulations, 400,000 nodes:
    about 4% faster per simulation than with 4 KB pages, interleaved in one process).
    Elsewhere it is `np.zeros`."""
    nbytes = count * np.dtype(dtype).itemsize
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < HUGE_PAGE_BYTES or advice is None:
        return np.zeros(count, dtype=dtype)
    block = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        block.madvise(advice)
    except OSError:
        pass  # THP switched off ("never"): ordinary pages, the same zeros.
    return np.frombuffer(block, dtype=dtype, count=count)


class TreePool:
    """Trees kept after a search for the next one of the same capacity, so that a service running
    search after search writes into memory that is already mapped: a new tree's pages are mapped
    and zeroed by the OS on first touch, which costs a 200,000-simulation Connect Four search
    (400,000 nodes, 14 MB) anywhere from nothing to 50 ms of system time, depending on what the
    process did before (measured on the bench machine). Safe to share between threads; a tree
    is handed to one caller at a time.

    Attributes:
        max_spare: trees kept at most (the oldest goes first); each holds the pages its searches
            touched, up to 30 bytes per node of its capacity.
    """

    def __init__(self, max_spare: int = 8) -> None:
        self.max_spare = max_spare
        self._spare: list[Tree] = []
        self._lock = threading.Lock()

    def acquire(self, capacity: int) -> Tree:
        """A tree of the root alone with room for `capacity` nodes (at least MIN_CAPACITY): a
        kept one of that capacity, reset, or a new one."""
        capacity = max(int(capacity), MIN_CAPACITY)
        with self._lock:
            for i in range(len(self._spare) - 1, -1, -1):
                if self._spare[i].capacity == capacity:
                    tree = self._spare.pop(i)
                    break
            else:
                tree = None
        if tree is None:
            return Tree.allocate(capacity)
        tree.reset()
        return tree

    def release(self, tree: Tree) -> None:
        """Keeps `tree` for a later `acquire`; the caller must not use it any more."""
        with self._lock:
            self._spare.append(tree)
            excess = len(self._spare) - self.max_spare
            if excess > 0:
                del self._spare[:excess]
