"""The records the rollout engine's kernels take: one numba-typed `NamedTuple` per kind of thing,
so that a kernel takes a handful of arguments instead of one per array (as mctx's `search` takes
a `Tree` of arrays).

- `Nodes`: the tree's arrays (`services.mcts.core.tree.Tree`) with the per-node AMAF statistics and
  the arrivals of tree parallelisation.
- `Table`: the transposition table's arrays (`services.mcts.rollout.transpositions`) and each
node's entry.
- `Options`: the selection rule and its constants.
- `Scratch`: one thread's private buffers, random state and counters.
- `GameFunctions`: the game's numba functions (`services.mcts.core.game`), typed by identity, so
  numba compiles one specialisation of a kernel per game with the calls inlined.

Numba passes a `NamedTuple` by value as a struct of its fields: reading `nodes.visits` in a kernel
costs nothing, and the kernels compile to the same loops as with one argument per array (the trees
hash the same, `tests/unit/mcts/test_tree_hashes_golden.py`). Built once per search in Python, by
the functions below.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numba.core import types
from numba.extending import typeof_impl

from services.mcts.core.config import SearchConfig
from services.mcts.core.game import MAX_ACTIONS, Game
from services.mcts.core.selection import PUCT, UCT
from services.mcts.core.tree import Tree
from services.mcts.rollout.transpositions import TranspositionTable

CACHE_LINE = 64
"""Bytes of a cache line (x86-64), the padding between the threads' private arrays."""


class Nodes(NamedTuple):
    """The tree as the kernels see it; N = capacity. The first nine fields are `Tree`'s (same
    dtypes and meaning); then:

    Attributes:
        amaf_visits: int64 [N], amaf_value_sum: float64 [N]: all-moves-as-first statistics of the
            move into each node (RAVE), for the player who made it.
        arrivals: int64 [N], threads' arrivals at each node (tree parallelisation: arrivals minus
            visits is the node's virtual loss); int64 [1] and unused in the sequential kernel.
    """

    visits: np.ndarray
    value_sum: np.ndarray
    prior: np.ndarray
    first_child: np.ndarray
    num_children: np.ndarray
    parent: np.ndarray
    action: np.ndarray
    terminal: np.ndarray
    counters: np.ndarray
    amaf_visits: np.ndarray
    amaf_value_sum: np.ndarray
    arrivals: np.ndarray


class Table(NamedTuple):
    """A transposition table (`TranspositionTable`'s arrays) and the nodes' entries.

    Attributes:
        on: False when the search has no table (then every array has one unused element).
        entry: int32 [N], each node's entry, -1 until looked up.
        slot_key, slot_entry, visits, value_sum, counters, shift: as `TranspositionTable`.
    """

    on: bool
    entry: np.ndarray
    slot_key: np.ndarray
    slot_entry: np.ndarray
    visits: np.ndarray
    value_sum: np.ndarray
    counters: np.ndarray
    shift: int


class Options(NamedTuple):
    """The rule of a search as the kernels take it (`core.config.SearchConfig`'s, resolved).

    Attributes:
        rule: UCT or PUCT (`services.mcts.core.selection`).
        exploration: c of UCB1 or c_puct of PUCT.
        widening_k, widening_alpha: progressive widening; k = 0 is off.
        rave_k: RAVE's k; 0 is off.
        players: 1 or 2 (values flip sign per ply with 2).
    """

    rule: int
    exploration: float
    widening_k: float
    widening_alpha: float
    rave_k: float
    players: int


class Scratch(NamedTuple):
    """One thread's private arrays, each padded by a cache line on both sides so that threads
    writing their own never share a line (false sharing).

    Attributes:
        state: int64 [S], the state of the simulation in progress.
        actions: int64 [MAX_ACTIONS], action_priors: float64 [MAX_ACTIONS]: legal actions and
            their priors.
        path: int64 [max_plies + 1], the nodes of the simulation's path, root first.
        moves: int64 [max_plies + 1], the actions played, in the tree then the rollout.
        seen: int64 [2, MAX_ACTIONS], AMAF marks: `seen[side, a] == stamp` once `side` played `a`
            at or below the ply being backed up.
        rng: uint64 [1], the xorshift64* state of the thread's rollouts.
        phases: int64 [4], work counts (selection steps, expanded nodes, rollout plies, backup
            steps).
        phase_cycles: int64 [6], sampled cycles per phase (select, expand, rollout, backup,
            wait) and the number of simulations timed.
    """

    state: np.ndarray
    actions: np.ndarray
    action_priors: np.ndarray
    path: np.ndarray
    moves: np.ndarray
    seen: np.ndarray
    rng: np.ndarray
    phases: np.ndarray
    phase_cycles: np.ndarray


