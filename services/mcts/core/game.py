"""What the general search core (`services.mcts.rollout.engine`) needs from a game: one module per
game.

A game module defines numba-compiled functions over a state held in a small int64 array, and one
`Game` record naming them. The engine passes these functions into its kernel as first-class
arguments, so adding a game needs no change to the engine (see `services.mcts.games.tictactoe`).

The functions' contracts (all `njit(cache=True, nogil=True)`):
    legal_actions(state, out) -> int: writes the legal actions (0 <= a < num_actions) to `out`
        (int64 [num_actions]) and returns their count; 0 only when the game is over. The order is
        the order in which progressive widening introduces children when priors tie.
    play(state, action) -> bool: plays a legal action in place; True when the game is now over.
    outcome(state, rng) -> float: result of a finished game in [-1, 1] for the player who made the
        last move; `rng` (uint64 [1], xorshift64* state, see `services.mcts.native.xorshift`)
        serves games whose outcome is random (bandits), the others ignore it.
    priors(state, actions, count, out) -> None: writes the prior probability of each of the
        `count` legal `actions` to `out` (float64 [num_actions]), summing to 1.
    rollout(state, rng, moves, ply, record) -> (float, int), optional: the game's own rollout
        policy. Plays from `state` (a game that goes on; it may be left changed) to the end, writes
        the actions played to `moves[ply], moves[ply + 1], ...` when `record` is True (RAVE needs
        them), and returns the result for the player who made the last move (as `outcome`) and the
        ply after that move. Without one the engine plays uniformly random legal actions.
    key(state) -> int, optional: an int64 code of the state, different for different states (the
        side to move and everything else that decides the game's future included), used by the
        transposition table (`services.mcts.rollout.transpositions`); games without one cannot use
        it. The game must never repeat a state within one game (the table assumes no cycles).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

MAX_ACTIONS = 127
"""Most actions a game may have: the tree stores actions as int8."""


@dataclass(frozen=True)
class Game:
    """A game for the general search core.

    Attributes:
        name: short name ("tictactoe", "connect4").
        num_actions: A, size of the action space (<= MAX_ACTIONS).
        state_size: S, length of the int64 state array.
        max_plies: most moves from any state to the end of the game (sizes the kernel's buffers).
        players: 2 for alternating zero-sum games (values flip sign at every ply), 1 for
            single-agent problems (no flip).
        initial_state: returns the start state, int64 [S].
        legal_actions, play, outcome, priors: the numba functions described in the module doc.
        encode: state int64 [S] -> float32 features for a network (shape documented by the game).
        rollout: the game's rollout policy (module doc), None for uniformly random rollouts.
        key: the state's transposition key (module doc), None when the game has none.
    """

    name: str
    num_actions: int
    state_size: int
    max_plies: int
    players: int
    initial_state: Callable[[], np.ndarray]
    legal_actions: Callable
    play: Callable
    outcome: Callable
    priors: Callable
    encode: Callable[[np.ndarray], np.ndarray]
    rollout: Callable | None = None
    key: Callable | None = None
