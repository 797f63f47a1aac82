"""Connect Four rules on bitboards, after Pascal Pons' "Solving Connect 4" (blog.gamesolver.org,
part 6), and `Position`, the Python-side API: parsing move strings, validity checks and the
neural-net encoding, on a board of any size (`libs.connect4.geometry.Board`, 7x6 by default).

Layout: a W x H board is packed into an int64, H + 1 bits per column (H cells plus one sentinel
bit above the top), column `col` (0..W-1, left to right) at bits `col*(H+1) .. col*(H+1)+H-1`, row
0 at the bottom. A position is two bitboards: `position` holds the stones of the player to move and
`mask` holds every stone. After a move the roles swap (`position ^= mask`), so the kernels never
need to know which colour is to move. Keys `position + mask` are unique per position and fit in
(H + 1) * W bits (49 on 7x6).

The kernels are numba `njit(cache=True, nogil=True)` functions on plain int64 values, compiled per
board size (`libs.connect4.rules.rules`); the names of this module (`play`, `possible`,
`alignment`, ...) are those of the standard 7x6 board, which the solver and the MCTS search call
from their own compiled loops.

Column numbering: kernels and `Position` methods take `col` in 0..W-1; move strings and every
public "column" or "action" outside this module use 1..W (Pons' files, the protos).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from libs.connect4.geometry import STANDARD, Board
from libs.connect4.rules import AFTER_WIN, FULL_COLUMN, NOT_A_COLUMN, Rules, popcount, rules

WIDTH = STANDARD.columns
HEIGHT = STANDARD.rows
CELLS = WIDTH * HEIGHT
H1 = HEIGHT + 1

_STANDARD_RULES = rules(STANDARD)
BOTTOM_MASK = _STANDARD_RULES.bottom_mask
"""One bit at the bottom cell of every column (7x6)."""
BOARD_MASK = _STANDARD_RULES.board_mask
"""Every playable cell of the 7x6 board (the sentinel row excluded)."""

# The 7x6 kernels (see `libs.connect4.rules.Rules` for each one's contract).
top_mask_col = _STANDARD_RULES.top_mask_col
bottom_mask_col = _STANDARD_RULES.bottom_mask_col
column_mask = _STANDARD_RULES.column_mask
can_play = _STANDARD_RULES.can_play
play = _STANDARD_RULES.play
play_move = _STANDARD_RULES.play_move
alignment = _STANDARD_RULES.alignment
possible = _STANDARD_RULES.possible
winning_cells = _STANDARD_RULES.winning_cells
completing_cells = _STANDARD_RULES.completing_cells
can_win_next = _STANDARD_RULES.can_win_next
is_winning_move = _STANDARD_RULES.is_winning_move
non_losing_moves = _STANDARD_RULES.non_losing_moves
legal_columns_mask = _STANDARD_RULES.legal_columns_mask
__all__ = ["BOARD_MASK", "BOTTOM_MASK", "CELLS", "H1", "HEIGHT", "WIDTH", "Board",
           "IllegalPosition", "Position", "Rules", "STANDARD", "alignment", "bottom_mask_col",
           "can_play", "can_win_next", "column_mask", "completing_cells", "encode",
           "is_winning_move", "legal_columns_mask", "legal_mask", "non_losing_moves", "play",
           "play_move", "popcount", "possible", "rules", "top_mask_col", "winning_cells"]


@functools.cache
def _top_masks(board: Board) -> tuple[int, ...]:
    """The top cell's bit of every column, for `Position.legal_columns` in plain Python."""
    h1 = board.rows + 1
    return tuple(1 << (board.rows - 1 + col * h1) for col in range(board.columns))


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
        moves: the move string, one character '1'..'W' per move, first player first.
        position: bitboard of the stones of the player to move (layout in the module docstring).
        mask: bitboard of every stone.
        won: True when the last move made four in a row (the game is over, the player who just
            moved won).
        board: the board size (7x6 by default).
    """

    moves: str
    position: int
    mask: int
    won: bool = False
    board: Board = STANDARD

    @staticmethod
    def from_moves(moves: str, board: Board = STANDARD) -> Position:
        """Parses a Pons move string ('' is the empty board) on `board`.

        Raises:
            IllegalPosition: a character outside '1'..'W', a move into a full column, or a move
                after four in a row was already made. A string whose last move makes four in a row
                is accepted and gives a position with `won=True`.
        """
        if not isinstance(moves, str):
            raise IllegalPosition(f"moves must be a string, got {type(moves).__name__}")
        if len(moves) > board.cells:
            raise IllegalPosition(f"{len(moves)} moves do not fit on a board of {board.cells} "
                                  "cells")
        code_points = np.frombuffer(moves.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        columns = code_points.astype(np.int64) - ord("1")
        position, mask, won, error, index = rules(board).parse(columns)
        if error == NOT_A_COLUMN:
            raise IllegalPosition(
                f"move {index + 1} is {moves[index]!r}; columns are '1'..'{board.columns}'",
                index)
        if error == FULL_COLUMN:
            raise IllegalPosition(
                f"move {index + 1} plays column {moves[index]}, which is full", index)
        if error == AFTER_WIN:
            raise IllegalPosition(
                f"move {index + 1} ('{moves[index]}') is played after the game was won", index)
        return Position(moves=moves, position=int(position), mask=int(mask), won=bool(won),
                        board=board)

    @property
    def num_moves(self) -> int:
        """Stones on the board (plies played)."""
        return len(self.moves)

    @property
    def is_full(self) -> bool:
        """True when every cell is taken."""
        return self.num_moves == self.board.cells

    @property
    def is_finished(self) -> bool:
        """True when the game is over: four in a row was made or the board is full."""
        return self.won or self.is_full

    @property
    def current_player(self) -> int:
        """0 when the first player is to move, 1 for the second."""
        return self.num_moves % 2

    @property
    def rules(self) -> Rules:
        """The kernels of this position's board size."""
        return rules(self.board)

    def can_play(self, col: int) -> bool:
        """True when column `col` (0..W-1) is not full and the game is not over."""
        return (not self.is_finished and 0 <= col < self.board.columns
                and not self.mask & _top_masks(self.board)[col])

    def legal_columns(self) -> list[int]:
        """Playable columns (0..W-1) in increasing order; empty when the game is over."""
        if self.is_finished:
            return []
        # In plain Python: a call of an njit kernel from Python costs about 1 us of numba's
        # dispatch, seven per call here, and the orchestrator asks several times a request.
        mask = self.mask
        return [col for col, top in enumerate(_top_masks(self.board)) if not mask & top]

    def is_winning_move(self, col: int) -> bool:
        """True when column `col` (0..W-1) is playable and makes four in a row for the mover."""
        return self.can_play(col) and bool(self.rules.is_winning_move(self.position, self.mask,
                                                                       col))

    def can_win_next(self) -> bool:
        """True when the player to move can make four in a row at once."""
        return not self.is_finished and bool(self.rules.can_win_next(self.position, self.mask))

    def play(self, col: int) -> Position:
        """The position after the player to move plays column `col` (0..W-1).

        Raises:
            IllegalPosition: the column is outside 0..W-1 or full, or the game is over.
        """
        if not 0 <= col < self.board.columns:
            raise IllegalPosition(f"column index {col} is outside 0..{self.board.columns - 1}")
        if self.won:
            raise IllegalPosition("the game is already won")
        if self.mask & _top_masks(self.board)[col]:
            raise IllegalPosition(f"column {col + 1} is full")
        kernels = self.rules
        won = bool(kernels.is_winning_move(self.position, self.mask, col))
        position, mask = kernels.play(self.position, self.mask, col)
        return Position(moves=self.moves + str(col + 1), position=position, mask=mask, won=won,
                        board=self.board)

    def key(self) -> int:
        """A unique key of the position (Pons: position + mask), below 2**bits."""
        return self.position + self.mask