class GameFunctions(NamedTuple):
    """A game's numba functions (contracts in `services.mcts.core.game`); `rollout` and `key` may be
    None (uniformly random rollouts; no transposition table)."""

    legal_actions: Any
    play: Any
    outcome: Any
    priors: Any
    rollout: Any
    key: Any


_FUNCTION_TYPES: dict[tuple[GameFunctions, Any], types.Type] = {}
"""The numba type of each `GameFunctions` seen, by its functions (see `_typeof_functions`)."""


@typeof_impl.register(GameFunctions)
def _typeof_functions(val: GameFunctions, c) -> types.Type | None:
    """The numba type of a `GameFunctions`, as numba's own typing of a named tuple gives it
    (`types.BaseTuple.from_types` of its members' types), computed once per set of functions.

    Numba's dispatcher types most arguments from a fingerprint in C, but not a function (a
    `Dispatcher`): a record holding them is typed in Python, member by member, on every call,
    which cost each search about 30 us (a tenth of a 1,000-simulation search), more than the
    five function arguments of the kernels before the records. Functions are compared by
    identity, so the cache holds one entry per game (and `key` stand-in)."""
    key = (val, c)
    found = _FUNCTION_TYPES.get(key)
    if found is None:
        members = [typeof_impl(member, c) for member in val]
        if any(member is None for member in members):
            return None
        found = _FUNCTION_TYPES[key] = types.BaseTuple.from_types(members, type(val))
    return found


def nodes_of(tree: Tree, amaf_visits: np.ndarray, amaf_value_sum: np.ndarray,
             arrivals: np.ndarray | None = None) -> Nodes:
    """The `Nodes` of `tree` and its AMAF arrays (`arrivals` None: an unused int64 [1])."""
    if arrivals is None:
        arrivals = np.zeros(1, dtype=np.int64)
    return Nodes(tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
                 tree.parent, tree.action, tree.terminal, tree.counters, amaf_visits,
                 amaf_value_sum, arrivals)


def table_of(table: TranspositionTable | None, entry: np.ndarray | None) -> Table:
    """The `Table` of `table` and the nodes' `entry` (None: an empty one, `on` False)."""
    if table is None or entry is None:
        return Table(False, np.full(1, -1, dtype=np.int32), np.zeros(1, dtype=np.int64),
                     np.full(1, -1, dtype=np.int32), np.zeros(1, dtype=np.int64), np.zeros(1),
                     np.zeros(2, dtype=np.int64), 63)
    return Table(True, entry, table.slot_key, table.slot_entry, table.visits, table.value_sum,
                 table.counters, table.shift)


def options_of(game: Game, config: SearchConfig) -> Options:
    """The kernels' `Options` of a search of `game` with `config` (an option that is off, None,
    becomes 0)."""
    return Options(PUCT if config.rule == "puct" else UCT, float(config.exploration),
                   float(config.widening_k or 0.0), float(config.widening_alpha),
                   float(config.rave_k or 0.0), game.players)


def functions_of(game: Game, key: Any = None) -> GameFunctions:
    """The `GameFunctions` of `game`; `key` replaces a missing `game.key` (a function that is
    never called, for kernels typed to take one)."""
    return GameFunctions(game.legal_actions, game.play, game.outcome, game.priors, game.rollout,
                         game.key if game.key is not None else key)


def scratch_for(game: Game, state: np.ndarray, rng: np.ndarray, phases: np.ndarray,
                phase_cycles: np.ndarray) -> Scratch:
    """New `Scratch` for one thread searching `state` of `game`, with its random state `rng`
    (uint64 [1]) and counters (int64 [4] and [6], views into the caller's arrays)."""
    return Scratch(_padded(state.shape, state.dtype), _padded(MAX_ACTIONS, np.int64),
                   _padded(MAX_ACTIONS, np.float64), _padded(game.max_plies + 1, np.int64),
                   _padded(game.max_plies + 1, np.int64), _padded((2, MAX_ACTIONS), np.int64),
                   rng, phases, phase_cycles)


def _padded(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed C-contiguous array of `shape` with CACHE_LINE bytes of unused room before and
    after it."""
    count = math.prod(shape) if isinstance(shape, tuple) else int(shape)
    pad = -(-CACHE_LINE // np.dtype(dtype).itemsize)
    return np.zeros(count + 2 * pad, dtype=dtype)[pad:pad + count].reshape(shape)
