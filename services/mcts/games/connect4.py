"""Connect Four for the general search core (see `services.mcts.core.game`), on the bitboard
kernels of `libs.connect4.rules` (Pons layout), on a board of any size (`game(board)`; the
module-level kernels, `GAME` and `UNIFORM_GAME` are the standard 7x6 board's).

State: int64 [3] = (bitboard of the player to move, bitboard of every stone, stones on the board).
Actions are columns 0..W-1 (left to right); a column is legal while it is not full and the game
goes on. Rollouts play uniformly random legal moves with "decisive and anti-decisive moves"
(Teytaud & Teytaud 2010, "On the huge benefit of decisive moves in Monte-Carlo tree search
algorithms"): a player who can make four in a row does, and a player facing an immediate threat
blocks it (`GAME`); `UNIFORM_GAME` rolls out with plain uniform random moves.

Each board size gets its own compiled kernels: they are numba closures over the size's constants
(`_core_kernels`, `_decisive_kernels`, `_uniform_kernel`), which numba compiles as constants, so
the 7x6 kernels are the code a 7x6-only module would compile, and numba's cache keeps one
compiled copy per size.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import njit

from libs import numba_cache
from libs.connect4.board import Position
from libs.connect4.board import encode as encode_position
from libs.connect4.geometry import STANDARD, Board
from libs.connect4.rules import Rules, popcount, rules
from services.mcts.core.game import Game
from services.mcts.native.xorshift import random_below

STATE_SIZE = 3
COLUMN_OFFSET = 1
"""The game's actions are the columns 0..W-1; callers (Pons move strings, the proto) number them
1..W: action + COLUMN_OFFSET."""
_XORSHIFT_MULTIPLIER = np.uint64(2685821657736338717)


@njit(cache=True, nogil=True, inline="always")
def priors(state, actions, count, out):
    """Uniform over the legal columns."""
    for i in range(count):
        out[i] = 1.0 / count


def _core_kernels(r: Rules) -> dict[str, Any]:
    """legal_actions, play, outcome and key of one board size (contracts in
    `services.mcts.core.game`)."""
    width, cells = r.board.columns, r.board.cells
    alignment, possible, column_mask = r.alignment, r.possible, r.column_mask

    @njit(cache=True, nogil=True, inline="always")
    def legal_actions(state, out):
        """Columns that are not full, in increasing order; none once the game is over."""
        if state[2] == cells or alignment(state[0] ^ state[1]):
            return 0
        moves = possible(state[1])
        count = 0
        for col in range(width):
            if moves & column_mask(col):
                out[count] = col
                count += 1
        return count

    @njit(cache=True, nogil=True, inline="always")
    def play(state, action):
        """Drops a stone of the player to move in column `action`; True when that made four in a
        row or filled the board."""
        position = state[0]
        mask = state[1]
        move = possible(mask) & column_mask(action)
        state[0] = position ^ mask
        state[1] = mask | move
        state[2] += 1
        return alignment(position | move) or state[2] == cells

    @njit(cache=True, nogil=True, inline="always")
    def outcome(state, rng):
        """+1 when the last move made four in a row (its mover won), 0 for a full board without."""
        return 1.0 if alignment(state[0] ^ state[1]) else 0.0

    @njit(cache=True, nogil=True, inline="always")
    def key(state):
        """Pons' key `position + mask`: a different int64 for every position (the bit it adds
        above each column's top stone marks the column's height, the side to move follows from
        the stone count)."""
        return state[0] + state[1]

    return {"legal_actions": legal_actions, "play": play, "outcome": outcome, "key": key}


def _decisive_kernels(r: Rules) -> dict[str, Any]:
    """The rollout with decisive and anti-decisive moves of one board size."""
    width, cells = r.board.columns, r.board.cells
    possible, column_mask, completing_cells = r.possible, r.column_mask, r.completing_cells

    @njit(cache=True, nogil=True)
    def _column(move):
        """Column of a single-bit move."""
        for col in range(width):
            if move & column_mask(col):
                return col
        return -1

    @njit(cache=True, nogil=True, inline="always")
    def _rollout(state, rng, moves, ply, record, decisive):
        """Random moves from `state` (a game that goes on, left unchanged) to the end of the game;
        the moves' columns go to `moves[ply], ...` when `record` is set. Returns (result for the
        player who made the last move: +1 win, 0 draw; the ply after it)."""
        mine = state[0]
        mask = state[1]
        theirs = mine ^ mask
        num_moves = state[2]
        # Cells completing four for each side: they change only when that side moves.
        mine_wins = completing_cells(mine)
        theirs_wins = completing_cells(theirs)
        while num_moves < cells:
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

    return {"_rollout": _rollout, "decisive_rollout": decisive_rollout}


def _open_column_tables(width: int, stride: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables indexed by `open`, a W-bit set of the columns that are not full (bit `col`):
    the number of open columns, the multiplier and shift that divide by it (`uniform_rollout`),
    and at `open * stride + k` the k-th open column from the left (k = 0, 1, ...)."""
    size = 1 << width
    counts = np.zeros(size, dtype=np.int64)
    multipliers = np.zeros(size, dtype=np.int64)
    shifts = np.zeros(size, dtype=np.int64)
    columns = np.zeros(size * stride, dtype=np.int64)
    for open_ in range(size):
        open_columns = [col for col in range(width) if open_ >> col & 1]
        count = max(len(open_columns), 1)
        # floor(x / count) == (x * multiplier) >> shift for every 0 <= x < 2**31 (Granlund &
        # Montgomery 1994, "Division by invariant integers using multiplication", thm 4.2:
        # multiplier * count - 2**shift < count <= 2**(shift - 31)); multiplier < 2**32.
        shift = 31 + (count - 1).bit_length()
        counts[open_] = len(open_columns)
        multipliers[open_] = -(-(1 << shift) // count)
        shifts[open_] = shift
        for k, col in enumerate(open_columns):
            columns[open_ * stride + k] = col
    return counts, multipliers, shifts, columns


def _uniform_kernel(r: Rules) -> dict[str, Any]:
    """`uniform_rollout` of one board size, with its tables."""
    width, cells = r.board.columns, r.board.cells
    stride = 8 if width <= 8 else 16
    open_count, open_multiplier, open_shift, open_column = _open_column_tables(width, stride)
    top_mask, top_mask_col = r.top_mask, r.top_mask_col
    alignment, bottom_mask_col, column_mask = r.alignment, r.bottom_mask_col, r.column_mask

    @njit(cache=True, nogil=True, inline="always")
    def _open_columns(mask):
        """The W-bit set (bit `col`) of the columns whose top cell is empty in `mask`."""
        open_ = 0
        for col in range(width):
            if (mask & top_mask_col(col)) == 0:
                open_ |= 1 << col
        return open_

    @njit(cache=True, nogil=True, inline="always")
    def uniform_rollout(state, rng, moves, ply, record):
        """Rollout with uniformly random legal moves: the same moves, result and random draws as
        `_rollout` without decisive moves, faster (see `uniform_rollout`'s module-level doc)."""
        mine = state[0]
        mask = state[1]
        num_moves = state[2]
        open_ = _open_columns(mask)
        x = rng[0]
        result = 0.0
        while num_moves < cells:
            x ^= x >> np.uint64(12)
            x ^= x << np.uint64(25)
            x ^= x >> np.uint64(27)
            draw = np.int64((x * _XORSHIFT_MULTIPLIER) >> np.uint64(33))
            quotient = (draw * open_multiplier[open_]) >> open_shift[open_]
            # (An unsigned index: no check for a negative one.)
            col = open_column[np.uint64(open_ * stride + draw - quotient * open_count[open_])]
            if record:
                moves[ply] = col
            ply += 1
            move = (mask + bottom_mask_col(col)) & column_mask(col)
            mine |= move
            if alignment(mine):
                result = 1.0
                break
            if move & top_mask:
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

    return {"uniform_rollout": uniform_rollout}


def initial_state() -> np.ndarray:
    """The empty board, first player to move (any board size)."""
    return np.zeros(STATE_SIZE, dtype=np.int64)


def from_position(position: Position) -> np.ndarray:
    """The state of a parsed position (`libs.connect4.board.Position`, on its board)."""
    return np.array([position.position, position.mask, position.num_moves], dtype=np.int64)


def _encoder(board: Board):
    def encode(state: np.ndarray) -> np.ndarray:
        """float32 [2, H, W], as `libs.connect4.board.encode`: plane 0 the stones of the player
        to move, plane 1 the opponent's, [plane, row (0 = bottom), column]."""
        position = Position(moves="", position=int(state[0]), mask=int(state[1]), board=board)
        return encode_position(position)

    return encode


@functools.cache
def kernels(board: Board = STANDARD) -> dict[str, Any]:
    """Every kernel of the game on `board` by name (built once per process and size)."""
    r = rules(board)
    found = {**_core_kernels(r), **_decisive_kernels(r), **_uniform_kernel(r)}
    numba_cache.enable(*found.values())
    return found


def game(board: Board = STANDARD, decisive: bool = True) -> Game:
    """Connect Four on `board` for the search core: decisive rollouts (`decisive`) or uniformly
    random ones. Named "connect4" on 7x6, "connect4-WxH" on the others. One `Game` per process,
    board and rollout."""
    return _game(board, decisive)


@functools.cache
def _game(board: Board, decisive: bool) -> Game:
    k = kernels(board)
    return Game(name="connect4" if board == STANDARD else f"connect4-{board.name}",
                num_actions=board.columns, state_size=STATE_SIZE, max_plies=board.cells,
                players=2, initial_state=initial_state, legal_actions=k["legal_actions"],
                play=k["play"], outcome=k["outcome"], priors=priors, encode=_encoder(board),
                rollout=k["decisive_rollout" if decisive else "uniform_rollout"], key=k["key"])


_STANDARD = kernels(STANDARD)
legal_actions = _STANDARD["legal_actions"]
play = _STANDARD["play"]
outcome = _STANDARD["outcome"]
key = _STANDARD["key"]
_rollout = _STANDARD["_rollout"]
decisive_rollout = _STANDARD["decisive_rollout"]
uniform_rollout = _STANDARD["uniform_rollout"]
encode = _encoder(STANDARD)

GAME = game(STANDARD, True)
"""Connect Four (7x6) with decisive rollouts."""

UNIFORM_GAME = game(STANDARD, False)
"""Connect Four (7x6) with uniformly random rollouts.

`uniform_rollout`: each ply draws one number as `services.mcts.native.xorshift.random_below` does
(xorshift64* kept in a register, written back to `rng[0]` at the end) and plays the k-th open
column from the left with `k = draw % count`, the remainder taken by a multiplication (exact for
the draw's 31 bits); the open columns live in a W-bit set that loses a column when its top cell
fills. Only the mover can have made four in a row, so only its stones are checked."""
