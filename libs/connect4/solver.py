"""Exact Connect Four solver: negamax with alpha-beta, after Pascal Pons' "Solving Connect 4"
(blog.gamesolver.org, parts 1-12).

What it uses from the blog: the score convention of the benchmark files (below), a bitboard
position (`libs.connect4.board`), alpha-beta negamax whose window is clamped by the score bounds
reachable from the number of moves left, centre-first move order refined by the number of winning
cells a move creates (threat ordering), pruning to non-losing moves, a transposition table of
upper and lower bounds keyed by the 49-bit position key (32-bit partial keys in a table of prime
size, exact by the Chinese remainder theorem), and iterative null-window searches that bisect the
score interval. No opening book.

Every call starts from an empty table, as Pons' benchmark resets it before each position: a
budgeted call's answer (which columns it solves within `max_nodes`) then depends only on its
arguments, never on what the thread solved before. Emptying is O(1): each entry carries the
generation (one per call, 1..255) that wrote it, and an entry of another generation reads as
empty; the table is zeroed once every 255 calls.

Score convention (the files in ../shared/data/connect4-pons): the value for the player to move
under perfect play, 0 for a draw, `22 - s` when the player to move wins with their `s`-th stone,
`s - 22` when they lose to the opponent's `s`-th stone. An immediate win from a position with `n`
stones scores `(43 - n) // 2`. Weak mode only decides the sign: its result is -1, 0 or 1. On a
board of C = W * H cells (`libs.connect4.geometry.Board`; a `Position` carries its board) the same
convention reads `C // 2 + 1 - s`, and an immediate win scores `(C + 1 - n) // 2`.

The search is a numba kernel (`njit(nogil=True)`) compiled per board size (`search_kernel`: the
board's constants are compile-time constants, as in a kernel written for that size alone), so
solvers in different threads run in parallel. A node budget bounds each call; a call that runs
out returns `complete=False` and no score instead of a guess.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
from numba import njit

from libs import numba_cache
from libs.connect4.board import IllegalPosition, Position, popcount
from libs.connect4.geometry import MAX_CELLS, STANDARD, Board
from libs.connect4.rules import Rules, rules

CELLS = STANDARD.cells
MIN_SCORE = -(CELLS // 2) + 3
"""Lowest score a 7x6 position can have once nobody wins within two moves: -18. The bounds of
the transposition table are encoded with the 7x6 offsets on every board (a smaller board's scores
lie within the 7x6 range)."""
MAX_SCORE = (CELLS + 1) // 2 - 3
"""Highest such score: 18."""
DEFAULT_TABLE_SIZE = 4_194_301
"""Transposition table entries: a prime just below 2**22 (about 25 MB: a uint32 partial key and a
uint16 entry: the generation in its high byte, the bound as an int8 in its low byte)."""
GENERATIONS = 255
"""Calls between two zeroings of a table (generation 0 marks an entry never written)."""
DEFAULT_MAX_NODES = 50_000_000
"""Default node budget of one `solve` call."""

_ABORTED = 1000
_LOWER_BOUND_OFFSET = MAX_SCORE - 2 * MIN_SCORE + 2
_UPPER_BOUND_OFFSET = 1 - MIN_SCORE
_LOWER_LIMIT = MAX_SCORE - MIN_SCORE + 1
"""An encoded bound above this is a lower bound, at most this an upper bound."""
_MAX_COLUMNS = 9


def column_order(columns: int) -> np.ndarray:
    """int64 [W]: the columns centre first, then alternately left and right of it (Pons part 5):
    [3, 2, 4, 1, 5, 0, 6] on 7 columns, [2, 1, 3, 0] on 4."""
    return np.array([columns // 2 + (1 - 2 * (i % 2)) * (i + 1) // 2 for i in range(columns)],
                    dtype=np.int64)


_COLUMN_ORDER = column_order(STANDARD.columns)


@njit(cache=True, nogil=True)
def _half_toward_zero(x: int) -> int:
    return x // 2 if x >= 0 else -((-x) // 2)


def _negamax_kernel(cells: int, kernels: Rules):
    """`_negamax` of one board size (one kernel per node: a helper call costs ~10% of speed)."""
    non_losing_moves, winning_cells = kernels.non_losing_moves, kernels.winning_cells
    column_mask, width = kernels.column_mask, kernels.board.columns
    @njit(cache=True, nogil=True)
    def _negamax(position, mask, num_moves, alpha, beta, keys, values, stamp, counters, order,
                 sort_moves, sort_scores):
        """See `_negamax_kernel`: a score within [alpha, beta] when exact, else a bound outside
        it (fail-soft), or _ABORTED once `counters[0]` (nodes) passes `counters[1]`. `stamp`:
        the call's generation << 8, which marks its table entries."""
        counters[0] += 1
        if counters[0] > counters[1]:
            return _ABORTED
        moves = non_losing_moves(position, mask)
        if moves == 0:
            return -((cells - num_moves) // 2)
        if num_moves >= cells - 2:
            return 0
        alpha = max(alpha, -((cells - 2 - num_moves) // 2))
        if alpha >= beta:
            return alpha
        beta = min(beta, (cells - 1 - num_moves) // 2)
        if alpha >= beta:
            return beta
        slot, partial = (position + mask) % keys.shape[0], (position + mask) & 0xFFFFFFFF
        stored = np.int64(values[slot])
        if (stored & 0xFF00) == stamp and np.int64(keys[slot]) == partial:
            stored = ((stored & 0xFF) ^ 0x80) - 0x80  # the low byte is an int8
            if stored > _LOWER_LIMIT:
                alpha = max(alpha, stored - _LOWER_BOUND_OFFSET)
            else:
                beta = min(beta, stored - _UPPER_BOUND_OFFSET)
            if alpha >= beta:
                return alpha if stored > _LOWER_LIMIT else beta
        count = 0
        for i in range(width):
            move = moves & column_mask(order[i])
            if move:
                score = popcount(winning_cells(position | move, mask))
                at = count
                while at > 0 and sort_scores[num_moves, at - 1] < score:
                    sort_moves[num_moves, at] = sort_moves[num_moves, at - 1]
                    sort_scores[num_moves, at] = sort_scores[num_moves, at - 1]
                    at -= 1
                sort_moves[num_moves, at], sort_scores[num_moves, at] = move, score
                count += 1
        for i in range(count):
            child = _negamax(position ^ mask, mask | sort_moves[num_moves, i], num_moves + 1,
                             -beta, -alpha, keys, values, stamp, counters, order,
                             sort_moves, sort_scores)
            if child == _ABORTED:
                return _ABORTED
            if -child >= beta:
                keys[slot], values[slot] = partial, stamp | (_LOWER_BOUND_OFFSET - child & 0xFF)
                return -child
            alpha = max(alpha, -child)
        keys[slot], values[slot] = partial, stamp | ((alpha + _UPPER_BOUND_OFFSET) & 0xFF)
        return alpha

    return _negamax


@functools.cache
def search_kernel(board: Board):
    """`_solve` of one board size: exact (or, when `weak`, sign-only) score or _ABORTED, by null
    windows bisecting the score interval (Pons part 12). Built once per process and size."""
    cells = board.cells
    kernels = rules(board)
    can_win_next = kernels.can_win_next
    negamax = _negamax_kernel(cells, kernels)

    @njit(cache=True, nogil=True)
    def _solve(position, mask, num_moves, weak, tt_keys, tt_values, generation, counters, order,
               sort_moves, sort_scores):
        """See `search_kernel`."""
        if can_win_next(position, mask):
            return 1 if weak else (cells + 1 - num_moves) // 2
        low = -((cells - num_moves) // 2)
        high = (cells + 1 - num_moves) // 2
        if weak:
            low = -1
            high = 1
        while low < high:
            med = low + (high - low) // 2
            if med <= 0 and _half_toward_zero(low) < med:
                med = _half_toward_zero(low)
            elif med >= 0 and _half_toward_zero(high) > med:
                med = _half_toward_zero(high)
            r = negamax(position, mask, num_moves, med, med + 1, tt_keys, tt_values,
                        generation << 8, counters, order, sort_moves, sort_scores)
            if r == _ABORTED:
                return _ABORTED
            if r <= med:
                high = r
            else:
                low = r
        if weak:
            # Fail-soft bounds can overshoot the [-1, 1] window; only the sign is decided.
            return (low > 0) - (low < 0)
        return low

    numba_cache.enable(negamax, _solve)
    return _solve


@dataclass(frozen=True)
class SolveResult:
    """Outcome of one `solve` call.

    Attributes:
        score: the exact score for the player to move (Pons convention; -1/0/1 in weak mode), or
            None when the node budget ran out first.
        nodes: negamax nodes visited.
        complete: True when `score` is exact.
    """

    score: int | None
    nodes: int
    complete: bool


@dataclass(frozen=True)
class MoveScores:
    """Score of each column for the player to move.

    Attributes:
        scores: 7 entries, index 0..6 = column '1'..'7': the score for the player to move after
            playing that column (Pons convention, -1/0/1 in weak mode), None for a full column or
            when the budget ran out before the column was solved.
        nodes: negamax nodes visited over all columns.
        complete: True when every playable column has a score.
    """

    scores: tuple[int | None, ...]
    nodes: int
    complete: bool

    def best_columns(self) -> list[int]:
        """Columns (1..7) with the highest known score; empty when none is known."""
        known = [s for s in self.scores if s is not None]
        if not known:
            return []
        top = max(known)
        return [col + 1 for col, s in enumerate(self.scores) if s == top]


class CancelToken:
    """Stops a running `Solver.solve` / `Solver.best_moves` from another thread (or the event
    loop): `cancel()` sets the running kernel's node budget below its node count, so the kernel
    unwinds at its next node (microseconds) and the call returns incomplete, as if its budget ran
    out. A token cancelled before the call starts makes the call return at once. One token per
    call; cancelling twice is harmless."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: np.ndarray | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """Stops the call this token was given to (now or as soon as it starts)."""
        with self._lock:
            self.cancelled = True
            if self._counters is not None:
                self._counters[1] = -1

    def _attach(self, counters: np.ndarray | None) -> bool:
        """Points the token at the kernel's counters (None detaches); False when cancelled (the
        budget is then already forced below zero)."""
        with self._lock:
            self._counters = counters
            if self.cancelled and counters is not None:
                counters[1] = -1
            return not self.cancelled


def _as_position(position: Position | str, board: Board) -> Position:
    pos = Position.from_moves(position, board) if isinstance(position, str) else position
    if pos.is_finished:
        raise IllegalPosition("the game is over: there is nothing to solve")
    return pos


class Solver:
    """An exact solver with its own transposition table, which every call starts empty (see the
    module docstring), so a call's result depends only on its arguments. One thread at a time uses
    a `Solver`; calls are serialised by a lock, and different `Solver` objects run in parallel
    without the GIL.

    Args:
        table_size: transposition table entries; must be odd and above 2**17 for the partial keys to
            be exact (a prime is best). Memory: 6 bytes per entry.
    """

    def __init__(self, table_size: int = DEFAULT_TABLE_SIZE) -> None:
        if table_size % 2 == 0 or table_size <= 1 << 17:
            raise ValueError("table_size must be odd and above 2**17")
        # Written once here, not left to np.zeros' untouched pages: the table is resident from the
        # start (about 25 MB by default), so a process's memory does not creep up as searches
        # reach more of it.
        self._tt_keys = np.empty(table_size, dtype=np.uint32)
        self._tt_keys.fill(0)
        self._tt_values = np.empty(table_size, dtype=np.uint16)
        self._tt_values.fill(0)
        self._generation = 0
        self._sort_moves = np.zeros((MAX_CELLS + 1, _MAX_COLUMNS), dtype=np.int64)
        self._sort_scores = np.zeros((MAX_CELLS + 1, _MAX_COLUMNS), dtype=np.int64)
        self._counters = np.zeros(2, dtype=np.int64)
        self._lock = threading.Lock()

    def _empty_table(self) -> None:
        """Starts a call on an empty table: the next generation, or, after `GENERATIONS` calls, a
        zeroed table (about 2 ms for the default size). Called with the lock held."""
        if self._generation == GENERATIONS:
            self._tt_values.fill(0)
            self._generation = 0
        self._generation += 1

    def _run(self, board: Board, position: int, mask: int, num_moves: int, weak: bool,
             max_nodes: int, cancel: CancelToken | None = None) -> tuple[int | None, int]:
        self._counters[0] = 0
        self._counters[1] = max_nodes
        if cancel is not None and not cancel._attach(self._counters):
            return None, 0
        try:
            order = _COLUMN_ORDER if board == STANDARD else column_order(board.columns)
            score = search_kernel(board)(position, mask, num_moves, weak, self._tt_keys,
                                         self._tt_values, self._generation, self._counters,
                                         order, self._sort_moves, self._sort_scores)
        finally:
            if cancel is not None:
                cancel._attach(None)
        nodes = int(min(self._counters[0], max_nodes))
        return (None if score == _ABORTED else int(score)), nodes

    def solve(self, position: Position | str, max_nodes: int = DEFAULT_MAX_NODES,
              weak: bool = False, cancel: CancelToken | None = None,
              board: Board = STANDARD) -> SolveResult:
        """Solves a position for the player to move.

        Args:
            position: a `Position` (on its own board) or a Pons move string (on `board`).
            max_nodes: node budget; past it the result has `score=None, complete=False`.
            weak: decide win/draw/loss only (score -1, 0 or 1), usually far fewer nodes.
            cancel: stops the search early (a time budget); the result is then incomplete.
        Raises:
            IllegalPosition: malformed moves, or a finished game.
        """
        pos = _as_position(position, board)
        with self._lock:
            self._empty_table()
            score, nodes = self._run(pos.board, pos.position, pos.mask, pos.num_moves, weak,
                                     max_nodes, cancel)
        return SolveResult(score=score, nodes=nodes, complete=score is not None)

    def best_moves(self, position: Position | str, max_nodes: int = DEFAULT_MAX_NODES,
                   weak: bool = False, cancel: CancelToken | None = None,
                   stop_at_win: bool = False, board: Board = STANDARD) -> MoveScores:
        """Scores every column for the player to move (the negated score of the child position, or
        the immediate-win score for a winning move), columns in centre-first order sharing
        `max_nodes`; `cancel` stops it early (the columns not solved by then stay None).

        `stop_at_win` stops solving once one column is proved winning (a positive score): the
        position is then a proved win and the winning move is known, and only its exact score
        (how fast the win comes) would need the other columns. Those that win at once or hand the
        opponent an immediate win still get their score (no search needed); the others stay None,
        and the result is complete only when none is left (a forced block, say).

        A move string is read on `board`; a `Position` brings its own.
        Raises:
            IllegalPosition: malformed moves, or a finished game.
        """
        pos = _as_position(position, board)
        kernels, cells = pos.rules, pos.board.cells
        scores: list[int | None] = [None] * pos.board.columns
        nodes = 0
        complete = True
        win_score = (cells + 1 - pos.num_moves) // 2
        # The score of a column after which the opponent wins at once, and the columns that don't.
        loss_score = -1 if weak else -((cells - pos.num_moves) // 2)
        safe = kernels.non_losing_moves(pos.position, pos.mask) if stop_at_win else 0
        won = False
        with self._lock:
            self._empty_table()
            for col in column_order(pos.board.columns).tolist():
                if not pos.can_play(col):
                    continue
                if kernels.is_winning_move(pos.position, pos.mask, col):
                    scores[col] = 1 if weak else win_score
                    won = stop_at_win
                    continue
                if won:
                    if safe & kernels.column_mask(col):
                        complete = False
                    else:
                        scores[col] = loss_score
                    continue
                budget = max_nodes - nodes
                if budget <= 0:
                    complete = False
                    continue
                child_position, child_mask = kernels.play(pos.position, pos.mask, col)
                score, used = self._run(pos.board, child_position, child_mask,
                                        pos.num_moves + 1, weak, budget, cancel)
                nodes += used
                if score is None:
                    complete = False
                else:
                    scores[col] = -score
                    won = stop_at_win and score < 0
        return MoveScores(scores=tuple(scores), nodes=nodes, complete=complete)


_local = threading.local()


def default_solver() -> Solver:
    """This thread's solver (created on first use, table of `DEFAULT_TABLE_SIZE` entries)."""
    solver = getattr(_local, "solver", None)
    if solver is None:
        solver = Solver()
        _local.solver = solver
    return solver


def solve(position: Position | str, max_nodes: int = DEFAULT_MAX_NODES,
          weak: bool = False, cancel: CancelToken | None = None,
          board: Board = STANDARD) -> SolveResult:
    """`Solver.solve` on this thread's solver; see there."""
    return default_solver().solve(position, max_nodes, weak, cancel, board)


def best_moves(position: Position | str, max_nodes: int = DEFAULT_MAX_NODES,
               weak: bool = False, cancel: CancelToken | None = None,
               stop_at_win: bool = False, board: Board = STANDARD) -> MoveScores:
    """`Solver.best_moves` on this thread's solver; see there."""
    return default_solver().best_moves(position, max_nodes, weak, cancel, stop_at_win, board)
