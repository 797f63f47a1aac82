"""Connect Four rules on bitboards for any board size, compiled per size.

`rules(board)` returns the kernels of one `libs.connect4.geometry.Board`: numba
`njit(cache=True, nogil=True)` closures whose board constants (width, height, masks, shifts) are
compile-time constants, exactly as module-level globals would be, so the standard 7x6 board runs
the same machine code as a kernel written for 7x6 alone, and each other size gets its own. Their
on-disk cache is keyed by the values they captured (`libs.numba_cache`), so every size is compiled
once per machine.

Layout and conventions: `libs.connect4.geometry` (Pons' bitboard, `H + 1` bits per column);
`position` holds the stones of the player to move, `mask` every stone; after a move the roles swap
(`position ^= mask`). Columns are 0..W-1 here. Sources: Pascal Pons, "Solving Connect 4"
(blog.gamesolver.org, parts 6 and 10).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from numba import njit

from libs import numba_cache
from libs.connect4.geometry import Board

NOT_A_COLUMN = 1
FULL_COLUMN = 2
AFTER_WIN = 3
"""Error codes of `Rules.parse`."""


@njit(cache=True, nogil=True)
def popcount(x: int) -> int:
    """Number of set bits of a non-negative int64."""
    n = 0
    while x:
        x &= x - 1
        n += 1
    return n


@njit(cache=True, nogil=True, inline="always")
def _completing(stones: int, shift: int) -> int:
    """Cells completing four in a row along the direction of bit distance `shift` (a constant
    where it is inlined)."""
    p = (stones << shift) & (stones << (2 * shift))
    r = p & (stones << (3 * shift))
    r |= p & (stones >> shift)
    p = (stones >> shift) & (stones >> (2 * shift))
    r |= p & (stones << shift)
    return r | (p & (stones >> (3 * shift)))


@dataclass(frozen=True)
class Rules:
    """The kernels and constants of one board size (see the module doc; every kernel takes and
    returns int64 values, columns 0..W-1).

    Attributes:
        board: the size.
        bottom_mask: one bit at the bottom cell of every column.
        board_mask: every playable cell (sentinel bits excluded).
        top_mask: one bit at the top cell of every column.
    """

    board: Board
    bottom_mask: int
    board_mask: int
    top_mask: int
    top_mask_col: Any
    bottom_mask_col: Any
    column_mask: Any
    can_play: Any
    play: Any
    play_move: Any
    possible: Any
    legal_columns_mask: Any
    alignment: Any
    completing_cells: Any
    winning_cells: Any
    can_win_next: Any
    is_winning_move: Any
    non_losing_moves: Any
    parse: Any


def _cell_kernels(width: int, height: int) -> dict[str, Any]:
    """Kernels about single cells and columns."""
    h1 = height + 1
    bottom = sum(1 << (col * h1) for col in range(width))
    board_mask = bottom * ((1 << height) - 1)

    @njit(cache=True, nogil=True)
    def top_mask_col(col):
        """The bit of the top cell of column `col`."""
        return 1 << (height - 1 + col * h1)

    @njit(cache=True, nogil=True)
    def bottom_mask_col(col):
        """The bit of the bottom cell of column `col`."""
        return 1 << (col * h1)

    @njit(cache=True, nogil=True)
    def column_mask(col):
        """Every cell of column `col`."""
        return ((1 << height) - 1) << (col * h1)

    @njit(cache=True, nogil=True)
    def can_play(mask, col):
        """True when column `col` is not full."""
        return (mask & top_mask_col(col)) == 0

    @njit(cache=True, nogil=True)
    def play(position, mask, col):
        """Plays column `col` (playable, unchecked); the new (position, mask), position for the
        new player to move."""
        return position ^ mask, mask | (mask + bottom_mask_col(col))

    @njit(cache=True, nogil=True)
    def play_move(position, mask, move):
        """Plays the single-bit `move` (a cell from `possible`); the new (position, mask)."""
        return position ^ mask, mask | move

    @njit(cache=True, nogil=True)
    def possible(mask):
        """The playable cells: the lowest empty cell of each non-full column."""
        return (mask + bottom) & board_mask

    @njit(cache=True, nogil=True)
    def legal_columns_mask(mask):
        """Bit `col` set for every column that is not full."""
        out = 0
        for col in range(width):
            if (mask & top_mask_col(col)) == 0:
                out |= 1 << col
        return out

    return {"bottom_mask": bottom, "board_mask": board_mask,
            "top_mask": bottom << (height - 1), **{
                f.__name__: f for f in (top_mask_col, bottom_mask_col, column_mask, can_play,
                                        play, play_move, possible, legal_columns_mask)}}


def _line_kernels(height: int, board_mask: int) -> dict[str, Any]:
    """Kernels about four in a row: shifts of 1 (vertical), H + 1 (horizontal), H and H + 2
    (the diagonals)."""
    h1 = height + 1
    d1 = height
    d2 = height + 2

    @njit(cache=True, nogil=True)
    def alignment(stones):
        """True when `stones` (one player's bitboard) holds four in a row in any direction."""
        m = stones & (stones >> h1)  # horizontal
        if m & (m >> (2 * h1)):
            return True
        m = stones & (stones >> d1)  # diagonal one way
        if m & (m >> (2 * d1)):
            return True
        m = stones & (stones >> d2)  # diagonal the other way
        if m & (m >> (2 * d2)):
            return True
        m = stones & (stones >> 1)  # vertical
        return (m & (m >> 2)) != 0

    @njit(cache=True, nogil=True)
    def completing_cells(stones):
        """Cells that would complete four in a row for `stones`, occupied or not (Pons part 10)."""
        r = (stones << 1) & (stones << 2) & (stones << 3)  # vertical: three stones below
        r |= _completing(stones, h1)
        r |= _completing(stones, d1)
        r |= _completing(stones, d2)
        return r & board_mask

    @njit(cache=True, nogil=True)
    def winning_cells(stones, mask):
        """Empty cells (playable now or later) that would complete four in a row for `stones`."""
        return completing_cells(stones) & (board_mask ^ mask)

    return {"alignment": alignment, "completing_cells": completing_cells,
            "winning_cells": winning_cells}


def _move_kernels(width: int, cells: Any) -> dict[str, Any]:
    """Kernels about the player to move's choices, on the kernels `cells` (a dict)."""
    possible, winning_cells = cells["possible"], cells["winning_cells"]
    column_mask, can_play, play = cells["column_mask"], cells["can_play"], cells["play"]

    @njit(cache=True, nogil=True)
    def can_win_next(position, mask):
        """True when the player to move has a move that wins at once."""
        return (winning_cells(position, mask) & possible(mask)) != 0

    @njit(cache=True, nogil=True)
    def is_winning_move(position, mask, col):
        """True when playing column `col` wins at once for the player to move."""
        return (winning_cells(position, mask) & possible(mask) & column_mask(col)) != 0

    @njit(cache=True, nogil=True)
    def non_losing_moves(position, mask):
        """Playable cells that do not hand the opponent an immediate win (Pons part 10); assumes
        the player to move cannot win at once (0: every move loses)."""
        moves = possible(mask)
        opponent_win = winning_cells(position ^ mask, mask)
        forced = moves & opponent_win
        if forced:
            if forced & (forced - 1):
                return 0
            moves = forced
        return moves & ~(opponent_win >> 1)

    @njit(cache=True, nogil=True)
    def parse(columns):
        """Plays `columns` (int64 [n], 0..W-1 expected) from the empty board: (position, mask,
        won, error, index), error 0 or NOT_A_COLUMN, FULL_COLUMN, AFTER_WIN at move `index`."""
        position = 0
        mask = 0
        won = False
        for index in range(columns.shape[0]):
            col = columns[index]
            if won:
                return position, mask, won, AFTER_WIN, index
            if col < 0 or col >= width:
                return position, mask, won, NOT_A_COLUMN, index
            if not can_play(mask, col):
                return position, mask, won, FULL_COLUMN, index
            won = is_winning_move(position, mask, col)
            position, mask = play(position, mask, col)
        return position, mask, won, 0, -1

    return {f.__name__: f for f in (can_win_next, is_winning_move, non_losing_moves, parse)}


@functools.cache
def rules(board: Board) -> Rules:
    """The kernels of `board` (built once per process and size; compiled on first call)."""
    cells = _cell_kernels(board.columns, board.rows)
    cells.update(_line_kernels(board.rows, cells["board_mask"]))
    cells.update(_move_kernels(board.columns, cells))
    numba_cache.enable(*(value for value in cells.values() if hasattr(value, "py_func")))
    return Rules(board=board, **cells)
