"""UCT search core: determinism, tree invariants, terminal handling and the sign of backups."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from libs.connect4.board import IllegalPosition, Position
from services.mcts.core.config import SearchConfig
from services.mcts.core.result import SearchStopped
from services.mcts.core.tree import OPEN, Tree
from services.mcts.games.connect4 import GAME, from_position
from services.mcts.rollout.connect4 import uct_search
from services.mcts.rollout.engine import grow


def grow_tree(moves: str, simulations: int, seed: int, capacity: int) -> tuple[Tree, int]:
    """The tree `uct_search` grows (one thread, decisive rollouts) and the simulations run."""
    grown = grow(GAME, from_position(Position.from_moves(moves)), simulations,
                 SearchConfig(exploration=2.0, seed=seed, max_nodes=capacity))
    return grown.tree, grown.simulations


def check_tree(tree: Tree, simulations: int) -> None:
    """Every expanded node: visits = children's visits (+1 for its own first visit, not the root);
    each value_sum is minus the children's (+ that first visit's result); no stray nodes."""
    size = tree.size
    assert 1 <= size <= tree.capacity
    assert tree.visits[0] == simulations
    for node in range(size):
        children = tree.children(node)
        if len(children) == 0:
            continue
        assert tree.terminal[node] == OPEN
        child_visits = int(tree.visits[children.start:children.stop].sum())
        expected = child_visits if node == 0 else child_visits + 1
        assert tree.visits[node] == expected
        for child in children:
            assert tree.parent[child] == node
        if node == 0:
            child_values = tree.value_sum[children.start:children.stop].sum()
            assert np.isclose(tree.value_sum[0], -child_values)
    assert (tree.parent[1:size] >= 0).all() and (tree.parent[1:size] < size).all()
    assert (tree.visits[size:] == 0).all()
    assert (np.abs(tree.value_sum[:size]) <= tree.visits[:size] + 1e-9).all()


def test_same_seed_same_tree_and_different_seed_differs() -> None:
    a = uct_search("4453", 20_000, seed=11)
    b = uct_search("4453", 20_000, seed=11)
    c = uct_search("4453", 20_000, seed=12)
    assert (a.visits == b.visits).all()
    assert np.array_equal(a.values, b.values, equal_nan=True)
    assert a.tree_size == b.tree_size and a.max_depth == b.max_depth
    assert not (a.visits == c.visits).all()


def test_root_parallel_threads_are_reproducible_and_conserve_simulations() -> None:
    a = uct_search("", 10_001, seed=5, threads=3)
    b = uct_search("", 10_001, seed=5, threads=3)
    assert a.threads == 3 and a.simulations == 10_001
    assert int(a.visits.sum()) == 10_001
    assert (a.visits == b.visits).all()
    single = uct_search("", 3_334, seed=5)
    assert not (single.visits == a.visits).all()


@pytest.mark.parametrize("moves", ["", "4453", "2252576253462244111563365343671"])
def test_visits_are_conserved_in_the_tree(moves: str) -> None:
    tree, done = grow_tree(moves, 5_000, 3, 100_000)
    assert done == 5_000
    assert not tree.full
    check_tree(tree, 5_000)


def test_a_full_tree_is_reported_and_stays_consistent() -> None:
    tree, done = grow_tree("", 3_000, 0, 60)
    assert tree.full and tree.size <= 60
    check_tree(tree, 3_000)
    result = uct_search("", 3_000, max_nodes=60)
    assert result.tree_full and result.tree_size <= 60
    assert int(result.visits.sum()) == 3_000


def test_takes_an_immediate_win_valued_one() -> None:
    # First player has three on the bottom row; column 4 wins at once.
    result = uct_search("112233", 2_000, seed=1)
    assert result.best_action == 4
    assert result.values[3] == 1.0


def test_blocks_an_immediate_loss() -> None:
    # Second player to move; the first player threatens the bottom cell of column 4.
    result = uct_search("15253", 20_000, seed=2)
    assert result.best_action == 4


def test_backup_signs_from_the_side_to_move() -> None:
    # First player holds columns 2, 3, 4 of the bottom row with 1 and 5 open: the second player,
    # to move, cannot block both ends.
    lost = uct_search("22334", 20_000, seed=3, decisive_rollouts=False)
    assert lost.root_value < -0.5
    legal = ~np.isnan(lost.values)
    assert (lost.values[legal] < 0).all()
    # One move earlier the first player makes that open three by playing column 4.
    won = uct_search("2233", 20_000, seed=3, decisive_rollouts=False)
    assert won.best_action == 4 and won.values[3] > 0.5 and won.root_value > 0


def test_result_shapes_and_priors() -> None:
    result = uct_search("444444", 1_000)
    assert result.visits.dtype == np.int64 and result.visits.shape == (7,)
    assert result.values.dtype == np.float64 and result.priors.dtype == np.float64
    assert result.visits[3] == 0 and np.isnan(result.values[3]) and result.priors[3] == 0
    assert np.isclose(result.priors.sum(), 1.0)
    assert result.best_action != 4
    assert -1.0 <= result.root_value <= 1.0
    assert result.simulations == 1_000 and result.simulations_per_second > 0


@pytest.mark.parametrize("moves", ["8", "4444444", "1212121", "12121212"])
def test_bad_positions_raise(moves: str) -> None:
    with pytest.raises(IllegalPosition):
        uct_search(moves, 10)


def test_bad_numbers_raise() -> None:
    with pytest.raises(ValueError):
        uct_search("", 0)
    with pytest.raises(ValueError):
        uct_search("", 10, threads=0)


def test_stopped_before_any_simulation() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(SearchStopped):
        uct_search("", 100_000, stop=stop)
    with pytest.raises(SearchStopped):
        uct_search("", 100_000, time_limit_s=0.0)
