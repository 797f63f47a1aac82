"""The games of the AlphaZero loop as numpy arrays of bitboards, so that a batch of leaves from many
searches is played, checked and encoded in a few vectorised operations (no Python per position).

Two games share one representation: a position is two int64 bitboards, `position` (the stones of
the player to move) and `mask` (every stone); a move sets one bit of `mask`, and the roles swap
(`position ^ mask` is the new mover's). An action is a column (Connect Four) or a cell
(tic-tac-toe), 0..A-1; a move string writes action `a` as the character `a + 1` ('1'..'9').
- `ConnectFourBoards(board)`: Connect Four on a `libs.connect4.geometry.Board` of W x H, Pons'
  layout (`libs.connect4.board`: bit `col * (H + 1) + row`, row 0 the bottom); actions are the W
  columns.
- `TicTacToeBoards()`: tic-tac-toe, cell `row * 3 + col` at bit `row * 3 + col`; 9 actions.

Both encode a position as float32 [B, 2, H, W] (plane 0 the mover's stones, plane 1 the
opponent's; tic-tac-toe is 3 x 3). Their symmetries augment the replay (`symmetries`): Connect
Four has one, the left-right mirror (`mirror_actions`, the action each action becomes);
tic-tac-toe the seven rotations and reflections of the square besides the identity (AlphaGo Zero
augments Go's data with the same dihedral group; Silver et al. 2017, Methods).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from libs.connect4.geometry import Board


class Boards:
    """One game's vectorised rules (see the module doc); subclasses set the attributes.

    Attributes:
        name: "connect4-WxH" or "tictactoe".
        num_actions: A.
        rows, columns: H and W of the encoded planes.
        cells: the most plies of a game.
        mirror_actions: int64 [A], the action each action becomes in the left-right mirror.
    """

    name: str
    num_actions: int
    rows: int
    columns: int
    cells: int
    mirror_actions: np.ndarray
    _action_bits: np.ndarray
    """int64 [A]: for tic-tac-toe the bit of each cell (Connect Four plays above `mask`)."""
    _shifts: np.ndarray
    """int64 [H, W]: the bit of each encoded cell."""

    def play(self, position: np.ndarray, mask: np.ndarray, action: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Plays `action` (int64 [B], legal) for the player to move in each position.

        Returns:
            (position, mask, won): the new bitboards (position for the new player to move) and
            bool [B], True where the move completed a line.
        """
        new_mask = mask | self._move_bits(mask, action)
        mover = position | (new_mask ^ mask)
        return position ^ mask, new_mask, self.alignment(mover)

    def _move_bits(self, mask: np.ndarray, action: np.ndarray) -> np.ndarray:
        return self._action_bits[action]

    def alignment(self, stones: np.ndarray) -> np.ndarray:
        """bool [B]: True where `stones` (int64 [B], one player's bitboard) holds a line."""
        raise NotImplementedError

    def legal(self, mask: np.ndarray) -> np.ndarray:
        """bool [B, A]: the actions whose cell (or column) is free (the game's end aside)."""
        raise NotImplementedError

    def encode(self, position: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """float32 [B, 2, H, W]: plane 0 the stones of the player to move, plane 1 the
        opponent's."""
        opponent = position ^ mask
        planes = np.empty((len(position), 2, self.rows, self.columns), dtype=np.float32)
        planes[:, 0] = (position[:, None, None] >> self._shifts[None]) & 1
        planes[:, 1] = (opponent[:, None, None] >> self._shifts[None]) & 1
        return planes

    def from_moves(self, moves: str) -> tuple[int, int]:
        """(position, mask) of a move string (assumed legal and unfinished)."""
        position = np.zeros(1, dtype=np.int64)
        mask = np.zeros(1, dtype=np.int64)
        for char in moves:
            position, mask, _ = self.play(position, mask, np.array([int(char) - 1]))
        return int(position[0]), int(mask[0])

    def key(self, position: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """int64 [B]: a different value for every position (Connect Four: Pons' key
        `position + mask`; tic-tac-toe: `mask * 512 + position`)."""
        return position + mask

    def mirror_planes(self, planes: np.ndarray) -> np.ndarray:
        """The left-right mirror of planes [..., H, W]."""
        return planes[..., ::-1]

    def symmetries(self) -> list[tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]]:
        """Each symmetry of the game but the identity: (the map of planes [..., H, W], int64 [A]
        the action each action becomes). Connect Four: the left-right mirror."""
        return [(self.mirror_planes, self.mirror_actions)]


class ConnectFourBoards(Boards):
    """Connect Four on `board` (see the module doc)."""

    def __init__(self, board: Board) -> None:
        self.board = board
        h, w = board.rows, board.columns
        self.name = f"connect4-{board.name}"
        self.num_actions, self.rows, self.columns, self.cells = w, h, w, board.cells
        self._h1 = h + 1
        self._bottom = np.array([1 << (col * self._h1) for col in range(w)], dtype=np.int64)
        self._top = np.array([1 << (h - 1 + col * self._h1) for col in range(w)], dtype=np.int64)
        self._shifts = np.array([[col * self._h1 + row for col in range(w)] for row in range(h)],
                                dtype=np.int64)
        self.mirror_actions = np.arange(w, dtype=np.int64)[::-1].copy()

    def _move_bits(self, mask: np.ndarray, action: np.ndarray) -> np.ndarray:
        return (mask + self._bottom[action]) & ~mask

    def alignment(self, stones: np.ndarray) -> np.ndarray:
        """bool [B]: four in a row along any direction (shifts H + 1, H, H + 2 and 1)."""
        found = np.zeros(stones.shape, dtype=np.bool_)
        for shift in (self._h1, self._h1 - 1, self._h1 + 1, 1):
            pairs = stones & (stones >> shift)
            found |= (pairs & (pairs >> (2 * shift))) != 0
        return found

    def legal(self, mask: np.ndarray) -> np.ndarray:
        """bool [B, W]: the columns that are not full."""
        return (mask[:, None] & self._top[None, :]) == 0


_TICTACTOE_LINES = np.array([0b000000111, 0b000111000, 0b111000000, 0b001001001, 0b010010010,
                             0b100100100, 0b100010001, 0b001010100], dtype=np.int64)


class TicTacToeBoards(Boards):
    """Tic-tac-toe (see the module doc)."""

    def __init__(self) -> None:
        self.name = "tictactoe"
        self.num_actions, self.rows, self.columns, self.cells = 9, 3, 3, 9
        self._action_bits = np.array([1 << cell for cell in range(9)], dtype=np.int64)
        self._shifts = np.arange(9, dtype=np.int64).reshape(3, 3)
        self.mirror_actions = np.array([row * 3 + 2 - col for row in range(3) for col in range(3)],
                                       dtype=np.int64)

    def key(self, position: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """int64 [B]: `mask * 512 + position`."""
        return (mask << 9) | position

    def alignment(self, stones: np.ndarray) -> np.ndarray:
        """bool [B]: three in a row, column or diagonal."""
        return ((stones[:, None] & _TICTACTOE_LINES[None]) == _TICTACTOE_LINES[None]).any(axis=1)

    def legal(self, mask: np.ndarray) -> np.ndarray:
        """bool [B, 9]: the empty cells."""
        return (mask[:, None] & self._action_bits[None, :]) == 0

    def symmetries(self) -> list[tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]]:
        """The square's seven rotations and reflections besides the identity; a cell's action
        follows its cell."""
        found = []
        for flip in (False, True):
            for turns in range(4):
                if flip or turns:
                    found.append(_dihedral(flip, turns))
        return found


def _dihedral(flip: bool, turns: int) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """The map of planes [..., 3, 3] that mirrors them left-right when `flip`, then turns them
    `turns` quarter turns, and the action each cell's action becomes."""

    def transform(planes: np.ndarray) -> np.ndarray:
        return np.rot90(planes[..., ::-1] if flip else planes, turns, axes=(-2, -1))

    cells = transform(np.arange(9).reshape(3, 3))  # cells[r, c]: the cell that lands at (r, c)
    return transform, np.argsort(cells.ravel()).astype(np.int64)


def boards_for(game: str, board: Board) -> Boards:
    """The vectorised rules of `game` ("connect4" on `board`, or "tictactoe").

    Raises:
        ValueError: an unknown game.
    """
    if game == "connect4":
        return ConnectFourBoards(board)
    if game == "tictactoe":
        return TicTacToeBoards()
    raise ValueError(f"game {game!r}: expected 'connect4' or 'tictactoe'")
