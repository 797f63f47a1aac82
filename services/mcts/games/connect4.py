"""Connect Four for the general search core (see `services.mcts.game`), on the bitboard kernels of
`libs.connect4.board` (Pons layout).

State: int64 [3] = (bitboard of the player to move, bitboard of every stone, stones on the board).
Actions are columns 0..6 (left to right); a column is legal while it is not full and the game goes
on. Rollouts play uniformly random legal moves with "decisive and anti-decisive moves" (Teytaud &
Teytaud 2010, "On the huge benefit of decisive moves in Monte-Carlo tree search algorithms"): a
player who can make four in a row does, and a player facing an immediate threat blocks it
(`GAME`); `UNIFORM_GAME` rolls out with plain uniform random moves.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from libs.connect4.board import (
    CELLS,
    HEIGHT,
    WIDTH,
    Position,
    alignment,
    column_mask,
    completing_cells,
    popcount,
    possible,
)
from libs.connect4.board import encode as encode_position
from services.mcts.game import Game
from services.mcts.xorshift import random_below

STATE_SIZE = 3


@njit(cache=True, nogil=True, inline="always")
def legal_actions(state, out):
    """Columns that are not full, in increasing order; none once the game is over."""
    if state[2] == CELLS or alignment(state[0] ^ state[1]):
        return 0
    moves = possible(state[1])
    count = 0
    for col in range(WIDTH):
        if moves & column_mask(col):
            out[count] = col
            count += 1
    return count


@njit(cache=True, nogil=True, inline="always")
def play(state, action):
    """Drops a stone of the player to move in column `action`; True when that made four in a row
    or filled the board."""
    position = state[0]
    mask = state[1]
    move = possible(mask) & column_mask(action)
    state[0] = position ^ mask
    state[1] = mask | move
    state[2] += 1
    return alignment(position | move) or state[2] == CELLS


@njit(cache=True, nogil=True, inline="always")
def outcome(state, rng):
    """+1 when the last move made four in a row (its mover won), 0 for a full board without."""
    return 1.0 if alignment(state[0] ^ state[1]) else 0.0


@njit(cache=True, nogil=True, inline="always")
def priors(state, actions, count, out):
    """Uniform over the legal columns."""
    for i in range(count):
        out[i] = 1.0 / count


@njit(cache=True, nogil=True, inline="always")
def key(state):
    """Pons' key `position + mask`: a different int64 for every position (the bit it adds above
    each column's top stone marks the column's height, the side to move follows from the stone
    count)."""
    return state[0] + state[1]


@njit(cache=True, nogil=True)
def _column(move):
    """Column (0..6) of a single-bit move."""
    for col in range(WIDTH):
        if move & column_mask(col):
            return col
    return -1


@njit(cache=True, nogil=True, inline="always")
def _rollout(state, rng, moves, ply, record, decisive):
    """Random moves from `state` (a game that goes on, left unchanged) to the end of the game.

    The moves' columns go to `moves[ply], moves[ply + 1], ...` when `record` is set.

    Returns:
        (result for the player who made the last move: +1 win, 0 draw; the ply after it).
    """
    mine = state[0]
    mask = state[1]
    theirs = mine ^ mask
    num_moves = state[2]
    # Cells completing four for each side: they change only when that side moves.
    mine_wins = completing_cells(mine)
    theirs_wins = completing_cells(theirs)
    while num_moves < CELLS:
        moves_now = possible(mask)
        wins = mine_wins & moves_now
        if decisive and wins:
            if record:
                moves[ply] = _column(wins & -wins)
            return 1.0, ply + 1
        threats = theirs_wins & moves_now
        if decisive and threats:
            move = threats & -threats
        else:
            pick = random_below(rng, popcount(moves_now))
            for _ in range(pick):
                moves_now &= moves_now - 1
            move = moves_now & -moves_now
        if record:
            moves[ply] = _column(move)
        ply += 1
        if mine_wins & move:
            return 1.0, ply
        mine |= move
        mask |= move
        mine_wins = completing_cells(mine)
        mine, theirs = theirs, mine
        mine_wins, theirs_wins = theirs_wins, mine_wins
        num_moves += 1
    return 0.0, ply


@njit(cache=True, nogil=True, inline="always")
def decisive_rollout(state, rng, moves, ply, record):
    """Rollout with decisive and anti-decisive moves (see the module doc and `_rollout`)."""
    return _rollout(state, rng, moves, ply, record, True)


@njit(cache=True, nogil=True, inline="always")
def uniform_rollout(state, rng, moves, ply, record):
    """Rollout with uniformly random legal moves (see `_rollout`)."""
    return _rollout(state, rng, moves, ply, record, False)


def initial_state() -> np.ndarray:
    """The empty board, first player to move."""
    return np.zeros(STATE_SIZE, dtype=np.int64)


def from_position(position: Position) -> np.ndarray:
    """The state of a parsed position (`libs.connect4.board.Position`)."""
    return np.array([position.position, position.mask, position.num_moves], dtype=np.int64)


def encode(state: np.ndarray) -> np.ndarray:
    """float32 [2, 6, 7], as `libs.connect4.board.encode`: plane 0 the stones of the player to
    move, plane 1 the opponent's, [plane, row (0 = bottom), column]."""
    position = Position(moves="", position=int(state[0]), mask=int(state[1]))
    return encode_position(position)


GAME = Game(name="connect4", num_actions=WIDTH, state_size=STATE_SIZE, max_plies=WIDTH * HEIGHT,
            players=2, initial_state=initial_state, legal_actions=legal_actions, play=play,
            outcome=outcome, priors=priors, encode=encode, rollout=decisive_rollout, key=key)
"""Connect Four with decisive rollouts."""

UNIFORM_GAME = Game(name="connect4", num_actions=WIDTH, state_size=STATE_SIZE,
                    max_plies=WIDTH * HEIGHT, players=2, initial_state=initial_state,
                    legal_actions=legal_actions, play=play, outcome=outcome, priors=priors,
                    encode=encode, rollout=uniform_rollout, key=key)
"""Connect Four with uniformly random rollouts."""
