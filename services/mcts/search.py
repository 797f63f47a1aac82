"""UCT (Kocsis & Szepesvari 2006) with random rollouts for Connect Four, compiled with numba.

One simulation descends from the root choosing the child with the highest UCB1 score
`Q + c * sqrt(ln N / n)` (an unvisited child first), expands a leaf the second time it is reached
(the root at once), evaluates the new node with one random rollout, and backs the result up with
the sign flipped at every ply (negamax form: each node stores values for the player who moved into
it). A move that makes four in a row is a terminal node worth +1 to its mover, a move that fills
the board a draw (0); terminals are never expanded and need no rollout.

Rollouts play uniformly random legal moves with "decisive and anti-decisive moves" (Teytaud &
Teytaud 2010, "On the huge benefit of decisive moves in Monte-Carlo tree search algorithms"): a
player who can make four in a row does, and a player facing an immediate threat blocks it. This is
on by default (`decisive_rollouts=True`); with it off the rollouts are plain uniform random.

The select / expand / rollout / backup loop is one `njit(nogil=True, cache=True)` kernel on the
arrays of `services.mcts.tree.Tree`, with its own xorshift64* generator state, so a seed fixes the
whole tree, and searches in different threads run in parallel. `threads > 1` is root
parallelisation (Chaslot, Winands & van den Herik 2008): independent trees with seeds
`seed, seed + 1, ...`, merged at the root by summing visits and values.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numba import njit

from libs.connect4.board import (
    CELLS,
    WIDTH,
    IllegalPosition,
    Position,
    column_mask,
    completing_cells,
    popcount,
    possible,
    winning_cells,
)
from services.mcts.tree import DRAWN, OPEN, WON, Tree

DEFAULT_MAX_NODES = 2_000_000
"""Default node capacity of one tree (about 68 MB) when `max_nodes` is not given."""
CHUNK_SIMULATIONS = 4096
"""Simulations per kernel call when a time limit or a stop event has to be checked in between."""

_MULTIPLIER = np.uint64(2685821657736338717)


class SearchStopped(Exception):
    """The time limit passed, or the stop event was set, before any simulation finished."""


@njit(cache=True, nogil=True)
def _next_random(rng):
    """xorshift64* (Vigna 2016): advances `rng[0]` (uint64 state) and returns 64 random bits."""
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * _MULTIPLIER


@njit(cache=True, nogil=True)
def _random_below(rng, n):
    """A uniform integer in [0, n) for n <= 2**31."""
    return np.int64(_next_random(rng) >> np.uint64(33)) % n


@njit(cache=True, nogil=True)
def rollout(position, mask, num_moves, rng, decisive):
    """Plays random moves to the end of the game from a position whose game is not over.

    Returns:
        +1.0 when the player to move at the start wins, -1.0 when they lose, 0.0 for a draw.
    """
    sign = 1.0
    mine = position
    theirs = position ^ mask
    # Cells completing four for each side: they change only when that side moves.
    mine_wins = completing_cells(mine)
    theirs_wins = completing_cells(theirs)
    while num_moves < CELLS:
        moves = possible(mask)
        if mine_wins & moves:
            if decisive:
                return sign
        threats = theirs_wins & moves
        if decisive and threats:
            move = threats & -threats
        else:
            pick = _random_below(rng, popcount(moves))
            for _ in range(pick):
                moves &= moves - 1
            move = moves & -moves
            if mine_wins & move:
                return sign
        mine |= move
        mask |= move
        mine_wins = completing_cells(mine)
        mine, theirs = theirs, mine
        mine_wins, theirs_wins = theirs_wins, mine_wins
        num_moves += 1
        sign = -sign
    return 0.0


@njit(cache=True, nogil=True)
def run_simulations(visits, value_sum, prior, first_child, num_children, parent, action, terminal,
                    counters, root_position, root_mask, root_moves, simulations, exploration, rng,
                    decisive):
    """Runs `simulations` UCT simulations on a tree (see `Tree` for the arrays) in place.

    The root (node 0) must hold an unfinished position given by `root_position`, `root_mask`
    (bitboards, `libs.connect4.board` layout) and `root_moves` (stones on the board).
    """
    capacity = visits.shape[0]
    for _ in range(simulations):
        node = 0
        position = root_position
        mask = root_mask
        num_moves = root_moves
        depth = 0
        # Selection: UCB1 among the children, unvisited children first (in column order).
        while num_children[node] > 0:
            start = first_child[node]
            log_n = math.log(visits[node])
            best = start
            best_score = -np.inf
            for child in range(start, start + num_children[node]):
                n = visits[child]
                if n == 0:
                    best = child
                    break
                score = value_sum[child] / n + exploration * math.sqrt(log_n / n)
                if score > best_score:
                    best_score = score
                    best = child
            node = best
            move = possible(mask) & column_mask(action[node])
            position, mask = position ^ mask, mask | move
            num_moves += 1
            depth += 1
        # Expansion: the root at once, any other open leaf on its second visit.
        if terminal[node] == OPEN and (node == 0 or visits[node] > 0):
            moves = possible(mask)
            count = popcount(moves)
            size = counters[0]
            if size + count > capacity:
                counters[2] = 1
            else:
                wins = winning_cells(position, mask) & moves
                k = 0
                for col in range(WIDTH):
                    if moves & column_mask(col):
                        child = size + k
                        visits[child] = 0
                        value_sum[child] = 0.0
                        prior[child] = 1.0 / count
                        first_child[child] = -1
                        num_children[child] = 0
                        parent[child] = node
                        action[child] = col
                        if wins & column_mask(col):
                            terminal[child] = WON
                        elif num_moves + 1 == CELLS:
                            terminal[child] = DRAWN
                        else:
                            terminal[child] = OPEN
                        k += 1
                counters[0] = size + count
                first_child[node] = size
                num_children[node] = count
                node = size
                move = moves & column_mask(action[node])
                position, mask = position ^ mask, mask | move
                num_moves += 1
                depth += 1
        if depth > counters[1]:
            counters[1] = depth
        # Evaluation, for the player who moved into `node`.
        if terminal[node] == WON:
            value = 1.0
        elif terminal[node] == DRAWN:
            value = 0.0
        else:
            value = -rollout(position, mask, num_moves, rng, decisive)
        # Backup, negamax style.
        while node >= 0:
            visits[node] += 1
            value_sum[node] += value
            value = -value
            node = parent[node]


@dataclass(frozen=True)
class SearchResult:
    """Result of `uct_search`, for the player to move at the root.

    Attributes:
        best_action: the most visited column, 1..7 (ties: higher mean value, then lower column).
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
        seed: the seed given; tree i used `seed + i`.
        threads: trees searched in parallel.
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