@functools.cache
def cell_shifts(board: Board) -> np.ndarray:
    """int64 [H, W]: the bit of cell [row, col] in a bitboard of `board` (row 0 the bottom)."""
    h1 = board.rows + 1
    return np.array([[col * h1 + row for col in range(board.columns)]
                     for row in range(board.rows)], dtype=np.int64)


def _plane(stones: int, board: Board) -> np.ndarray:
    """float32 [H, W]: 1.0 where `stones` has a stone (index [row, col], row 0 at the bottom)."""
    # One vectorised shift instead of a Python bit test per cell (about 15 us a position on 7x6,
    # every EvaluatePositions request pays it); a bitboard has at most 49 bits.
    return ((np.int64(stones) >> cell_shifts(board)) & 1).astype(np.float32)


def encode(position: Position) -> np.ndarray:
    """The input planes of a policy/value network, from the point of view of the player to move.

    Returns:
        float32 array [2, H, W] ([2, 6, 7] on the standard board): plane 0 holds the stones of the
        player to move, plane 1 those of the opponent; index [plane, row, col] with row 0 the
        bottom row and col 0 the leftmost column (move character '1'). A cell is 1.0 when occupied
        by that plane's player, else 0.0.
    """
    board = position.board
    planes = np.empty((2, board.rows, board.columns), dtype=np.float32)
    planes[0] = _plane(position.position, board)
    planes[1] = _plane(position.position ^ position.mask, board)
    return planes


def legal_mask(position: Position) -> np.ndarray:
    """bool array [W] ([7] on the standard board): True for each column (index 0..W-1 = move
    '1'..'W') that can be played now. All False when the game is over (four in a row made, or the
    board full)."""
    out = np.zeros(position.board.columns, dtype=np.bool_)
    for col in position.legal_columns():
        out[col] = True
    return out
