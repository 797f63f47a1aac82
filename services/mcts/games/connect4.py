"""Connect Four for the general search core (see `services.mcts.core.game`), on the bitboard
kernels of `libs.connect4.board` (Pons layout).

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
    BOTTOM_MASK,
    CELLS,
    HEIGHT,
    WIDTH,
    Position,
    alignment,
    bottom_mask_col,
    column_mask,
    completing_cells,
    popcount,
    possible,
    top_mask_col,
)
from libs.connect4.board import encode as encode_position
from services.mcts.core.game import Game
from services.mcts.native.xorshift import random_below

STATE_SIZE = 3
COLUMN_OFFSET = 1
"""The game's actions are the columns 0..6; callers (Pons move strings, the proto) number them
1..7: action + COLUMN_OFFSET."""


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


def _open_column_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables indexed by `open`, a 7-bit set of the columns that are not full (bit `col`):
    the number of open columns, the multiplier and shift that divide by it (`_uniform_column`),
    and at `open * 8 + k` the k-th open column from the left (k = 0, 1, ...)."""
    size = 1 << WIDTH
    counts = np.zeros(size, dtype=np.int64)
    multipliers = np.zeros(size, dtype=np.int64)
    shifts = np.zeros(size, dtype=np.int64)
    columns = np.zeros(size * 8, dtype=np.int64)
    for open_ in range(size):
        open_columns = [col for col in range(WIDTH) if open_ >> col & 1]
        count = max(len(open_columns), 1)
        # floor(x / count) == (x * multiplier) >> shift for every 0 <= x < 2**31 (Granlund &
        # Montgomery 1994, "Division by invariant integers using multiplication", thm 4.2:
        # multiplier * count - 2**shift < count <= 2**(shift - 31)); multiplier < 2**32.
        shift = 31 + (count - 1).bit_length()
        counts[open_] = len(open_columns)
        multipliers[open_] = -(-(1 << shift) // count)
        shifts[open_] = shift
        for k, col in enumerate(open_columns):
            columns[open_ * 8 + k] = col
    return counts, multipliers, shifts, columns


_OPEN_COUNT, _OPEN_MULTIPLIER, _OPEN_SHIFT, _OPEN_COLUMN = _open_column_tables()
_TOP_MASK = BOTTOM_MASK << (HEIGHT - 1)
_XORSHIFT_MULTIPLIER = np.uint64(2685821657736338717)


@njit(cache=True, nogil=True, inline="always")
def _open_columns(mask):
    """The 7-bit set (bit `col`) of the columns whose top cell is empty in `mask`."""
    open_ = 0
    for col in range(WIDTH):
        if (mask & top_mask_col(col)) == 0:
            open_ |= 1 << col
    return open_


@njit(cache=True, nogil=True, inline="always")
def uniform_rollout(state, rng, moves, ply, record):
    """Rollout with uniformly random legal moves: the same moves, result and random draws as
    `_rollout` without decisive moves, faster.

    Each ply draws one number as `services.mcts.native.xorshift.random_below` does (xorshift64* kept
    in a register, written back to `rng[0]` at the end) and plays the k-th open column from
    the left with `k = draw % count`, the remainder taken by a multiplication (exact for the
    draw's 31 bits); the open columns live in a 7-bit set that loses a column when its top cell
    fills. Only the mover can have made four in a row, so only its stones are checked.
    """
    mine = state[0]
    mask = state[1]
    num_moves = state[2]
    open_ = _open_columns(mask)
    x = rng[0]
    result = 0.0
    while num_moves < CELLS:
        x ^= x >> np.uint64(12)
        x ^= x << np.uint64(25)
        x ^= x >> np.uint64(27)
        draw = np.int64((x * _XORSHIFT_MULTIPLIER) >> np.uint64(33))
        quotient = (draw * _OPEN_MULTIPLIER[open_]) >> _OPEN_SHIFT[open_]
        # (An unsigned index: no check for a negative one.)
        col = _OPEN_COLUMN[np.uint64(open_ * 8 + draw - quotient * _OPEN_COUNT[open_])]
        if record:
            moves[ply] = col
        ply += 1
        move = (mask + bottom_mask_col(col)) & column_mask(col)
        mine |= move
        if alignment(mine):
            result = 1.0
            break
        if move & _TOP_MASK:
            # Recomputed by a loop, not toggled, so that LLVM keeps a branch (predicted not
            # taken) instead of a conditional move that would put the table look-ups of the
            # next column choice on the loop's critical path: 4.9 instead of 8.5 ns a ply.
            open_ = _open_columns(mask | move)
        # The opponent moves next: their stones are every stone but the mover's.
        mine ^= mask | move
        mask |= move
        num_moves += 1
    rng[0] = x
    return result, ply


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
