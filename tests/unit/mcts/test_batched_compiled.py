"""The compiled batched search (`BatchedSearch.run_compiled` over
`services.mcts.batched.search.run_batches`): the same tree as the ask/tell loop for the same
evaluations, determinism, visit conservation, malformed evaluations, deadline and stop; and the
benchmark's njit MuZero MLP (bench/mcts_puct.py's `mlp_evaluate`) against its numpy model."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from services.mcts.batched.kernels import EVALUATED, STORED_BACKUPS
from services.mcts.batched.leaves import EvaluationError
from services.mcts.batched.search import BatchedSearch, run_batched
from services.mcts.core.config import BatchedConfig

BENCH = Path(__file__).resolve().parents[3] / "bench"


@njit(nogil=True, inline="always")
def table_evaluate(model, nodes, parents, actions, priors, values, terminal):
    """Row `node` of the tables: priors [N, A], values [N], terminal [N]."""
    table_priors, table_values, table_terminal = model
    for b in range(nodes.shape[0]):
        node = nodes[b]
        for a in range(priors.shape[1]):
            priors[b, a] = table_priors[node, a]
        values[b] = table_values[node]
        terminal[b] = table_terminal[node]


def tables(num_actions: int, simulations: int, seed: int, terminal_rate: float = 0.1):
    """Evaluations by node id for every node a search can create: some actions illegal (prior
    0), random values, some leaves terminal (never the root)."""
    rng = np.random.default_rng(seed)
    capacity = (simulations + 1) * num_actions + 1
    priors = rng.random((capacity, num_actions)) * (rng.random((capacity, num_actions)) < 0.7)
    priors[np.arange(capacity), rng.integers(num_actions, size=capacity)] += 0.05
    values = rng.uniform(-1, 1, capacity)
    terminal = rng.random(capacity) < terminal_rate
    terminal[0] = False
    return priors, values, terminal


def ask_tell(num_actions, simulations, config, players, model):
    priors, values, terminal = model
    search = BatchedSearch(num_actions, simulations, config, players=players)
    result = run_batched(search, lambda batch: (priors[batch.nodes], values[batch.nodes],
                                                terminal[batch.nodes]))
    return search, result


def compiled(num_actions, simulations, config, players, model):
    search = BatchedSearch(num_actions, simulations, config, players=players)
    return search, search.run_compiled(table_evaluate, model)


def arrays(search: BatchedSearch) -> dict:
    """Every per-node array of the search, cut to the tree's size."""
    tree = search.tree
    names = ("visits", "value_sum", "prior", "first_child", "num_children", "parent", "action",
             "terminal")
    out = {name: getattr(tree, name)[:tree.size] for name in names}
    out["raw_value"] = search.raw_value[:tree.size]
    out["status"] = search.status[:tree.size]
    return out


def assert_same_search(first, second):
    (search_a, result_a), (search_b, result_b) = first, second
    assert search_b.tree.size == search_a.tree.size
    theirs = arrays(search_b)
    for name, ours in arrays(search_a).items():
        np.testing.assert_array_equal(ours, theirs[name], err_msg=name)
    for field in ("action", "simulations", "evaluations", "batches", "collisions", "max_depth",
                  "tree_full", "root_value"):
        assert getattr(result_a, field) == getattr(result_b, field), field
    np.testing.assert_array_equal(result_a.visits, result_b.visits)
    np.testing.assert_array_equal(result_a.policy, result_b.policy)


@pytest.mark.parametrize("rule", ["puct", "gumbel"])
@pytest.mark.parametrize("batch_size", [1, 5])
@pytest.mark.parametrize("players", [1, 2])
def test_compiled_loop_grows_the_ask_tell_tree(rule, batch_size, players):
    model = tables(6, 150, seed=batch_size + players)
    config = BatchedConfig(rule=rule, batch_size=batch_size, seed=7)
    theirs = ask_tell(6, 150, config, players, model)
    ours = compiled(6, 150, config, players, model)
    assert_same_search(ours, theirs)
    assert ours[1].simulations == 150
    if batch_size == 1:
        assert ours[1].batches == ours[1].evaluations


