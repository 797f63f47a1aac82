"""The Connect Four front of the rollout engine: UCT (Kocsis & Szepesvari 2006) from a position
given as a Pons move string, with decisive rollouts by default (docs/services/mcts.md, "The
Connect Four front"). `search_position` takes the engine's `SearchConfig` as the gRPC edge
builds it; `uct_search` is the same search for in-process callers, with its options as
arguments."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import numpy as np

from libs.connect4.board import IllegalPosition, Position
from libs.connect4.geometry import STANDARD, Board
from services.mcts.core.config import PARALLELISMS, SearchConfig
from services.mcts.core.result import SearchResult, SearchStopped
from services.mcts.games.connect4 import COLUMN_OFFSET, from_position, game
from services.mcts.rollout.engine import SPARE_TREES, grow_parallel, split_simulations
from services.mcts.rollout.summary import summarise
from services.mcts.settings import DEFAULT_MAX_NODES, UCT_EXPLORATION, WIDENING_ALPHA


def search_position(root: Position, simulations: int, config: SearchConfig, threads: int = 1, *,
                    decisive_rollouts: bool = True, deadline: float | None = None,
                    stop: threading.Event | None = None) -> SearchResult:
    """Searches the Connect Four position `root` (a game that goes on, on its own board) with
    `simulations` simulations over all trees and `threads` threads, as `config` says. Each tree
    holds at most `min(config.max_nodes, 7 * simulations_per_tree + 8)` nodes, more than the
    simulations can create, so a small search allocates little.

    Args:
        decisive_rollouts: rollouts take immediate wins and block immediate losses.
        deadline: `time.monotonic()` seconds after which the trees stop (checked every
            `rollout.engine.CHUNK_SIMULATIONS` simulations); the result then reports the
            simulations done.
        stop: an event that stops the search the same way (cancellation).
    Returns:
        the result, with `action_offset` 1 (`best_action` is the column, 1..W of `root.board`).
    Raises:
        ValueError: as `rollout.engine.grow_parallel`.
        SearchStopped: the deadline or the stop event ended the search before any simulation.
    """
    threads = min(threads, simulations)
    per_tree = simulations if config.parallelism == "tree" else split_simulations(simulations,
                                                                                  threads)[0]
    capacity = min(config.max_nodes, 7 * per_tree + 8)
    if capacity != config.max_nodes:
        config = replace(config, max_nodes=capacity)
    started = time.perf_counter()
    runs = grow_parallel(game(root.board, decisive_rollouts), from_position(root), simulations,
                         config, threads, deadline=deadline, stop=stop, pool=SPARE_TREES)
    elapsed = time.perf_counter() - started
    try:
        if sum(grown.simulations for grown in runs) == 0:
            raise SearchStopped("the search was stopped before any simulation finished")
        legal = root.legal_columns()
        prior = 1.0 / len(legal)
        priors = np.array([prior if col in legal else 0.0 for col in range(root.board.columns)],
                          dtype=np.float64)
        return summarise(runs, legal, priors, elapsed, config, action_offset=COLUMN_OFFSET)
    finally:
        for grown in runs:
            SPARE_TREES.release(grown.tree)


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
    board: Board = STANDARD,
) -> SearchResult:
    """UCT search with random rollouts from a Connect Four position (`search_position`).

    Args:
        moves: the root position as a Pons move string ('1'..'W' per move, first player first).
        board: the board `moves` is played on (7x6 by default).
        simulations: simulations over all trees (split evenly between the threads), >= 1.
        exploration: c in `Q + c * sqrt(ln N / n)`, with Q in [-1, 1].
        seed: seed of tree 0; tree i uses `seed + i`. Same inputs and seed give the same result
            (with no time limit or stop event; with one thread under parallelism "tree").
        threads: threads searching in parallel, >= 1, as `parallelism` says.
        max_nodes: most nodes in each tree; None means DEFAULT_MAX_NODES (and see
            `search_position`).
        parallelism, transpositions, widening_k, widening_alpha, rave_k, temperature: as
            `SearchConfig` (the temperature draw uses a generator seeded by `[seed, 1]`).
        decisive_rollouts, stop: as `search_position`.
        time_limit_s: wall-clock seconds after which the trees stop (see `search_position`).
    Returns:
        the result; `best_action` is the column played, 1..7.
    Raises:
        IllegalPosition: `moves` is malformed or illegal, or the game is over.
        ValueError: simulations, threads or max_nodes below 1, a negative exploration, an
            unknown parallelism, or widening, RAVE or temperature out of range.
        SearchStopped: the time limit or the stop event ended the search before any simulation.
    """
    root = _root(moves, simulations, threads, exploration, max_nodes, parallelism, board)
    used = min(threads, simulations)
    per_tree = simulations if parallelism == "tree" else split_simulations(simulations, used)[0]
    capacity = min(DEFAULT_MAX_NODES if max_nodes is None else max_nodes, 7 * per_tree + 8)
    config = SearchConfig(rule="uct", exploration=exploration, max_nodes=capacity, seed=seed,
                          parallelism=parallelism, transpositions=transpositions,
                          widening_k=widening_k, widening_alpha=widening_alpha, rave_k=rave_k,
                          temperature=temperature)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    return search_position(root, simulations, config, threads,
                           decisive_rollouts=decisive_rollouts, deadline=deadline, stop=stop)


def _root(moves: str, simulations: int, threads: int, exploration: float,
          max_nodes: int | None, parallelism: str, board: Board = STANDARD) -> Position:
    """The root position of `uct_search`, once its arguments are checked (errors as there)."""
    root = Position.from_moves(moves, board)
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
