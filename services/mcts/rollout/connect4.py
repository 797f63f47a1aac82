"""UCT (Kocsis & Szepesvari 2006) for Connect Four: the Connect Four front of the search core.

`uct_search` runs `services.mcts.rollout.engine` on the game module `services.mcts.games.connect4`
with the UCT rule: one simulation descends by UCB1 `Q + c * sqrt(ln N / n)` (an unvisited child
first), expands a leaf the second time it is reached (the root at once), evaluates the new node
with one random rollout, and backs the result up with the sign flipped at every ply (negamax form:
each node stores values for the player who moved into it). A move that makes four in a row is a
terminal node worth +1 to its mover, a move that fills the board a draw (0).

Rollouts play uniformly random legal moves with "decisive and anti-decisive moves" (Teytaud &
Teytaud 2010): a player who can make four in a row does, and a player facing an immediate threat
blocks it. This is on by default (`decisive_rollouts=True`); with it off the rollouts are plain
uniform random.

`threads > 1` is root parallelisation by default (Chaslot, Winands & van den Herik 2008):
independent trees with seeds `seed, seed + 1, ...` in parallel threads (the kernel releases the
GIL), merged at the root by summing visits and values; `parallelism="tree"` is their tree
parallelisation instead, all threads on one tree with virtual loss, and `transpositions=True`
shares statistics between transposed positions (see `services.mcts.rollout.engine`).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np

from libs.connect4.board import WIDTH, IllegalPosition, Position
from services.mcts.core.root import sample_by_temperature
from services.mcts.games.connect4 import GAME, UNIFORM_GAME, from_position
from services.mcts.rollout.engine import (
    BACKUP,
    EXPAND,
    PARALLELISMS,
    ROLLOUT,
    SELECT,
    SPARE_TREES,
    WAIT,
    SearchConfig,
    grow_parallel,
    split_simulations,
)
from services.mcts.settings import DEFAULT_MAX_NODES, UCT_EXPLORATION, WIDENING_ALPHA


class SearchStopped(Exception):
    """The time limit passed, or the stop event was set, before any simulation finished."""


@dataclass(frozen=True)
class SearchResult:
    """Result of `uct_search`, for the player to move at the root.

    Attributes:
        best_action: the column played, 1..7: the most visited (ties: higher mean value, then
            lower column), or with `temperature` > 0 a column sampled from the visits.
        visits: int64 [7], root visits per column (index 0..6 = column 1..7), 0 for a full column.
        values: float64 [7], mean simulation result per column for the player to move, in [-1, 1];
            nan for a full column or a column never visited.
        priors: float64 [7], prior of each column (uniform over the legal columns, 0 elsewhere).
        root_value: mean simulation result for the player to move, in [-1, 1].
        simulations: simulations completed over all trees.
        tree_size: nodes over all trees.
        max_depth: deepest node reached in any tree, plies below the root.
        elapsed_s: wall-clock seconds of the search.
        simulations_per_second: `simulations / elapsed_s`.
        tree_full: True when a tree ran out of nodes (expansion stopped; results stay valid).
        seed: the seed given; tree (or thread) i used `seed + i`.
        threads: threads searching (one tree each with root parallelisation).
        parallelism: "root" or "tree".
        transposition_hits: positions found in a transposition table when first reached (0
            without tables).
        selection_s, expansion_s, rollout_s, backup_s, wait_s: wall seconds per phase, mean
            over the threads (`services.mcts.rollout.engine.Grown.phase_seconds`: each thread's
            measured kernel time split by its sampled cycle shares; the sum is at most
            `elapsed_s`); 0 when `timed_simulations` is 0.
        timed_simulations: simulations timed phase by phase (about 1 in 16).
    """

    best_action: int
    visits: np.ndarray
    values: np.ndarray
    priors: np.ndarray
    root_value: float
    simulations: int
    tree_size: int
    max_depth: int
    elapsed_s: float
    simulations_per_second: float
    tree_full: bool
    seed: int
    threads: int
    parallelism: str = "root"
    transposition_hits: int = 0
    selection_s: float = 0.0
    expansion_s: float = 0.0
    rollout_s: float = 0.0
    backup_s: float = 0.0
    wait_s: float = 0.0
    timed_simulations: int = 0


def uct_search(
    moves: str,
    simulations: int,
    exploration: float = UCT_EXPLORATION,
    seed: int = 0,
    threads: int = 1,
    max_nodes: int | None = None,
    *,
    decisive_rollouts: bool = True,
    time_limit_s: float | None = None,
    stop: threading.Event | None = None,
    parallelism: str = "root",
    transpositions: bool = False,
    widening_k: float | None = None,
    widening_alpha: float = WIDENING_ALPHA,
    rave_k: float | None = None,
    temperature: float = 0.0,
) -> SearchResult:
    """UCT search with random rollouts from a Connect Four position.

    Args:
        moves: the root position as a Pons move string ('1'..'7' per move, first player first).
        simulations: simulations over all trees (split evenly between the threads), >= 1.
        exploration: c in `Q + c * sqrt(ln N / n)`, with Q in [-1, 1].
        seed: seed of tree 0; tree i uses `seed + i`. Same inputs and seed give the same result
            (with no time limit or stop event).
        threads: threads searching in parallel, >= 1, as `parallelism` says.
        max_nodes: most nodes in each tree; None means DEFAULT_MAX_NODES. The arrays hold
            `min(max_nodes, 7 * simulations_per_tree + 8)` nodes, more than the simulations can
            create, so a small search allocates little.
        parallelism: "root" (independent trees merged at the root) or "tree" (one tree shared
            by the threads, with virtual loss; the same seed gives the same result only with one
            thread).
        transpositions: share statistics between transposed positions (a transposition table
            per tree, keyed by the Connect Four bitboard key).
        widening_k, widening_alpha: progressive widening, a node with N visits considers its
            `ceil(k * N^alpha)` first children; None turns it off (`SearchConfig`).
        rave_k: k of the RAVE schedule `sqrt(k / (3N + k))`; None turns RAVE off.
        temperature: 0 plays the most visited column; T > 0 samples a column with probability
            proportional to `visits ** (1 / T)` (drawn from a generator seeded by `[seed, 1]`).
        decisive_rollouts: rollouts take immediate wins and block immediate losses.
        time_limit_s: wall-clock seconds after which the trees stop (checked every
            `services.mcts.rollout.engine.CHUNK_SIMULATIONS` simulations); the result then reports
            the simulations done.
        stop: an event that stops the search the same way (cancellation).
    Returns:
        SearchResult (see there).
    Raises:
        IllegalPosition: `moves` is malformed or illegal, or the game is over.
        ValueError: simulations, threads or max_nodes below 1, a negative exploration, an
            unknown parallelism, or widening, RAVE or temperature out of range (see
            `services.mcts.rollout.engine.SearchConfig`).
        SearchStopped: the time limit or the stop event ended the search before any simulation.
    """
    root = _root(moves, simulations, threads, exploration, max_nodes, parallelism)
    threads = min(threads, simulations)
    per_tree = simulations if parallelism == "tree" else split_simulations(simulations,
                                                                           threads)[0]
    capacity = min(DEFAULT_MAX_NODES if max_nodes is None else max_nodes, 7 * per_tree + 8)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    config = SearchConfig(rule="uct", exploration=exploration, max_nodes=capacity, seed=seed,
                          parallelism=parallelism, transpositions=transpositions,
                          widening_k=widening_k, widening_alpha=widening_alpha, rave_k=rave_k,
                          temperature=temperature)
    game = GAME if decisive_rollouts else UNIFORM_GAME

    started = time.perf_counter()
    runs = grow_parallel(game, from_position(root), simulations, config, threads,
                         deadline=deadline, stop=stop, pool=SPARE_TREES)
    elapsed = time.perf_counter() - started

    try:
        return _summary(root, runs, elapsed, temperature, seed, threads, parallelism)
    finally:
        for grown in runs:
            SPARE_TREES.release(grown.tree)


def _root(moves: str, simulations: int, threads: int, exploration: float,
          max_nodes: int | None, parallelism: str) -> Position:
    """The root position of `uct_search`, once its arguments are checked (errors as there)."""
    root = Position.from_moves(moves)
    if root.is_finished:
        raise IllegalPosition("the game is over: no move to search")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if threads < 1:
        raise ValueError("threads must be at least 1")
    if exploration < 0 or not math.isfinite(exploration):
        raise ValueError("exploration must be a finite number >= 0")
    if max_nodes is not None and max_nodes < 1:
        raise ValueError("max_nodes must be at least 1")
    if parallelism not in PARALLELISMS:
        raise ValueError("parallelism must be 'root' or 'tree'")
    return root


def _summary(root: Position, runs: list, elapsed: float, temperature: float, seed: int,
             threads: int, parallelism: str) -> SearchResult:
    """`uct_search`'s result from its grown trees (`runs`, `engine.Grown`), merged at the root.

    Raises:
        SearchStopped: no simulation finished.
    """
    done = sum(grown.simulations for grown in runs)
    if done == 0:
        raise SearchStopped("the search was stopped before any simulation finished")
    # Seven columns: plain Python lists cost less than numpy's per-call overhead on arrays this
    # small (51-54 -> 35 us of a search's fixed cost, which is about 250 us on the loaded
    # machine); the same values, operation for operation, in float64.
    counts = [0] * WIDTH
    sums = [0.0] * WIDTH
    for grown in runs:
        tree = grown.tree
        children = tree.children(0)
        rows = slice(children.start, children.stop)
        for col, count, total in zip(tree.action[rows].tolist(), tree.visits[rows].tolist(),
                                     tree.value_sum[rows].tolist(), strict=True):
            counts[col] += count
            sums[col] += total
    legal = root.legal_columns()
    prior = 1.0 / len(legal)
    means = [sums[col] / counts[col] if counts[col] > 0 else math.nan for col in range(WIDTH)]
    visits = np.array(counts, dtype=np.int64)
    value_sums = np.array(sums, dtype=np.float64)
    values = np.array(means, dtype=np.float64)
    priors = np.array([prior if col in legal else 0.0 for col in range(WIDTH)], dtype=np.float64)
    if temperature > 0 and visits.sum() > 0:
        best = sample_by_temperature(visits, temperature, seed)
    else:
        best = max(legal, key=lambda col: (counts[col], means[col] if counts[col] > 0
                                           else -math.inf, -col))
    total_visits = int(visits.sum())
    trees = [grown.tree for grown in runs]
    # Mean over the trees (one thread each, or one tree of all threads): the sum of the phases
    # stays within the wall time of the search.
    phase_seconds = sum(grown.phase_seconds for grown in runs) / len(runs)
    return SearchResult(
        best_action=best + 1,
        visits=visits,
        values=values,
        priors=priors,
        root_value=float(value_sums.sum() / total_visits) if total_visits else 0.0,
        simulations=done,
        tree_size=sum(tree.size for tree in trees),
        max_depth=max(tree.max_depth for tree in trees),
        elapsed_s=elapsed,
        simulations_per_second=done / elapsed if elapsed > 0 else 0.0,
        tree_full=any(tree.full for tree in trees),
        seed=seed,
        threads=threads,
        parallelism=parallelism,
        transposition_hits=sum(grown.transposition_hits for grown in runs),
        selection_s=float(phase_seconds[SELECT]),
        expansion_s=float(phase_seconds[EXPAND]),
        rollout_s=float(phase_seconds[ROLLOUT]),
        backup_s=float(phase_seconds[BACKUP]),
        wait_s=float(phase_seconds[WAIT]),
        timed_simulations=sum(grown.timed_simulations for grown in runs),
    )
