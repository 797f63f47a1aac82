"""Reused trees (`services.mcts.core.tree.TreePool`): a tree that held a search and is reset grows
exactly the tree a new one grows, in every kernel, and the pool hands each tree to one caller."""

from __future__ import annotations

import numpy as np
import pytest

from services.mcts.core.config import SearchConfig
from services.mcts.core.tree import Tree, TreePool
from services.mcts.games import connect4, tictactoe
from services.mcts.rollout.connect4 import uct_search
from services.mcts.rollout.engine import grow, grow_tree_parallel
from services.mcts.settings import MIN_CAPACITY

FIELDS = ("visits", "value_sum", "prior", "first_child", "num_children", "parent", "action",
          "terminal")


def _rows(tree: Tree) -> dict[str, np.ndarray]:
    return {name: getattr(tree, name)[:tree.size].copy() for name in FIELDS}


def _same(a: Tree, b: Tree) -> None:
    assert a.size == b.size and a.max_depth == b.max_depth and a.full == b.full
    for name, rows in _rows(a).items():
        assert np.array_equal(rows, getattr(b, name)[:b.size]), name


@pytest.mark.parametrize("config", [
    SearchConfig(seed=3),
    SearchConfig(seed=3, rule="puct"),
    SearchConfig(seed=3, rave_k=300.0),
    SearchConfig(seed=3, widening_k=1.0),
    SearchConfig(seed=3, transpositions=True),
    SearchConfig(seed=3, max_nodes=200),  # fills: expansions refused
], ids=["uct", "puct", "rave", "widening", "transpositions", "full"])
def test_a_reused_tree_grows_the_tree_a_new_one_grows(config: SearchConfig) -> None:
    config = SearchConfig(**{**config.__dict__, "max_nodes": min(config.max_nodes, 20_000)})
    state = connect4.initial_state()
    fresh = grow(connect4.GAME, state, 2_000, config).tree
    pool = TreePool()
    # Dirty a tree of the same capacity with another game and seed, then hand it back.
    other = grow(tictactoe.GAME, tictactoe.initial_state(), 3_000,
                 SearchConfig(seed=9, max_nodes=config.max_nodes), pool=pool).tree
    pool.release(other)
    reused = grow(connect4.GAME, state, 2_000, config, pool=pool).tree
    assert reused is other
    _same(reused, fresh)


def test_a_reused_tree_serves_tree_parallelisation() -> None:
    config = SearchConfig(seed=4, max_nodes=30_000, parallelism="tree")
    state = connect4.initial_state()
    fresh = grow_tree_parallel(connect4.GAME, state, 3_000, config, 1).tree
    pool = TreePool()
    pool.release(grow(connect4.UNIFORM_GAME, state, 4_000, SearchConfig(seed=1, max_nodes=30_000),
                      pool=pool).tree)
    _same(grow_tree_parallel(connect4.GAME, state, 3_000, config, 1, pool=pool).tree, fresh)


def test_reset_leaves_the_root_alone() -> None:
    tree = grow(connect4.GAME, connect4.initial_state(), 500, SearchConfig(max_nodes=5_000)).tree
    tree.reset()
    new = Tree.allocate(5_000)
    assert tree.size == 1 and tree.max_depth == 0 and not tree.full
    for name in FIELDS:
        assert getattr(tree, name)[0] == getattr(new, name)[0], name
    assert len(tree.children(0)) == 0


def test_the_pool_hands_out_each_tree_once_and_keeps_the_newest() -> None:
    pool = TreePool(max_spare=2)
    a, b = pool.acquire(100), pool.acquire(100)
    assert a is not b and a.capacity == b.capacity == 100
    assert pool.acquire(3).capacity == MIN_CAPACITY
    pool.release(a)
    assert pool.acquire(200) is not a  # another capacity: a new tree
    assert pool.acquire(100) is a
    assert pool.acquire(100) is not a  # handed out already
    c = pool.acquire(300)
    pool.release(a)
    pool.release(b)
    pool.release(c)  # over max_spare: the oldest, a, is dropped
    assert pool.acquire(100) is b
    assert pool.acquire(100) is not a


def test_uct_search_gives_the_same_result_on_reused_trees() -> None:
    first = uct_search("4453", 3_000, seed=5, decisive_rollouts=False)
    uct_search("", 3_000, seed=8)  # the same capacity, another position
    again = uct_search("4453", 3_000, seed=5, decisive_rollouts=False)
    assert np.array_equal(first.visits, again.visits)
    assert np.array_equal(first.values, again.values, equal_nan=True)
    assert first.tree_size == again.tree_size and first.best_action == again.best_action