def _rng_state(seed: int) -> np.ndarray:
    """splitmix64 of the seed: a nonzero xorshift state for any seed (0 included)."""
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return np.array([z or 1], dtype=np.uint64)


def _search_tree(root: Position, simulations: int, exploration: float, seed: int, capacity: int,
                 decisive: bool, deadline: float | None,
                 stop: threading.Event | None) -> tuple[Tree, int]:
    tree = Tree.allocate(capacity)
    rng = _rng_state(seed)
    chunk = simulations if deadline is None and stop is None else CHUNK_SIMULATIONS
    done = 0
    while done < simulations:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if stop is not None and stop.is_set():
            break
        n = min(chunk, simulations - done)
        run_simulations(tree.visits, tree.value_sum, tree.prior, tree.first_child,
                        tree.num_children, tree.parent, tree.action, tree.terminal, tree.counters,
                        root.position, root.mask, root.num_moves, n, exploration, rng, decisive)
        done += n
    return tree, done


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def uct_search(
    moves: str,
    simulations: int,
    exploration: float = 2.0,
    seed: int = 0,
    threads: int = 1,
    max_nodes: int | None = None,
    *,
    decisive_rollouts: bool = True,
    time_limit_s: float | None = None,
    stop: threading.Event | None = None,
) -> SearchResult:
    """UCT search with random rollouts from a Connect Four position.

    Args:
        moves: the root position as a Pons move string ('1'..'7' per move, first player first).
        simulations: simulations over all trees (split evenly between the threads), >= 1.
        exploration: c in `Q + c * sqrt(ln N / n)`, with Q in [-1, 1].
        seed: seed of tree 0; tree i uses `seed + i`. Same inputs and seed give the same result
            (with no time limit or stop event).
        threads: independent trees searched in parallel threads (root parallelisation), >= 1.
        max_nodes: most nodes in each tree; None means DEFAULT_MAX_NODES. The arrays hold
            `min(max_nodes, 7 * simulations_per_tree + 8)` nodes, more than the simulations can
            create, so a small search allocates little.
        decisive_rollouts: rollouts take immediate wins and block immediate losses.
        time_limit_s: wall-clock seconds after which the trees stop (checked every
            CHUNK_SIMULATIONS simulations); the result then reports the simulations done.
        stop: an event that stops the search the same way (cancellation).
    Returns:
        SearchResult (see there).
    Raises:
        IllegalPosition: `moves` is malformed or illegal, or the game is over.
        ValueError: simulations, threads or max_nodes below 1, or a negative exploration.
        SearchStopped: the time limit or the stop event ended the search before any simulation.
    """
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
    threads = min(threads, simulations)
    per_tree = _split(simulations, threads)
    capacity = min(DEFAULT_MAX_NODES if max_nodes is None else max_nodes, 7 * per_tree[0] + 8)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s

    started = time.perf_counter()
    if threads == 1:
        runs = [_search_tree(root, simulations, exploration, seed, capacity, decisive_rollouts,
                             deadline, stop)]
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="uct") as pool:
            futures = [
                pool.submit(_search_tree, root, per_tree[i], exploration, seed + i, capacity,
                            decisive_rollouts, deadline, stop)
                for i in range(threads)
            ]
            runs = [future.result() for future in futures]
    elapsed = time.perf_counter() - started

    done = sum(n for _, n in runs)
    if done == 0:
        raise SearchStopped("the search was stopped before any simulation finished")
    visits = np.zeros(WIDTH, dtype=np.int64)
    value_sums = np.zeros(WIDTH, dtype=np.float64)
    for tree, _ in runs:
        for child in tree.children(0):
            col = int(tree.action[child])
            visits[col] += tree.visits[child]
            value_sums[col] += tree.value_sum[child]
    legal = [col for col in range(WIDTH) if root.can_play(col)]
    priors = np.zeros(WIDTH, dtype=np.float64)
    priors[legal] = 1.0 / len(legal)
    values = np.full(WIDTH, np.nan, dtype=np.float64)
    seen = visits > 0
    values[seen] = value_sums[seen] / visits[seen]
    best = max(legal, key=lambda col: (visits[col], values[col] if seen[col] else -np.inf, -col))
    total_visits = int(visits.sum())
    return SearchResult(
        best_action=best + 1,
        visits=visits,
        values=values,
        priors=priors,
        root_value=float(value_sums.sum() / total_visits) if total_visits else 0.0,
        simulations=done,
        tree_size=sum(tree.size for tree, _ in runs),
        max_depth=max(tree.max_depth for tree, _ in runs),
        elapsed_s=elapsed,
        simulations_per_second=done / elapsed if elapsed > 0 else 0.0,
        tree_full=any(tree.full for tree, _ in runs),
        seed=seed,
        threads=threads,
    )
