"""Tic-tac-toe for the general search core: the whole game in one module (see
`services.mcts.core.game`).

State: int64 [3] = (bitboard of the player to move, bitboard of the other player, moves played);
cell `r * 3 + c` is bit `r * 3 + c`, and the action is the cell (0..8). X moves first.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from services.mcts.core.game import Game

CELLS = 9
_LINES = np.array([0b000000111, 0b000111000, 0b111000000, 0b001001001, 0b010010010, 0b100100100,
                   0b100010001, 0b001010100], dtype=np.int64)


class IllegalMove(ValueError):
    """A cell out of range or already taken, or a move after the game ended."""


@njit(cache=True, nogil=True)
def has_line(stones):
    """True when the bitboard `stones` holds three in a row."""
    for line in _LINES:
        if stones & line == line:
            return True
    return False


@njit(cache=True, nogil=True)
def legal_actions(state, out):
    """Empty cells in increasing order; none once a line is made or the board is full."""
    if has_line(state[1]) or state[2] == CELLS:
        return 0
    taken = state[0] | state[1]
    count = 0
    for cell in range(CELLS):
        if not (taken >> cell) & 1:
            out[count] = cell
            count += 1
    return count


@njit(cache=True, nogil=True)
def play(state, action):
    """Puts the mover's mark on cell `action`; True when that made a line or filled the board."""
    mine = state[0] | (np.int64(1) << action)
    state[0] = state[1]
    state[1] = mine
    state[2] += 1
    return has_line(mine) or state[2] == CELLS


@njit(cache=True, nogil=True)
def outcome(state, rng):
    """+1 when the last move made a line (its mover won), 0 for a full board without one."""
    return 1.0 if has_line(state[1]) else 0.0


@njit(cache=True, nogil=True)
def priors(state, actions, count, out):
    """Uniform over the legal cells."""
    for i in range(count):
        out[i] = 1.0 / count


@njit(cache=True, nogil=True)
def key(state):
    """The two bitboards in one int64: the mover's stones in bits 0..8, the other's in 9..17 (the
    side to move follows from the stone counts)."""
    return state[0] | (state[1] << 9)


def initial_state() -> np.ndarray:
    """The empty board, X to move."""
    return np.zeros(3, dtype=np.int64)


def from_moves(cells: Sequence[int]) -> np.ndarray:
    """The state after playing `cells` (0..8) in order from the empty board.

    Raises:
        IllegalMove: a cell out of range or taken, or a move after the game ended.
    """
    state = initial_state()
    ended = False
    for cell in cells:
        if ended:
            raise IllegalMove("the game is over")
        if not 0 <= cell < CELLS or ((int(state[0]) | int(state[1])) >> cell) & 1:
            raise IllegalMove(f"cell {cell} is not playable")
        ended = play(state, cell)
    return state


def encode(state: np.ndarray) -> np.ndarray:
    """float32 [2, 3, 3]: plane 0 the stones of the player to move, plane 1 the opponent's."""
    bits = np.arange(CELLS)
    planes = np.stack([(int(state[0]) >> bits) & 1, (int(state[1]) >> bits) & 1])
    return planes.reshape(2, 3, 3).astype(np.float32)


GAME = Game(name="tictactoe", num_actions=CELLS, state_size=3, max_plies=CELLS, players=2,
            initial_state=initial_state, legal_actions=legal_actions, play=play, outcome=outcome,
            priors=priors, encode=encode, key=key)
