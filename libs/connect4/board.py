"""Connect Four rules on bitboards, after Pascal Pons' "Solving Connect 4" (blog.gamesolver.org,
part 6).

Layout: the 7x6 board is packed into an int64, 7 bits per column (6 cells plus one sentinel bit
above the top), column `col` (0..6, left to right) at bits `col*7 .. col*7+5`, row 0 at the bottom.
A position is two bitboards: `position` holds the stones of the player to move and `mask` holds
every stone. After a move the roles swap (`position ^= mask`), so the kernels never need to know
which colour is to move. Keys `position + mask` are unique per position and fit in 49 bits.

The kernels are numba `njit(cache=True, nogil=True)` functions on plain int64 values; the solver and
the MCTS search call them from their own compiled loops. `Position` is the Python-side API: parsing
move strings, validity checks and the neural-net encoding.

Column numbering: kernels and `Position` methods take `col` in 0..6; move strings and every public
"column" or "action" outside this module use 1..7 (Pons' files, the protos).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

WIDTH = 7
HEIGHT = 6
CELLS = WIDTH * HEIGHT
H1 = HEIGHT + 1

BOTTOM_MASK = sum(1 << (col * H1) for col in range(WIDTH))
"""One bit at the bottom cell of every column."""
BOARD_MASK = BOTTOM_MASK * ((1 << HEIGHT) - 1)
"""Every playable cell (the sentinel row excluded)."""


@njit(cache=True, nogil=True)
def top_mask_col(col: int) -> int:
    """The bit of the top cell of column `col` (0..6)."""
    return 1 << (HEIGHT - 1 + col * H1)


_TOP_MASKS = tuple(top_mask_col.py_func(col) for col in range(WIDTH))
"""`top_mask_col` of every column, for `Position.legal_columns` in plain Python."""


@njit(cache=True, nogil=True)
def bottom_mask_col(col: int) -> int:
    """The bit of the bottom cell of column `col` (0..6)."""
    return 1 << (col * H1)


@njit(cache=True, nogil=True)
def column_mask(col: int) -> int:
    """Every cell of column `col` (0..6)."""
    return ((1 << HEIGHT) - 1) << (col * H1)


@njit(cache=True, nogil=True)
def can_play(mask: int, col: int) -> bool:
    """True when column `col` (0..6) is not full."""
    return (mask & top_mask_col(col)) == 0


@njit(cache=True, nogil=True)
def play(position: int, mask: int, col: int) -> tuple[int, int]:
    """Plays column `col` (0..6) for the player to move; returns the new (position, mask).

    The returned `position` holds the stones of the new player to move (the opponent). The column
    must be playable (`can_play`); this is not checked here.
    """
    return position ^ mask, mask | (mask + bottom_mask_col(col))


@njit(cache=True, nogil=True)
def play_move(position: int, mask: int, move: int) -> tuple[int, int]:
    """Plays the single-bit `move` (a cell from `possible`); returns the new (position, mask)."""
    return position ^ mask, mask | move


@njit(cache=True, nogil=True)
def alignment(stones: int) -> bool:
    """True when `stones` (one player's bitboard) contains four in a row in any direction."""
    m = stones & (stones >> H1)  # horizontal
    if m & (m >> (2 * H1)):
        return True
    m = stones & (stones >> HEIGHT)  # diagonal one way
    if m & (m >> (2 * HEIGHT)):
        return True
    m = stones & (stones >> (HEIGHT + 2))  # diagonal the other way
    if m & (m >> (2 * (HEIGHT + 2))):
        return True
    m = stones & (stones >> 1)  # vertical
    if m & (m >> 2):
        return True
    return False


@njit(cache=True, nogil=True)
def possible(mask: int) -> int:
    """The playable cells: the lowest empty cell of each non-full column."""
    return (mask + BOTTOM_MASK) & BOARD_MASK


@njit(cache=True, nogil=True)
def winning_cells(stones: int, mask: int) -> int:
    """Empty cells (playable now or later) that would complete four in a row for `stones`."""
    return completing_cells(stones) & (BOARD_MASK ^ mask)


@njit(cache=True, nogil=True)
def completing_cells(stones: int) -> int:
    """Cells that would complete four in a row for `stones`, occupied or not (Pons part 10).

    Depends on one player's stones only, so a rollout can keep it until that player moves again.
    """
    # vertical: three stones below
    r = (stones << 1) & (stones << 2) & (stones << 3)
    # horizontal
    p = (stones << H1) & (stones << (2 * H1))
    r |= p & (stones << (3 * H1))
    r |= p & (stones >> H1)
    p = (stones >> H1) & (stones >> (2 * H1))
    r |= p & (stones << H1)
    r |= p & (stones >> (3 * H1))
    # diagonal, shift HEIGHT
    p = (stones << HEIGHT) & (stones << (2 * HEIGHT))
    r |= p & (stones << (3 * HEIGHT))
    r |= p & (stones >> HEIGHT)
    p = (stones >> HEIGHT) & (stones >> (2 * HEIGHT))
    r |= p & (stones << HEIGHT)
    r |= p & (stones >> (3 * HEIGHT))
    # diagonal, shift HEIGHT + 2
    p = (stones << (HEIGHT + 2)) & (stones << (2 * (HEIGHT + 2)))
    r |= p & (stones << (3 * (HEIGHT + 2)))
    r |= p & (stones >> (HEIGHT + 2))
    p = (stones >> (HEIGHT + 2)) & (stones >> (2 * (HEIGHT + 2)))
    r |= p & (stones << (HEIGHT + 2))
    r |= p & (stones >> (3 * (HEIGHT + 2)))
    return r & BOARD_MASK


@njit(cache=True, nogil=True)
def can_win_next(position: int, mask: int) -> bool:
    """True when the player to move has a move that wins at once."""
    return (winning_cells(position, mask) & possible(mask)) != 0


@njit(cache=True, nogil=True)
def is_winning_move(position: int, mask: int, col: int) -> bool:
    """True when playing column `col` (0..6) wins at once for the player to move."""
    return (winning_cells(position, mask) & possible(mask) & column_mask(col)) != 0


@njit(cache=True, nogil=True)
def non_losing_moves(position: int, mask: int) -> int:
    """Playable cells that do not hand the opponent an immediate win (Pons part 10).

    Assumes the player to move cannot win at once. Forced: if the opponent threatens one playable
    cell we must take it (two such cells: no move saves the game, returns 0); never play directly
    below an opponent's winning cell.
    """
    moves = possible(mask)
    opponent_win = winning_cells(position ^ mask, mask)
    forced = moves & opponent_win
    if forced:
        if forced & (forced - 1):
            return 0
        moves = forced
    return moves & ~(opponent_win >> 1)


@njit(cache=True, nogil=True)
def popcount(x: int) -> int:
    """Number of set bits of a non-negative int64."""
    n = 0
    while x:
        x &= x - 1
        n += 1
    return n


@njit(cache=True, nogil=True)
def legal_columns_mask(mask: int) -> int:
    """Bit `col` set for every column (0..6) that is not full."""
    out = 0
    for col in range(WIDTH):
        if (mask & top_mask_col(col)) == 0:
            out |= 1 << col
    return out


_NOT_A_COLUMN = 1
_FULL_COLUMN = 2
_AFTER_WIN = 3


@njit(cache=True, nogil=True)
def _parse(columns: np.ndarray) -> tuple[int, int, bool, int, int]:
    """Plays `columns` (int64 [n], 0..6 expected) from the empty board.

    Returns (position, mask, won, error, index): error 0 when every move was legal, else
    _NOT_A_COLUMN, _FULL_COLUMN or _AFTER_WIN for the move at `index`.
    """
    position = 0
    mask = 0
    won = False
    for index in range(columns.shape[0]):
        col = columns[index]
        if won:
            return position, mask, won, _AFTER_WIN, index
        if col < 0 or col >= WIDTH:
            return position, mask, won, _NOT_A_COLUMN, index
        if not can_play(mask, col):
            return position, mask, won, _FULL_COLUMN, index
        won = is_winning_move(position, mask, col)
        position, mask = play(position, mask, col)
    return position, mask, won, 0, -1


class IllegalPosition(Exception):
    """A move string that is malformed or does not describe a reachable, unfinished game.

    `index` is the 0-based position in the move string of the offending move (or None when the
    string as a whole is at fault); servicers report it under the proto field they parsed.
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.index = index


@dataclass(frozen=True)
class Position:
    """A Connect Four position reached from the empty board.

    Attributes:
        moves: the move string, one character '1'..'7' per move, first player first.
        position: bitboard of the stones of the player to move (Pons layout, see module docstring).
        mask: bitboard of every stone.
        won: True when the last move made four in a row (the game is over, the player who just
            moved won).
    """

    moves: str
    position: int
    mask: int
    won: bool = False

    @staticmethod
    def from_moves(moves: str) -> Position:
        """Parses a Pons move string ('' is the empty board).

        Raises:
            IllegalPosition: a character outside '1'..'7', a move into a full column, or a move
                after four in a row was already made. A string whose last move makes four in a row
                is accepted and gives a position with `won=True`.
        """
        if not isinstance(moves, str):
            raise IllegalPosition(f"moves must be a string, got {type(moves).__name__}")
        if len(moves) > CELLS:
            raise IllegalPosition(f"{len(moves)} moves do not fit on a board of {CELLS} cells")
        code_points = np.frombuffer(moves.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        columns = code_points.astype(np.int64) - ord("1")
        position, mask, won, error, index = _parse(columns)
        if error == _NOT_A_COLUMN:
            raise IllegalPosition(
                f"move {index + 1} is {moves[index]!r}; columns are '1'..'7'", index)
        if error == _FULL_COLUMN:
            raise IllegalPosition(
                f"move {index + 1} plays column {moves[index]}, which is full", index)
        if error == _AFTER_WIN:
            raise IllegalPosition(
                f"move {index + 1} ('{moves[index]}') is played after the game was won", index)
        return Position(moves=moves, position=int(position), mask=int(mask), won=bool(won))

    @property
    def num_moves(self) -> int:
        """Stones on the board (plies played)."""
        return len(self.moves)

    @property
    def is_full(self) -> bool:
        """True when all 42 cells are taken."""
        return self.num_moves == CELLS

    @property
    def is_finished(self) -> bool:
        """True when the game is over: four in a row was made or the board is full."""
        return self.won or self.is_full

    @property
    def current_player(self) -> int:
        """0 when the first player is to move, 1 for the second."""
        return self.num_moves % 2

    def can_play(self, col: int) -> bool:
        """True when column `col` (0..6) is not full and the game is not over."""
        return not self.is_finished and bool(can_play(self.mask, col))

    def legal_columns(self) -> list[int]:
        """Playable columns (0..6) in increasing order; empty when the game is over."""
        if self.is_finished:
            return []
        # `can_play` in plain Python: a call of the njit kernel from Python costs about 1 us of
        # numba's dispatch, seven per call here, and the orchestrator asks several times a request.
        mask = self.mask
        return [col for col, top in enumerate(_TOP_MASKS) if not mask & top]

    def is_winning_move(self, col: int) -> bool:
        """True when column `col` (0..6) is playable and makes four in a row for the mover."""
        return self.can_play(col) and bool(is_winning_move(self.position, self.mask, col))

    def can_win_next(self) -> bool:
        """True when the player to move can make four in a row at once."""
        return not self.is_finished and bool(can_win_next(self.position, self.mask))

    def play(self, col: int) -> Position:
        """The position after the player to move plays column `col` (0..6).

        Raises:
            IllegalPosition: the column is outside 0..6 or full, or the game is over.
        """
        if not 0 <= col < WIDTH:
            raise IllegalPosition(f"column index {col} is outside 0..6")
        if self.won:
            raise IllegalPosition("the game is already won")
        if not can_play(self.mask, col):
            raise IllegalPosition(f"column {col + 1} is full")
        won = bool(is_winning_move(self.position, self.mask, col))
        position, mask = play(self.position, self.mask, col)
        return Position(moves=self.moves + str(col + 1), position=position, mask=mask, won=won)

    def key(self) -> int:
        """A unique 49-bit key of the position (Pons: position + mask)."""
        return self.position + self.mask


_CELL_SHIFTS = np.array([[col * H1 + row for col in range(WIDTH)] for row in range(HEIGHT)],
                        dtype=np.int64)
"""int64 [6, 7]: the bit of cell [row, col] in a bitboard."""


def _plane(stones: int) -> np.ndarray:
    """float32 [6, 7]: 1.0 where `stones` has a stone (index [row, col], row 0 at the bottom)."""
    # One vectorised shift instead of 42 Python bit tests (about 15 us a position, every
    # EvaluatePositions request pays it); a bitboard has 49 bits, so it fits an int64.
    return ((np.int64(stones) >> _CELL_SHIFTS) & 1).astype(np.float32)


def encode(position: Position) -> np.ndarray:
    """The input planes of a policy/value network, from the point of view of the player to move.

    Returns:
        float32 array [2, 6, 7]: plane 0 holds the stones of the player to move, plane 1 those of
        the opponent; index [plane, row, col] with row 0 the bottom row and col 0 the leftmost
        column (move character '1'). A cell is 1.0 when occupied by that plane's player, else 0.0.
    """
    planes = np.empty((2, HEIGHT, WIDTH), dtype=np.float32)
    planes[0] = _plane(position.position)
    planes[1] = _plane(position.position ^ position.mask)
    return planes


def legal_mask(position: Position) -> np.ndarray:
    """bool array [7]: True for each column (index 0..6 = move '1'..'7') that can be played now.

    All False when the game is over (four in a row made, or the board full).
    """
    out = np.zeros(WIDTH, dtype=np.bool_)
    for col in position.legal_columns():
        out[col] = True
    return out