def test_compiled_loop_with_dirichlet_noise_and_a_full_tree_matches_ask_tell():
    model = tables(5, 120, seed=3, terminal_rate=0.0)
    config = BatchedConfig(batch_size=3, seed=2, dirichlet_alpha=0.3, max_nodes=40)
    theirs = ask_tell(5, 120, config, 2, model)
    ours = compiled(5, 120, config, 2, model)
    assert ours[1].tree_full
    assert_same_search(ours, theirs)


@pytest.mark.parametrize("config", [
    BatchedConfig(rule="gumbel", batch_size=4, seed=11, gumbel_num_considered=4),
    BatchedConfig(rule="puct", batch_size=4, seed=11, dirichlet_alpha=0.5)])
def test_same_seed_gives_the_same_tree_and_another_seed_another_one(config):
    model = tables(8, 200, seed=1)
    assert_same_search(compiled(8, 200, config, 2, model), compiled(8, 200, config, 2, model))
    first = arrays(compiled(8, 200, config, 2, model)[0])
    other = arrays(compiled(8, 200, replace(config, seed=12), 2, model)[0])
    assert first["visits"].shape != other["visits"].shape or not all(
        np.array_equal(first[name], other[name]) for name in ("visits", "prior"))


@pytest.mark.parametrize("rule", ["puct", "gumbel"])
def test_visits_are_conserved(rule):
    """Root: simulations + 1 visits (its own evaluation); an expanded node: its children's visits
    plus its own evaluation; every node's visits at least its children's."""
    search, result = compiled(7, 300, BatchedConfig(rule=rule, batch_size=4, seed=5), 2,
                              tables(7, 300, seed=9))
    tree = search.tree
    assert tree.visits[0] == result.simulations + 1 == 301
    for node in range(tree.size):
        children = tree.children(node)
        if len(children):
            assert search.status[node] == EVALUATED
            assert tree.visits[node] == tree.visits[children].sum() + 1
    stored = search.result().simulations - (result.evaluations - 1)
    assert stored == search._counters[STORED_BACKUPS] >= 0


def test_reused_blocks_give_the_tree_of_fresh_ones():
    model = tables(6, 120, seed=8)
    config = BatchedConfig(batch_size=2, seed=4)
    fresh = compiled(6, 120, config, 2, model)
    dirty = BatchedSearch(6, 120, BatchedConfig(rule="gumbel", seed=9))
    dirty.run_compiled(table_evaluate, tables(6, 120, seed=1))  # other values everywhere
    reused = BatchedSearch(6, 120, config, blocks=dirty.blocks)
    assert_same_search((reused, reused.run_compiled(table_evaluate, model)), fresh)
    with pytest.raises(ValueError, match="blocks"):
        BatchedSearch(6, 60, config, blocks=dirty.blocks)


def test_a_malformed_evaluation_is_reported_with_its_row():
    priors, values, terminal = tables(4, 50, seed=2, terminal_rate=0.0)
    values[1:] = 2.0  # every leaf after the root is bad
    search = BatchedSearch(4, 50, BatchedConfig(batch_size=1))
    with pytest.raises(EvaluationError) as error:
        search.run_compiled(table_evaluate, (priors, values, terminal))
    assert error.value.argument == "values"
    assert error.value.row == 0
    priors[:] = 0.0
    search = BatchedSearch(4, 50, BatchedConfig(batch_size=1))
    with pytest.raises(EvaluationError) as error:
        search.run_compiled(table_evaluate, (priors, values, terminal))
    assert error.value.argument == "priors"


def test_deadline_and_stop_end_the_search_after_the_root():
    model = tables(4, 100, seed=4)
    search = BatchedSearch(4, 100, BatchedConfig())
    result = search.run_compiled(table_evaluate, model, deadline=time.monotonic() - 1.0)
    assert result.simulations == 0 and result.evaluations == 1
    stop = threading.Event()
    stop.set()
    result = BatchedSearch(4, 100, BatchedConfig()).run_compiled(table_evaluate, model,
                                                                 stop=stop)
    assert result.simulations == 0
    result = BatchedSearch(4, 100, BatchedConfig()).run_compiled(
        table_evaluate, model, deadline=time.monotonic() + 600.0)
    assert result.simulations == 100


