"""Tree parallelisation with virtual loss on one shared tree: the lock, virtual loss applied and
reverted, exact visit conservation and backup signs with several threads, a full tree, the
one-thread case equal to the sequential search, and the per-phase times."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from libs.connect4.board import Position
from services.mcts.core.config import SearchConfig
from services.mcts.core.selection import UCT, ucb1
from services.mcts.core.tree import Tree
from services.mcts.games import connect4, tictactoe
from services.mcts.native.spinlock import acquire, release
from services.mcts.rollout import engine
from services.mcts.rollout.connect4 import uct_search
from services.mcts.rollout.engine import (
    TIMING_SAMPLE_EVERY,
    grow,
    grow_parallel,
    grow_tree_parallel,
    search,
)
from services.mcts.rollout.kernel import BACKUP, EXPAND, SELECT, WAIT
from services.mcts.rollout.records import Nodes, Options, functions_of, scratch_for, table_of
from services.mcts.rollout.shared_kernel import backup_shared, descend, no_key, select_child_shared

FEW = settings(max_examples=15, deadline=None)
openings = st.lists(st.integers(0, 8), max_size=3, unique=True)
TREE_FIELDS = ("visits", "value_sum", "prior", "first_child", "num_children", "parent", "action",
               "terminal", "counters")


@njit(nogil=True)
def _locked_increments(lock, counter, times):
    for _ in range(times):
        acquire(lock, 0)
        counter[0] += 1
        counter[1] = counter[0] * 2  # a second write that must stay paired with the first
        release(lock, 0)


def test_the_spinlock_loses_no_update() -> None:
    lock = np.zeros(1, dtype=np.int64)
    counter = np.zeros(2, dtype=np.int64)
    with ThreadPoolExecutor(4) as pool:
        for future in [pool.submit(_locked_increments, lock, counter, 200_000) for _ in range(4)]:
            future.result()
    assert counter[0] == 800_000 and counter[1] == 1_600_000 and lock[0] == 0


def check_shared_tree(grown, simulations: int, players: int = 2) -> None:
    """Exact conservation and signs on a tree grown by any number of threads, and no virtual loss
    left behind."""
    tree = grown.tree
    size = tree.size
    assert grown.simulations == simulations == tree.visits[0]
    assert (tree.visits[size:] == 0).all()
    assert (grown.virtual_loss == 0).all()
    for node in range(size):
        children = tree.children(node)
        if len(children) == 0:
            continue
        assert (tree.parent[children.start:children.stop] == node).all()
        child_visits = int(tree.visits[children.start:children.stop].sum())
        # A node's visits: its children's plus its own first (evaluating) visit, not the root's.
        own = 0 if node == 0 else 1
        assert tree.visits[node] == child_visits + own
        # Backup signs: a node's value is minus its children's (the mover alternates), plus the
        # result of its own first visit, which lies in [-1, 1].
        child_values = tree.value_sum[children.start:children.stop].sum()
        flipped = -child_values if players == 2 else child_values
        assert abs(tree.value_sum[node] - flipped) <= own + 1e-9
    assert (np.abs(tree.value_sum[:size]) <= tree.visits[:size] + 1e-9).all()
    assert grown.phases[BACKUP] == int(tree.visits[:size].sum())
    assert grown.phases[EXPAND] == size - 1


@FEW
@given(opening=openings, simulations=st.integers(1, 300), seed=st.integers(0, 2**32),
       rule=st.sampled_from(["uct", "puct"]), rave=st.booleans())
def test_one_thread_grows_the_sequential_tree(opening: list[int], simulations: int, seed: int,
                                              rule: str, rave: bool) -> None:
    state = tictactoe.from_moves(opening)
    config = SearchConfig(rule=rule, seed=seed, rave_k=50.0 if rave else None)
    sequential = grow(tictactoe.GAME, state, simulations, config)
    shared = grow_tree_parallel(tictactoe.GAME, state, simulations, config, threads=1)
    for name in TREE_FIELDS:
        assert np.array_equal(getattr(sequential.tree, name), getattr(shared.tree, name)), name
    assert np.array_equal(sequential.amaf_visits, shared.amaf_visits)
    assert np.array_equal(sequential.amaf_value_sum, shared.amaf_value_sum)
    assert np.array_equal(sequential.phases, shared.phases)
    assert (shared.virtual_loss == 0).all()


@FEW
@given(opening=openings, simulations=st.integers(1, 3000), seed=st.integers(0, 2**32),
       threads=st.integers(2, 4), rule=st.sampled_from(["uct", "puct"]), rave=st.booleans())
def test_threads_conserve_visits_and_signs_exactly(opening: list[int], simulations: int,
                                                   seed: int, threads: int, rule: str,
                                                   rave: bool) -> None:
    state = tictactoe.from_moves(opening)
    config = SearchConfig(rule=rule, seed=seed, rave_k=50.0 if rave else None)
    grown = grow_tree_parallel(tictactoe.GAME, state, simulations, config, threads=threads)
    assert grown.threads == min(threads, simulations)
    check_shared_tree(grown, simulations)


def test_connect_four_threads_conserve_visits_under_contention() -> None:
    # Short chunks make the threads meet at the lock often (and re-enter the kernel 25 times).
    state = connect4.from_position(Position.from_moves("4453"))
    grown = grow_tree_parallel(connect4.GAME, state, 100_000, SearchConfig(seed=2), threads=3,
                               deadline=float("inf"))
    check_shared_tree(grown, 100_000)
    assert grown.tree.max_depth > 3


@pytest.mark.parametrize("options", [{"rule": "puct", "rave_k": 50.0, "max_nodes": 300},
                                     {"widening_k": 1.0, "transpositions": True}])
def test_eight_threads_on_a_small_tree_keep_every_invariant(options: dict) -> None:
    # More threads than cores: the scheduler interleaves them at arbitrary points; the small
    # tree makes them meet at the same nodes (and, with max_nodes, fill the tree) all the time.
    grown = grow_tree_parallel(tictactoe.GAME, tictactoe.initial_state(), 30_000,
                               SearchConfig(seed=9, **options), threads=8)
    assert grown.threads == 8
    check_shared_tree(grown, 30_000)
    assert (grown.tree.first_child[: grown.tree.size] >= -1).all()  # no REFUSED left behind
    if "max_nodes" in options:
        assert grown.tree.full
        amaf = grown.amaf_visits[grown.tree.children(0).start:grown.tree.children(0).stop]
        assert (amaf >= grown.tree.visits[grown.tree.children(0).start:
                                         grown.tree.children(0).stop]).all()


@FEW
@given(capacity=st.integers(1, 60), simulations=st.integers(1, 2000), seed=st.integers(0, 100),
       threads=st.integers(2, 3))
def test_a_full_shared_tree_is_reported_not_corrupted(capacity: int, simulations: int, seed: int,
                                                      threads: int) -> None:
    grown = grow_tree_parallel(tictactoe.GAME, tictactoe.initial_state(), simulations,
                               SearchConfig(max_nodes=capacity, seed=seed), threads=threads)
    tree = grown.tree
    assert tree.size <= tree.capacity == max(capacity, 8)
    check_shared_tree(grown, simulations)
    if tree.capacity < 10:  # no room for the root's nine children
        assert tree.full and tree.size == 1


def _nodes(grown, arrivals: np.ndarray) -> Nodes:
    tree = grown.tree
    return Nodes(tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
                 tree.parent, tree.action, tree.terminal, tree.counters, grown.amaf_visits,
                 grown.amaf_value_sum, arrivals)


def _scratch(state: np.ndarray):
    return scratch_for(tictactoe.GAME, state, np.ones(1, dtype=np.uint64),
                       np.zeros(4, dtype=np.int64), np.zeros(6, dtype=np.int64))


def test_virtual_loss_is_applied_on_the_path_and_reverted_by_the_backup() -> None:
    state = tictactoe.initial_state()
    config = SearchConfig(seed=0)
    # Nine simulations: the root is expanded and each of its nine children visited once.
    grown = grow_tree_parallel(tictactoe.GAME, state, 9, config, threads=1)
    tree = grown.tree
    assert (tree.visits[tree.children(0).start:tree.children(0).stop] == 1).all()
    # Arrivals (visits plus simulations in flight) equal visits after a search.
    arrivals = tree.visits + grown.virtual_loss
    assert np.array_equal(arrivals, tree.visits)
    scratches = [_scratch(state) for _ in range(2)]
    nodes = _nodes(grown, arrivals)
    options = Options(UCT, config.exploration, 0.0, 0.5, 0.0, 2)
    paths = []
    for scratch in scratches:
        depth, _ = descend(nodes, table_of(None, None), np.zeros(3, dtype=np.int64), options,
                           scratch, functions_of(tictactoe.GAME, no_key), state, False)
        grown.phases[:] += scratch.phases
        paths.append((depth, scratch.path[: depth + 1].copy()))
    (depth_a, path_a), (depth_b, path_b) = paths
    # Both descents are in flight: one virtual loss on every node of each path, none elsewhere.
    expected = np.zeros(tree.capacity, dtype=np.int64)
    np.add.at(expected, path_a, 1)
    np.add.at(expected, path_b, 1)
    assert np.array_equal(arrivals - tree.visits, expected) and expected[0] == 2
    # The first descent took the best UCB1 child (and, that child's second visitor, expanded
    # it); the second saw that child's virtual loss (one more visit, lost) and the root's
    # (N = 10), which sends it elsewhere.
    children = tree.children(0)
    scores = [ucb1(tree.value_sum[c] / tree.visits[c], 1, 9, config.exploration)
              for c in children]
    assert path_a[1] == children.start + int(np.argmax(scores)) and depth_a == 2
    scores = [ucb1((tree.value_sum[c] - (c == path_a[1])) / (1 + (c == path_a[1])),
                   1 + (c == path_a[1]), 10, config.exploration) for c in children]
    assert path_b[1] == children.start + int(np.argmax(scores)) != path_a[1]
    for (depth, _), scratch, value in zip(paths, scratches, (1.0, -1.0), strict=True):
        steps = backup_shared(nodes, table_of(None, None), scratch, depth, depth, value, 1, 2,
                              False)
        assert steps == depth + 1
        grown.phases[BACKUP] += steps
    assert np.array_equal(arrivals, tree.visits)  # every virtual loss reverted
    check_shared_tree(replace(grown, simulations=11), 11)


def test_select_child_shared_counts_virtual_losses_as_lost_visits() -> None:
    # A root with two children: (visits 3, value 1.5) and (visits 3, value 1.2); two
    # simulations in flight through the first make it (5 arrivals, value -0.5).
    visits = np.array([6, 3, 3], dtype=np.int64)
    value_sum = np.array([0.0, 1.5, 1.2])
    prior = np.array([1.0, 0.5, 0.5], dtype=np.float32)
    zeros_i, zeros_f = np.zeros(3, dtype=np.int64), np.zeros(3)
    options = Options(UCT, 1.0, 0.0, 0.5, 0.0, 2)
    no_table = table_of(None, None)

    def choose(visits, value_sum, arrivals):
        nodes = Nodes(visits, value_sum, prior, zeros_i, zeros_i, zeros_i, zeros_i, zeros_i,
                      zeros_i, zeros_i, zeros_f, np.asarray(arrivals, dtype=np.int64))
        return select_child_shared(nodes, no_table, 0, 1, 2, options)

    # The selecting thread has arrived at the root: arrivals[0] counts it (N = arrivals - 1).
    assert choose(visits, value_sum, [7, 3, 3]) == 1
    assert choose(visits, value_sum, [9, 5, 3]) == 2
    # An unvisited child with a simulation in flight is no longer "unvisited first".
    assert choose(np.zeros(3, dtype=np.int64), np.zeros(3), [3, 1, 0]) == 2


def test_tree_parallel_finds_the_forced_win_and_is_seeded_with_one_thread() -> None:
    config = SearchConfig(seed=3, parallelism="tree")
    state = tictactoe.from_moves([0, 3, 1, 4])
    result = search(tictactoe.GAME, state, 2_000, config, threads=2)
    assert result.action == 2 and result.values[2] == 1.0
    assert result.threads == 2 and result.parallelism == "tree"
    assert result.simulations == 2_000 == int(result.visits.sum())
    a = uct_search("4453", 5_000, seed=4, parallelism="tree")
    b = uct_search("4453", 5_000, seed=4, parallelism="tree")
    c = uct_search("4453", 5_000, seed=4)
    assert np.array_equal(a.visits, b.visits) and np.array_equal(a.visits, c.visits)
    assert uct_search("112233", 4_000, seed=1, threads=2, parallelism="tree").best_action == 4


def test_root_and_tree_parallelisation_spend_the_same_simulations() -> None:
    state = connect4.initial_state()
    root = grow_parallel(connect4.GAME, state, 12_001, SearchConfig(seed=1), threads=3)
    tree = grow_parallel(connect4.GAME, state, 12_001, SearchConfig(seed=1, parallelism="tree"),
                         threads=3)
    assert len(root) == 3 and len(tree) == 1 and tree[0].threads == 3
    assert sum(grown.tree.visits[0] for grown in root) == tree[0].tree.visits[0] == 12_001
    assert [grown.simulations for grown in root] == [4_001, 4_000, 4_000]
    check_shared_tree(tree[0], 12_001)


def test_a_stopped_tree_parallel_search_runs_nothing() -> None:
    stop = threading.Event()
    stop.set()
    grown = grow_tree_parallel(tictactoe.GAME, tictactoe.initial_state(), 1_000, SearchConfig(),
                               threads=2, stop=stop)
    assert grown.simulations == 0 and grown.tree.size == 1


def test_phase_times_are_sampled_and_reported() -> None:
    grown = grow(connect4.GAME, connect4.initial_state(), 1_000, SearchConfig(seed=0))
    if not engine.CLOCK_AVAILABLE:
        assert grown.timed_simulations == 0 and (grown.phase_seconds == 0).all()
        return
    # One simulation in TIMING_SAMPLE_EVERY is timed (the first, then every 16th).
    assert grown.timed_simulations == -(-1_000 // TIMING_SAMPLE_EVERY)
    assert (grown.phase_seconds[SELECT:BACKUP + 1] > 0).all()
    assert grown.phase_seconds[WAIT] == 0  # no lock in the sequential kernel
    shared = grow_tree_parallel(connect4.GAME, connect4.initial_state(), 1_000,
                                SearchConfig(seed=0), threads=2)
    assert shared.timed_simulations > 0 and (shared.phase_seconds >= 0).all()
    result = search(connect4.GAME, connect4.initial_state(), 500)
    assert result.timed_simulations == -(-500 // TIMING_SAMPLE_EVERY)
    assert min(result.selection_s, result.expansion_s, result.rollout_s, result.backup_s) > 0


def test_tree_fields_match_tree_allocate() -> None:
    assert set(TREE_FIELDS) == set(Tree.__dataclass_fields__)
