"""The plain-UCT fast path of the search kernel (`rollout_kernel.select_uct`): the same
child as `select_child` on any statistics (ties and unvisited children included), logarithms
bit for bit those of `math.log`, and the same trees as before it."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from services.mcts.core.config import SearchConfig
from services.mcts.core.selection import UCT
from services.mcts.games import connect4, tictactoe
from services.mcts.native.simd import LANES, ucb1_lanes
from services.mcts.rollout.engine import grow
from services.mcts.rollout.kernel import LOG_TABLE_SIZE, log_visits, select_child, select_uct
from services.mcts.rollout.records import Nodes, Options

FEW = settings(max_examples=60, deadline=None)


@njit(cache=True, error_model="numpy")
def _fast(node, visits, value_sum, first_child, num_children, action, exploration):
    return select_uct(node, visits, value_sum, first_child, num_children, action, exploration)


def _reference(node, visits, value_sum, prior, first_child, num_children, exploration):
    size = visits.shape[0]
    zeros_i = np.zeros(size, dtype=np.int64)
    nodes = Nodes(visits, value_sum, prior, first_child, num_children, zeros_i,
                  np.zeros(size, dtype=np.int8), np.zeros(size, dtype=np.int8),
                  np.zeros(3, dtype=np.int64), zeros_i, np.zeros(size), zeros_i)
    return select_child(nodes, node, Options(UCT, exploration, 0.0, 0.5, 0.0, 2))


@njit(cache=True)
def _log(n):
    return math.log(n)


@FEW
@given(data=st.data(), width=st.integers(1, 12), offset=st.integers(1, 5),
       c=st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.7]), pad=st.sampled_from([0, 3, 16]))
def test_same_child_as_select_child(data: st.DataObject, width: int, offset: int,
                                    c: float, pad: int) -> None:
    # pad: rows after the children; with fewer than 8 - width the 8-wide loads would read past
    # the arrays' end and the scalar path runs instead.
    visits = data.draw(st.lists(st.integers(0, 5000), min_size=width, max_size=width))
    if data.draw(st.booleans()):
        visits = [max(n, 1) for n in visits]
    # Means on a coarse grid, so that equal scores (ties) happen.
    means = [data.draw(st.integers(-4, 4)) / 4 for _ in visits]
    size = offset + width + pad
    v = np.zeros(size, dtype=np.int64)
    s = np.zeros(size)
    first = np.full(size, -1, dtype=np.int32)
    num = np.zeros(size, dtype=np.int32)
    v[offset:offset + width] = visits
    s[offset:offset + width] = [m * n for m, n in zip(means, visits, strict=True)]
    v[0] = max(1, sum(visits))
    first[0] = offset
    num[0] = width
    action = np.zeros(size, dtype=np.int8)
    prior = np.full(size, 1.0 / width, dtype=np.float32)
    assert _fast(0, v, s, first, num, action, c) == _reference(0, v, s, prior, first, num, c)


@njit(cache=True)
def _lanes(visits, value_sum, start, count, log_parent_n, exploration):
    return ucb1_lanes(visits, value_sum, start, count, log_parent_n, exploration)


def test_ucb1_lanes_ignores_the_rows_past_count() -> None:
    visits = np.array([4, 4, 4, 1, 0, 0, 0, 0, 9], dtype=np.int64)
    value_sum = np.array([1.0, 3.0, 3.0, 1.0, 0.0, 0.0, 0.0, 0.0, 9.0])
    # Children 1..3: 1 and 2 tie on the best score, 3 (one visit, mean 1) is past count = 2.
    unvisited, best, score = _lanes(visits, value_sum, 1, 2, math.log(12), 1.0)
    assert unvisited == LANES and best == 0
    assert score == 3.0 / 4 + 1.0 * math.sqrt(math.log(12) / 4)
    # With count = 4 the first unvisited row (offset 3) wins over every score.
    assert _lanes(visits, value_sum, 1, 4, math.log(12), 1.0)[0] == 3
    # Rows past count with n = 0 are not unvisited children.
    assert _lanes(visits, value_sum, 0, 4, math.log(12), 1.0)[:2] == (LANES, 3)


def test_log_visits_is_math_log_bit_for_bit() -> None:
    for n in [*range(1, LOG_TABLE_SIZE + 3), 10**5, 2**31 - 1]:
        assert log_visits(n) == _log(n)


def test_plain_uct_tree_matches_the_general_rule() -> None:
    # RAVE with k = 0 is off, so the general path must pick exactly what the fast path picks;
    # compare with progressive widening wide enough to open every child at once.
    for game in (connect4, tictactoe):
        state = game.initial_state()
        base = game.UNIFORM_GAME if hasattr(game, "UNIFORM_GAME") else game.GAME
        fast = grow(base, state, 3000, SearchConfig(exploration=2.0, seed=3)).tree
        general = grow(base, state, 3000, SearchConfig(exploration=2.0, seed=3,
                                                       widening_k=1e9)).tree
        for name in ("visits", "value_sum", "first_child", "num_children", "action",
                     "terminal"):
            assert np.array_equal(getattr(fast, name)[:fast.size],
                                  getattr(general, name)[:general.size]), name
