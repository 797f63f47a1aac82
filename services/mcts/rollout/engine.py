"""The rollout engine's Python drivers: `grow` (one tree, the sequential kernel),
`grow_tree_parallel` (one tree, all threads, lock-free with virtual loss), `grow_parallel` (root
or tree parallelisation) and `search` (trees merged at the root into a `SearchResult`).

The design (selection rules, progressive widening, RAVE, phase timing, parallel search, the
transposition table, the kernel records) is described in docs/services/mcts.md.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import numpy as np

from services.mcts.core.config import PARALLELISMS, SearchConfig
from services.mcts.core.game import MAX_ACTIONS, Game
from services.mcts.core.result import SearchResult
from services.mcts.core.root import add_dirichlet_noise
from services.mcts.core.tree import MAX_VISITS, UNEXPANDED, Tree, TreePool
from services.mcts.native.cycle_clock import AVAILABLE as CLOCK_AVAILABLE
from services.mcts.native.xorshift import rng_state
from services.mcts.rollout.grown import Grown
from services.mcts.rollout.kernel import TIMED, run_simulations
from services.mcts.rollout.records import (
    functions_of,
    nodes_of,
    options_of,
    scratch_for,
    table_of,
)
from services.mcts.rollout.shared_kernel import (
    CLAIMED,
    REFUSED,
    TARGET,
    no_key,
    run_shared_simulations,
)
from services.mcts.rollout.summary import summarise
from services.mcts.rollout.transpositions import TranspositionTable
from services.mcts.settings import MIN_CAPACITY

DEFAULT_CONFIG = SearchConfig()
"""The options of a search that sets none (UCT, c = 2, no widening, RAVE, noise or table)."""
CHUNK_SIMULATIONS = 4096
"""Simulations per kernel call when a deadline or a stop event has to be checked in between."""

TIMING_SAMPLE_EVERY = 16
"""One simulation in this many (a power of two) is timed phase by phase (docs/services/mcts.md)."""
def _validate(game: Game, state: np.ndarray, simulations: int, config: SearchConfig) -> None:
    if game.num_actions > MAX_ACTIONS:
        raise ValueError(f"a game may have at most {MAX_ACTIONS} actions")
    if state.shape != (game.state_size,):
        raise ValueError(f"the state must have shape ({game.state_size},)")
    if game.legal_actions(state.astype(np.int64), np.empty(MAX_ACTIONS, dtype=np.int64)) == 0:
        raise ValueError("the game is over: no move to search")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if simulations > MAX_VISITS:
        raise ValueError(f"simulations must be at most {MAX_VISITS} (a tree counts visits in "
                         "int32)")
    if config.rule not in ("uct", "puct"):
        raise ValueError("rule must be 'uct' or 'puct'")
    if not (math.isfinite(config.exploration) and config.exploration >= 0):
        raise ValueError("exploration must be a finite number >= 0")
    if config.widening_k is not None and not (config.widening_k > 0 and
                                              0 <= config.widening_alpha <= 1):
        raise ValueError("widening needs k > 0 and 0 <= alpha <= 1")
    if config.rave_k is not None and not config.rave_k > 0:
        raise ValueError("rave_k must be > 0")
    if config.dirichlet_alpha is not None and not (config.dirichlet_alpha > 0 and
                                                   0 <= config.dirichlet_epsilon <= 1):
        raise ValueError("Dirichlet noise needs alpha > 0 and 0 <= epsilon <= 1")
    if not (math.isfinite(config.temperature) and config.temperature >= 0):
        raise ValueError("temperature must be a finite number >= 0")
    if config.parallelism not in PARALLELISMS:
        raise ValueError("parallelism must be 'root' or 'tree'")
    if config.transpositions and game.key is None:
        raise ValueError(f"the game {game.name!r} has no key: no transposition table")


def _run_chunks(run, simulations: int, deadline: float | None,
                stop: threading.Event | None) -> int:
    """Calls `run(n)` until `simulations` are done or the deadline (time.monotonic seconds) passes
    or `stop` is set, checked every CHUNK_SIMULATIONS; returns the simulations done."""
    chunk = simulations if deadline is None and stop is None else CHUNK_SIMULATIONS
    done = 0
    while done < simulations:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if stop is not None and stop.is_set():
            break
        n = min(chunk, simulations - done)
        run(n)
        done += n
    return done


def grow(game: Game, state: np.ndarray, simulations: int,
         config: SearchConfig = DEFAULT_CONFIG, *, deadline: float | None = None,
         stop: threading.Event | None = None, pool: TreePool | None = None) -> Grown:
    """Builds a search tree from `state` (int64 [S], a game that goes on) with `simulations`
    simulations; see `SearchConfig` and docs/services/mcts.md for the options.

    Args:
        deadline: `time.monotonic()` seconds after which no new chunk of simulations starts.
        stop: an event that stops the search the same way (cancellation).
        pool: where the tree comes from (a new one when None); see `TreePool`.
    Returns:
        the tree; `Grown.simulations` says how many simulations ran (0 when stopped at once).
    Raises:
        ValueError: a finished game, a state of the wrong shape, simulations < 1, or an option out
            of range.
    """
    if config.transpositions:
        return grow_tree_parallel(game, state, simulations, config, 1, deadline=deadline,
                                  stop=stop, pool=pool)
    state = np.ascontiguousarray(state, dtype=np.int64)
    _validate(game, state, simulations, config)
    tree = _new_tree(config, pool)
    amaf_visits, amaf_value_sum = _amaf_arrays(config, tree.capacity)
    phases = np.zeros(4, dtype=np.int64)
    phase_cycles = np.zeros(6, dtype=np.int64)
    nodes = nodes_of(tree, amaf_visits, amaf_value_sum)
    options = options_of(game, config)
    scratch = scratch_for(game, state, rng_state(config.seed), phases, phase_cycles)
    functions = functions_of(game)
    sample_mask = _sample_mask()
    kernel_s = np.zeros(1)

    def run(n: int) -> None:
        started = time.perf_counter()
        run_simulations(nodes, options, scratch, functions, state, n, sample_mask)
        kernel_s[0] += time.perf_counter() - started

    done = _grow_with_noise(tree, run, simulations, config, deadline, stop)
    return Grown(tree=tree, amaf_visits=amaf_visits, amaf_value_sum=amaf_value_sum,
                 phases=phases, simulations=done,
                 phase_seconds=_phase_seconds(phase_cycles[None, :], kernel_s),
                 timed_simulations=int(phase_cycles[TIMED]))


def _new_tree(config: SearchConfig, pool: TreePool | None) -> Tree:
    """The empty tree of a search: `config.max_nodes` nodes, from `pool` when given."""
    capacity = max(config.max_nodes, MIN_CAPACITY)
    return pool.acquire(capacity) if pool is not None else Tree.allocate(capacity)


def _amaf_arrays(config: SearchConfig, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """`Grown.amaf_visits` and `amaf_value_sum`: zeroed int64 / float64 [capacity] with RAVE,
    empty without it (the kernels read and write them only with RAVE on). Allocating and
    zeroing two arrays of the tree's size for nothing cost a plain 20,000-simulation Connect
    Four search about 0.3 ms (4%): the allocator reuses freed memory for them, which must be
    cleared, rather than fresh zero pages."""
    if config.rave_k is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.float64)


def _sample_mask() -> int:
    """The kernels' `sample_mask`: time one simulation in TIMING_SAMPLE_EVERY, or none (-1)
    where the cycle counter is not available."""
    return TIMING_SAMPLE_EVERY - 1 if CLOCK_AVAILABLE else -1


def _grow_with_noise(tree: Tree, run, simulations: int, config: SearchConfig,
                     deadline: float | None, stop: threading.Event | None) -> int:
    """Runs the simulations through `run(n)` in chunks; with Dirichlet noise, the first
    simulation expands the root and the noise then goes on the root's priors. Returns the
    simulations done."""
    done = 0
    if config.dirichlet_alpha is not None:
        done = _run_chunks(run, 1, deadline, stop)
        children = tree.children(0)
        if len(children) > 0:
            add_dirichlet_noise(tree.prior[children.start:children.stop],
                                config.dirichlet_alpha, config.dirichlet_epsilon,
                                np.random.default_rng(config.seed))
    if done < simulations and (done > 0 or config.dirichlet_alpha is None):
        done += _run_chunks(run, simulations - done, deadline, stop)
    return done


def _phase_seconds(phase_cycles: np.ndarray, kernel_s: np.ndarray) -> np.ndarray:
    """float64 [5], seconds per phase (SELECT .. WAIT): each thread's measured kernel time
    (`kernel_s`, float64 [T] seconds) split in the proportions of its sampled cycles
    (`phase_cycles`, int64 [T, >= 5]), then the mean over the T threads. The sum is the mean
    thread's kernel time, at most the search's wall time. Zeros when nothing was timed."""
    cycles = np.maximum(phase_cycles[:, :5], 0).astype(np.float64)
    totals = cycles.sum(axis=1)
    timed = totals > 0
    if not timed.any():
        return np.zeros(5)
    shares = cycles[timed] / totals[timed, None]
    return (shares * kernel_s[timed, None]).sum(axis=0) / len(kernel_s)


def grow_tree_parallel(game: Game, state: np.ndarray, simulations: int,
                       config: SearchConfig = DEFAULT_CONFIG, threads: int = 1, *,
                       deadline: float | None = None,
                       stop: threading.Event | None = None,
                       pool: TreePool | None = None) -> Grown:
    """Tree parallelisation (Chaslot, Winands & van den Herik 2008): `threads` threads (at most
    `simulations`) grow ONE tree with virtual loss, without locks (`descend`, `backup_shared`;
    Enzenberger & Mueller 2009); see docs/services/mcts.md. Thread i draws its rollouts with seed
    `config.seed + i`. With `threads == 1` the tree is the one `grow` builds (bit for bit,
    without a transposition table); with more threads the interleaving of the threads changes
    the tree from run to run.

    Args:
        deadline, stop: as `grow` (all threads stop between chunks of CHUNK_SIMULATIONS).
        pool: as `grow`.
    Returns:
        the tree, with its `virtual_loss` (all reverted) and, with `config.transpositions`, its
        transposition table.
    Raises:
        ValueError: threads < 1, a game without `key` when `config.transpositions` is set, or as
            `grow`.
    """
    state = np.ascontiguousarray(state, dtype=np.int64)
    _validate(game, state, simulations, config)
    if threads < 1:
        raise ValueError("threads must be at least 1")
    threads = min(threads, simulations)
    tree = _new_tree(config, pool)
    capacity = tree.capacity
    amaf_visits, amaf_value_sum = _amaf_arrays(config, capacity)
    arrivals = np.zeros(capacity, dtype=np.int64)
    table = TranspositionTable.allocate(capacity) if config.transpositions else None
    entry = np.full(capacity, -1, dtype=np.int32) if config.transpositions else None
    # The transposition table's lock word, the simulations claimed and the current target.
    shared = np.zeros(3, dtype=np.int64)
    phases, phase_cycles, scratches = _thread_scratches(game, state, config.seed, threads)
    nodes = nodes_of(tree, amaf_visits, amaf_value_sum, arrivals)
    table_record = table_of(table, entry)
    options = options_of(game, config)
    functions = functions_of(game, no_key)
    sample_mask = _sample_mask()
    kernel_s = np.zeros(threads)

    def run_thread(i: int) -> None:
        started = time.perf_counter()
        run_shared_simulations(nodes, table_record, shared, options, scratches[i], functions,
                               state, sample_mask)
        kernel_s[i] += time.perf_counter() - started

    with ThreadPoolExecutor(max_workers=threads - 1 or 1,
                            thread_name_prefix="mcts-tree") as executor:
        run = partial(_run_on_threads, executor, run_thread, shared, threads)
        done = _grow_with_noise(tree, run, simulations, config, deadline, stop)
    tree.first_child[tree.first_child == REFUSED] = UNEXPANDED
    cycles = phase_cycles[:, :6].sum(axis=0)
    return Grown(tree=tree, amaf_visits=amaf_visits, amaf_value_sum=amaf_value_sum,
                 phases=phases[:, :4].sum(axis=0), simulations=done,
                 phase_seconds=_phase_seconds(phase_cycles, kernel_s),
                 timed_simulations=int(cycles[TIMED]),
                 threads=threads, virtual_loss=arrivals - tree.visits, table=table, entry=entry)


def _thread_scratches(game: Game, state: np.ndarray, seed: int, threads: int
                      ) -> tuple[np.ndarray, np.ndarray, list]:
    """Each thread's work counters (int64 [T, 16]), sampled cycles (int64 [T, 16]) and `Scratch`,
    thread i's rollouts seeded with `seed + i`: counters and random states on cache lines of
    their own (rows of 16 words)."""
    phases = np.zeros((threads, 16), dtype=np.int64)
    phase_cycles = np.zeros((threads, 16), dtype=np.int64)
    rngs = np.zeros((threads, 16), dtype=np.uint64)
    for i in range(threads):
        rngs[i, 0] = rng_state(seed + i)[0]
    scratches = [scratch_for(game, state, rngs[i, :1], phases[i, :4], phase_cycles[i, :6])
                 for i in range(threads)]
    return phases, phase_cycles, scratches


def _run_on_threads(executor: ThreadPoolExecutor, run_thread, shared: np.ndarray, threads: int,
                    n: int) -> None:
    """Runs `n` more simulations on one shared tree with `threads` threads: the calling thread is
    thread 0, `executor` runs the others (`run_thread(i)`); they stop at the new target."""
    shared[TARGET] = shared[CLAIMED] + n
    others = [executor.submit(run_thread, i) for i in range(1, threads)]
    run_thread(0)
    for other in others:
        other.result()


def split_simulations(total: int, parts: int) -> list[int]:
    """`total` simulations split as evenly as possible into `parts` (the first ones get more)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def grow_parallel(game: Game, state: np.ndarray, simulations: int,
                  config: SearchConfig = DEFAULT_CONFIG, threads: int = 1, *,
                  deadline: float | None = None,
                  stop: threading.Event | None = None,
                  pool: TreePool | None = None) -> list[Grown]:
    """`threads` threads searching `state` as `config.parallelism` says.

    "root": root parallelisation (Chaslot, Winands & van den Herik 2008), `threads` independent
    trees (`min(threads, simulations)` of them) grown in parallel threads, tree i with seed
    `config.seed + i` and `split_simulations(simulations, threads)[i]` simulations. "tree": one
    tree grown by all the threads (`grow_tree_parallel`). The trees come from `pool` when given
    (see `grow`).

    Returns:
        the trees, in seed order (one for "tree"); merge them at the root by summing visits and
        values.
    Raises:
        ValueError: threads < 1, or as `grow`.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if config.parallelism == "tree":
        return [grow_tree_parallel(game, state, simulations, config, threads, deadline=deadline,
                                   stop=stop, pool=pool)]
    threads = min(threads, simulations)
    per_tree = split_simulations(simulations, threads)
    if threads == 1:
        return [grow(game, state, simulations, config, deadline=deadline, stop=stop, pool=pool)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mcts") as executor:
        futures = [executor.submit(grow, game, state, per_tree[i],
                                   replace(config, seed=config.seed + i), deadline=deadline,
                                   stop=stop, pool=pool)
                   for i in range(threads)]
        return [future.result() for future in futures]


SPARE_TREES = TreePool()
"""The trees of finished searches (`search`, `services.mcts.rollout.connect4.uct_search`), kept for
the next ones of the same capacity (see `TreePool`): those functions return statistics, not
trees."""


def search(game: Game, state: np.ndarray, simulations: int,
           config: SearchConfig = DEFAULT_CONFIG, threads: int = 1) -> SearchResult:
    """Searches `state` (int64 [S]) of `game` with `threads` threads (`grow_parallel`, as
    `config.parallelism` says) and chooses an action; see `SearchResult` (actions numbered as
    the game numbers them). The trees come from and go back to `SPARE_TREES`.

    Raises:
        ValueError: as `grow_parallel`.
    """
    started = time.perf_counter()
    runs = grow_parallel(game, state, simulations, config, threads, pool=SPARE_TREES)
    elapsed = time.perf_counter() - started
    try:
        priors = np.zeros(game.num_actions, dtype=np.float64)
        legal = set()
        for grown in runs:
            tree = grown.tree
            for child in tree.children(0):
                priors[int(tree.action[child])] += tree.prior[child] / len(runs)
                legal.add(int(tree.action[child]))
        if not legal:
            # The root could not be expanded (max_nodes too small): every legal action is equal.
            buffer = np.empty(MAX_ACTIONS, dtype=np.int64)
            legal = set(buffer[:game.legal_actions(state.astype(np.int64), buffer)].tolist())
        return summarise(runs, sorted(legal), priors, elapsed, config)
    finally:
        for grown in runs:
            SPARE_TREES.release(grown.tree)
