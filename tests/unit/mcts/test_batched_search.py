"""The batched PUCT / Gumbel search (services.mcts.batched.search): exact scores, virtual loss
applied and reverted, visit conservation, backup signs, determinism, a full tree, collisions, and
Gumbel sequential halving with a perfect evaluator."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.mcts.batched.gumbel import considered_visits_sequence
from services.mcts.batched.kernels import EVALUATED, Rows
from services.mcts.batched.kernels import select_puct as select_puct_rows
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig


def random_evaluator(num_actions: int, seed: int, terminal_rate: float = 0.1):
    """Priors and values drawn from a generator seeded by `seed` and the node id, so the same
    node gets the same evaluation in every search; some leaves are terminal."""

    def evaluate(batch):
        size = len(batch)
        priors = np.zeros((size, num_actions))
        values = np.zeros(size)
        terminal = np.zeros(size, dtype=bool)
        for b, node in enumerate(batch.nodes.tolist()):
            rng = np.random.default_rng([seed, node])
            legal = rng.random(num_actions) < 0.7
            legal[rng.integers(num_actions)] = True
            priors[b] = legal * rng.random(num_actions)
            priors[b, legal] += 0.01
            values[b] = rng.uniform(-1, 1)
            terminal[b] = node > 0 and rng.random() < terminal_rate
        return priors, values, terminal

    return evaluate


def tree_arrays(search: BatchedSearch) -> tuple:
    tree = search.tree
    n = tree.size
    return (tree.visits[:n].copy(), tree.value_sum[:n].copy(), tree.prior[:n].copy(),
            tree.first_child[:n].copy(), tree.parent[:n].copy(), tree.action[:n].copy())


def select_puct(node, visits, value_sum, prior, first_child, num_children, c_puct, scores):
    size = visits.shape[0]
    unused = np.zeros(size, dtype=np.int64)
    rows = Rows(visits, value_sum, prior, first_child, num_children, unused, unused, unused,
                unused, np.zeros(size), np.zeros(5, dtype=np.int64))
    return select_puct_rows(rows, node, c_puct, scores)


def test_select_puct_takes_the_exact_alphazero_score():
    # Root (node 0) with four children, one unvisited: visits, value sums and priors by hand.
    visits = np.array([10, 4, 3, 2, 0], dtype=np.int64)
    value_sum = np.array([0.0, 2.0, -0.3, 1.2, 0.0])
    prior = np.array([1.0, 0.2, 0.5, 0.3, 0.1])
    first_child = np.array([1, -1, -1, -1, -1], dtype=np.int64)
    num_children = np.array([4, 0, 0, 0, 0], dtype=np.int64)
    scores = np.zeros(8)
    for c_puct in (0.0, 1.25, 4.0, 10.0):
        expected_scores = [
            (value_sum[i] / visits[i] if visits[i] else 0.0)
            + c_puct * prior[i] * math.sqrt(10) / (1 + visits[i])
            for i in (1, 2, 3, 4)]
        expected = 1 + int(np.argmax(expected_scores))
        assert select_puct(0, visits, value_sum, prior, first_child, num_children,
                           c_puct, scores) == expected
        np.testing.assert_allclose(scores[:4], expected_scores, rtol=1e-14, atol=1e-15)
    # c = 0: the best mean (0.6 for child 3 vs 0.5); c = 10: the large prior of child 2 wins.
    assert select_puct(0, visits, value_sum, prior, first_child, num_children, 0.0, scores) == 3
    assert select_puct(0, visits, value_sum, prior, first_child, num_children, 10.0, scores) == 2
    # Exact ties go to the lower action.
    tied = np.array([10, 0, 0, 0, 0], dtype=np.int64)
    even = np.array([1.0, 0.25, 0.25, 0.25, 0.25])
    assert select_puct(0, tied, np.zeros(5), even, first_child, num_children, 1.25, scores) == 1


def test_the_first_batch_is_the_root_and_it_is_not_a_simulation():
    search = BatchedSearch(3, 5, BatchedConfig(batch_size=4))
    batch = search.next_batch()
    assert batch.nodes.tolist() == [0] and batch.parents.tolist() == [-1]
    assert batch.actions.tolist() == [-1] and batch.paths == [[]]
    search.submit(np.array([[0.5, 0.0, 0.5]]), np.array([0.25]), np.array([False]))
    assert list(search.tree.children(0)) == [1, 2]
    assert search.tree.action[1:3].tolist() == [0, 2]
    assert search.tree.prior[1:3].tolist() == [0.5, 0.5]
    result = run_batched(search, random_evaluator(3, 1, terminal_rate=0.0))
    assert result.simulations == 5 and result.evaluations == 6
    assert search.tree.visits[0] == 6


def test_virtual_loss_is_applied_along_the_path_and_reverted_at_submit():
    search = BatchedSearch(2, 10, BatchedConfig(batch_size=2, virtual_loss=3.0, c_puct=1.0))
    search.next_batch()
    search.submit(np.array([[0.6, 0.4]]), np.array([0.0]), np.array([False]))
    batch = search.next_batch()
    # The first descent takes action 0 (larger prior); its virtual loss sends the second to 1.
    assert batch.actions.tolist() == [0, 1] and batch.paths == [[0], [1]]
    tree = search.tree
    assert tree.visits[:3].tolist() == [3, 1, 1]
    assert tree.value_sum[1] == -3.0 and tree.value_sum[2] == -3.0
    search.submit(np.full((2, 2), 0.5), np.array([0.5, -0.25]), np.array([False, False]))
    # Values are stored for the mover into the node: the leaf's value with the sign flipped.
    assert tree.visits[:3].tolist() == [3, 1, 1]
    assert tree.value_sum[1] == -0.5 and tree.value_sum[2] == 0.25
    assert tree.value_sum[0] == pytest.approx(0.0 + 0.0 + 0.5 - 0.25)


@pytest.mark.parametrize("rule", ["puct", "gumbel"])
def test_with_batch_one_virtual_loss_changes_nothing(rule):
    evaluate = random_evaluator(5, 7)
    trees = []
    for virtual_loss in (0.0, 2.5):
        search = BatchedSearch(5, 200, BatchedConfig(rule=rule, batch_size=1,
                                                     virtual_loss=virtual_loss, seed=3))
        run_batched(search, evaluate)
        trees.append(tree_arrays(search))
    for a, b in zip(*trees, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(num_actions=st.integers(1, 6), simulations=st.integers(1, 120),
       batch_size=st.integers(1, 9), virtual_loss=st.sampled_from([0.0, 1.0, 3.0]),
       rule=st.sampled_from(["puct", "gumbel"]), players=st.sampled_from([1, 2]),
       seed=st.integers(0, 1000), max_nodes=st.sampled_from([8, 40, 100_000]))
def test_visits_are_conserved_and_no_virtual_loss_is_left(num_actions, simulations, batch_size,
                                                         virtual_loss, rule, players, seed,
                                                         max_nodes):
    config = BatchedConfig(rule=rule, batch_size=batch_size, virtual_loss=virtual_loss,
                           seed=seed, max_nodes=max_nodes)
    search = BatchedSearch(num_actions, simulations, config, players=players)
    result = run_batched(search, random_evaluator(num_actions, seed))
    tree = search.tree
    assert result.simulations == simulations
    assert tree.visits[0] == simulations + 1
    assert tree.size <= tree.capacity
    for node in range(tree.size):
        children = tree.children(node)
        assert search.status[node] in (EVALUATED, 0)
        if len(children) > 0:
            # Its own evaluation plus every descent through a child.
            assert tree.visits[node] == 1 + tree.visits[children.start:children.stop].sum()
        if tree.visits[node] > 0:
            # Values are means of evaluations in [-1, 1]: no virtual loss was left behind.
            assert abs(tree.value_sum[node]) <= tree.visits[node] + 1e-9
    assert result.visits.sum() == simulations
    assert result.evaluations + search.tree.visits[0] >= simulations


@pytest.mark.parametrize("players", [1, 2])
def test_backup_reaches_every_ancestor_with_the_right_sign(players):
    # One action everywhere: the search walks down a chain, one new node per simulation.
    search = BatchedSearch(1, 3, BatchedConfig(virtual_loss=1.0), players=players)
    values = iter([0.1, 0.2, 0.3, 0.4])
    run_batched(search, lambda batch: (np.ones((1, 1)), np.array([next(values)]),
                                       np.array([False])))
    tree = search.tree
    sign = -1.0 if players == 2 else 1.0
    # Node d is at depth d; the value at depth k reaches node d with sign**(k - d + 1).
    for d in range(4):
        expected = sum(sign ** (k - d + 1) * (0.1 * (k + 1)) for k in range(d, 4))
        assert tree.value_sum[d] == pytest.approx(expected)
        assert tree.visits[d] == 4 - d


def test_a_terminal_leaf_is_backed_up_without_an_evaluation():
    search = BatchedSearch(2, 20, BatchedConfig())

    def evaluate(batch):
        # Action 0 ends the game with a loss for the player to move there (the root player won).
        terminal = np.array([len(p) == 1 and p[0] == 0 for p in batch.paths])
        values = np.where(terminal, -1.0, 0.0)
        return np.full((len(batch), 2), 0.5), values, terminal

    result = run_batched(search, evaluate)
    assert result.action == 0 and result.values[0] == 1.0
    # Node 1 was evaluated once; its later visits reused the stored value.
    assert result.evaluations < result.simulations + 1


@pytest.mark.parametrize("rule", ["puct", "gumbel"])
def test_same_seed_same_tree(rule):
    config = BatchedConfig(rule=rule, batch_size=4, seed=11, dirichlet_alpha=0.3)
    runs = []
    for _ in range(2):
        search = BatchedSearch(6, 150, config)
        run_batched(search, random_evaluator(6, 5))
        runs.append(tree_arrays(search))
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_dirichlet_noise_changes_the_root_priors_with_the_seed():
    priors = []
    for seed in (0, 1):
        search = BatchedSearch(4, 4, BatchedConfig(seed=seed, dirichlet_alpha=0.5))
        run_batched(search, random_evaluator(4, 2, terminal_rate=0.0))
        priors.append(search.result().priors)
    assert not np.allclose(priors[0], priors[1])
    assert priors[0].sum() == pytest.approx(1.0)


def test_a_full_tree_is_reported_and_not_overrun():
    search = BatchedSearch(4, 200, BatchedConfig(max_nodes=8, batch_size=3))
    result = run_batched(search, random_evaluator(4, 3, terminal_rate=0.0))
    assert result.tree_full and result.tree_size <= 8
    assert result.simulations == 200
    assert search.tree.visits[0] == 201
    # Leaves the tree could not expand keep their value and are not evaluated again.
    assert result.evaluations <= 8


def test_a_descent_into_a_leaf_already_in_the_batch_is_a_collision():
    search = BatchedSearch(1, 10, BatchedConfig(batch_size=4))
    search.next_batch()
    search.submit(np.ones((1, 1)), np.zeros(1), np.zeros(1, dtype=bool))
    batch = search.next_batch()
    # One action: the second descent reaches the same leaf; it is reverted and the batch closes.
    assert batch.nodes.tolist() == [1]
    assert search.tree.visits[:2].tolist() == [2, 1]
    search.submit(np.ones((1, 1)), np.zeros(1), np.zeros(1, dtype=bool))
    result = run_batched(search, lambda b: (np.ones((len(b), 1)), np.zeros(len(b)),
                                            np.zeros(len(b), dtype=bool)))
    assert result.collisions >= 1 and result.simulations == 10
    assert search.tree.visits[0] == 11


def test_a_malformed_submission_is_rejected_and_changes_nothing():
    search = BatchedSearch(3, 10, BatchedConfig())
    search.next_batch()
    before = tree_arrays(search)
    ok_priors = np.array([[0.2, 0.3, 0.5]])
    cases = [
        ((np.ones((1, 2)), np.zeros(1), np.zeros(1, bool)), "priors"),
        ((ok_priors, np.zeros(2), np.zeros(1, bool)), "values"),
        ((ok_priors, np.array([1.5]), np.zeros(1, bool)), "values"),
        ((ok_priors, np.array([np.nan]), np.zeros(1, bool)), "values"),
        ((np.array([[0.2, -0.1, 0.5]]), np.zeros(1), np.zeros(1, bool)), "priors"),
        ((np.array([[0.2, np.nan, 0.5]]), np.zeros(1), np.zeros(1, bool)), "priors"),
        ((np.zeros((1, 3)), np.zeros(1), np.zeros(1, bool)), "priors"),
        ((ok_priors, np.zeros(1), np.zeros(2, bool)), "terminal"),
    ]
    for args, name in cases:
        with pytest.raises(ValueError, match=name):
            search.submit(*args)
        for a, b in zip(before, tree_arrays(search), strict=True):
            np.testing.assert_array_equal(a, b)
    search.submit(np.zeros((1, 3)), np.array([-1.0]), np.array([True]))  # a terminal root is fine


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="rule"):
        BatchedSearch(3, 10, BatchedConfig(rule="uct"))
    with pytest.raises(ValueError, match="batch_size"):
        BatchedSearch(3, 10, BatchedConfig(batch_size=0))
    with pytest.raises(ValueError, match="simulations"):
        BatchedSearch(3, 0)
    with pytest.raises(ValueError, match="num_actions"):
        BatchedSearch(200, 10)


def test_sequential_halving_schedule():
    # m = 4, n = 16: two phases of ceil(log2 4) = 2; 16 / (2 * 4) = 2 rounds of 4 actions, then
    # 16 / (2 * 2) = 4 rounds of the 2 best.
    assert considered_visits_sequence(4, 16).tolist() == [0, 0, 0, 0, 1, 1, 1, 1,
                                                          2, 2, 3, 3, 4, 4, 5, 5]
    assert considered_visits_sequence(1, 5).tolist() == [0, 1, 2, 3, 4]
    assert considered_visits_sequence(16, 3).tolist() == [0, 0, 0]


def perfect_bandit(q: np.ndarray):
    """Root evaluation uniform; each root action leads to a terminal leaf whose exact value for
    the root player is q[a] (stored as -q[a] for the player to move at the leaf)."""

    def evaluate(batch):
        size = len(batch)
        priors = np.full((size, len(q)), 1.0 / len(q))
        values = np.zeros(size)
        terminal = np.zeros(size, dtype=bool)
        for b, path in enumerate(batch.paths):
            if path:
                values[b] = -q[path[0]]
                terminal[b] = True
        return priors, values, terminal

    return evaluate


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.sampled_from([2, 4, 8]),
       simulations=st.sampled_from([16, 32, 50]))
def test_gumbel_with_a_perfect_evaluator_picks_the_best_action(seed, m, simulations):
    # Values 1/7 apart after sigma's rescaling to [0, 1]; with c_scale = 1 sigma separates them by
    # (c_visit + max N) / 7 > 7, more than Gumbel noise differences of any likely size.
    q = np.random.default_rng(seed).permutation(np.linspace(-0.9, 0.9, 8))
    config = BatchedConfig(rule="gumbel", gumbel_num_considered=m, seed=seed, c_scale=1.0)
    search = BatchedSearch(8, simulations, config)
    result = run_batched(search, perfect_bandit(q))
    # The best of the considered actions (Gumbel-top-m); with m = 8 every action is considered.
    considered = np.flatnonzero(result.visits > 0)
    assert len(considered) == m
    assert result.action == considered[np.argmax(q[considered])]
    if m == 8:
        assert result.action == int(np.argmax(q))
    # The budget follows sequential halving: as many actions reach v + 1 visits as the schedule
    # holds entries v.
    table = considered_visits_sequence(m, simulations)
    for v in range(int(table.max()) + 1):
        assert (result.visits >= v + 1).sum() == (table == v).sum()
    if m == 8:
        # Every action visited: the improved policy puts the most weight on the best one.
        assert int(np.argmax(result.policy)) == int(np.argmax(q))


def test_a_deadline_or_a_stop_event_ends_the_search_between_batches():
    search = BatchedSearch(3, 100, BatchedConfig())
    result = run_batched(search, random_evaluator(3, 1), deadline=time.monotonic() - 1)
    assert result.simulations == 0 and result.batches == 0
    stop = threading.Event()
    calls = []

    def evaluate(batch):
        calls.append(batch.batch_id)
        if len(calls) == 5:
            stop.set()
        return random_evaluator(3, 1)(batch)

    result = run_batched(BatchedSearch(3, 100, BatchedConfig()), evaluate, stop=stop)
    assert result.batches == 5 and result.simulations == 4