@pytest.fixture(scope="module")
def mcts_puct():
    sys.path.insert(0, str(BENCH))
    import mcts_puct

    yield mcts_puct
    sys.path.remove(str(BENCH))


def test_njit_mlp_computes_the_numpy_models_numbers(mcts_puct):
    actions, embedding = 16, 32
    model = mcts_puct.MlpMuZero(actions, embedding, 3)
    observation = np.random.default_rng(4).normal(size=(1, embedding)).astype(np.float32)
    arrays = mcts_puct.mlp_arrays(model, observation, 8)
    nodes = np.array([0, 1, 2, 3], dtype=np.int64)
    parents = np.array([-1, 0, 1, 1], dtype=np.int64)
    moves = np.array([-1, 5, 15, 0], dtype=np.int64)
    priors = np.zeros((4, actions))
    values = np.zeros(4)
    terminal = np.ones(4, dtype=np.bool_)
    mcts_puct.mlp_evaluate(arrays, nodes, parents, moves, priors, values, terminal)
    root = model.represent(observation)
    child = model.recurrent(root, moves[1:2])
    grandchildren = model.recurrent(np.repeat(child, 2, axis=0), moves[2:])
    states = np.vstack([root, child, grandchildren])
    expected_priors, expected_values = model.predict(states)
    np.testing.assert_allclose(arrays.states[:4], states, atol=1e-5, rtol=0)
    np.testing.assert_allclose(priors, expected_priors, atol=1e-5, rtol=0)
    np.testing.assert_allclose(values, expected_values, atol=1e-5, rtol=0)
    assert not terminal.any()


@pytest.mark.parametrize("rule", ["puct", "gumbel"])
def test_compiled_mlp_search_grows_the_numpy_ask_tell_tree(mcts_puct, rule):
    """Batch 1, fixed seed: the compiled search with the njit MLP and the ask/tell one with the
    numpy MLP give the same tree (the float32 rounding differences break no choice here)."""
    actions, embedding, simulations = 16, 32, 200
    model = mcts_puct.MlpMuZero(actions, embedding, 0)
    observation = np.random.default_rng(1).normal(size=(1, embedding)).astype(np.float32)
    config = BatchedConfig(rule=rule, seed=0)
    theirs = BatchedSearch(actions, simulations, config)
    states = np.zeros((theirs.tree.capacity, embedding), dtype=np.float32)
    while (batch := theirs.next_batch()) is not None:
        embeddings = (model.represent(observation) if batch.batch_id == 0
                      else model.recurrent(states[batch.parents], batch.actions))
        priors, values = model.predict(embeddings)
        states[batch.nodes] = embeddings
        theirs.submit(priors, values, np.zeros(len(batch), dtype=np.bool_))
    ours = BatchedSearch(actions, simulations, config)
    result = ours.run_compiled(mcts_puct.mlp_evaluate,
                               mcts_puct.mlp_arrays(model, observation, ours.tree.capacity))
    assert ours.tree.size == theirs.tree.size
    expected = arrays(theirs)
    for name, got in arrays(ours).items():
        if got.dtype == np.float64:
            np.testing.assert_allclose(got, expected[name], atol=1e-4, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(got, expected[name], err_msg=name)
    assert result.action == theirs.result().action
    np.testing.assert_array_equal(result.visits, theirs.result().visits)


def test_fast_tanh_is_numpys_tanh_within_4e_7_and_bounded(mcts_puct):
    grid = np.concatenate([np.linspace(-30, 30, 200_001), [0.0, 1e-30, -1e-8, 9.0, 1e4]])
    grid = grid.astype(np.float32)
    got = np.array([mcts_puct.fast_tanh(x) for x in grid[::97]] +
                   [mcts_puct.fast_tanh(x) for x in grid[-5:]], dtype=np.float32)
    expected = np.tanh(np.concatenate([grid[::97], grid[-5:]]))
    assert np.abs(got - expected).max() <= 4e-7
    assert np.abs(got).max() <= 1.0
    assert mcts_puct.fast_tanh(np.float32(0.0)) == 0.0
