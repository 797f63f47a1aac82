"""Connect Four boards as numpy arrays of bitboards, so that a batch of leaves from many searches
is played, checked and encoded in a few vectorised operations (no Python per position).

Layout as `libs.connect4.board` (Pascal Pons' bitboard): bit `col * 7 + row`, row 0 the bottom,
one sentinel bit on top of each column; `position` holds the stones of the player to move, `mask`
every stone. All arrays are int64 [B] (49 bits fit).
"""

from __future__ import annotations

import numpy as np

from libs.connect4.board import HEIGHT, WIDTH

H1 = HEIGHT + 1
CELLS = HEIGHT * WIDTH
_BOTTOM = np.array([1 << (col * H1) for col in range(WIDTH)], dtype=np.int64)
_TOP = np.array([1 << (HEIGHT - 1 + col * H1) for col in range(WIDTH)], dtype=np.int64)
_SHIFTS = np.array([[col * H1 + row for col in range(WIDTH)] for row in range(HEIGHT)],
                   dtype=np.int64)
"""int64 [6, 7]: the bit of cell (row, col)."""


def play(position: np.ndarray, mask: np.ndarray, column: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plays `column` (int64 [B], 0..6, playable) for the player to move in each board.

    Returns:
        (position, mask, won): the new boards (position for the new player to move) and bool [B],
        True where the move made four in a row.
    """
    new_mask = mask | (mask + _BOTTOM[column])
    mover = position | (new_mask ^ mask)
    return position ^ mask, new_mask, alignment(mover)


def alignment(stones: np.ndarray) -> np.ndarray:
    """bool [B]: True where `stones` (int64 [B], one player's bitboard) holds four in a row."""
    found = np.zeros(stones.shape, dtype=np.bool_)
    for shift in (H1, HEIGHT, HEIGHT + 2, 1):
        pairs = stones & (stones >> shift)
        found |= (pairs & (pairs >> (2 * shift))) != 0
    return found


def legal(mask: np.ndarray) -> np.ndarray:
    """bool [B, 7]: the columns that are not full."""
    return (mask[:, None] & _TOP[None, :]) == 0


def encode(position: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """float32 [B, 2, 6, 7], as `libs.connect4.board.encode`: plane 0 the stones of the player to
    move, plane 1 the opponent's; [plane, row, col], row 0 the bottom."""
    opponent = position ^ mask
    planes = np.empty((len(position), 2, HEIGHT, WIDTH), dtype=np.float32)
    planes[:, 0] = (position[:, None, None] >> _SHIFTS[None]) & 1
    planes[:, 1] = (opponent[:, None, None] >> _SHIFTS[None]) & 1
    return planes


def from_moves(moves: str) -> tuple[int, int]:
    """(position, mask) of a Pons move string (assumed legal and unfinished)."""
    position = np.zeros(1, dtype=np.int64)
    mask = np.zeros(1, dtype=np.int64)
    for char in moves:
        position, mask, _ = play(position, mask, np.array([int(char) - 1]))
    return int(position[0]), int(mask[0])
