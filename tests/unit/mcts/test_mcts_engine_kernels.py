"""Property tests (hypothesis) on the general core's kernels: exact UCB1 / PUCT values, unvisited
children first, visit conservation, backup signs, seeded determinism and a full tree."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.mcts.core.config import SearchConfig
from services.mcts.core.selection import (
    PUCT,
    UCT,
    puct,
    puct_engine,
    rave_beta,
    ucb1,
    widened_children,
)
from services.mcts.games import tictactoe
from services.mcts.rollout.engine import grow, search
from services.mcts.rollout.kernel import BACKUP, EXPAND, SELECT, select_child
from services.mcts.rollout.records import Nodes, Options

FEW = settings(max_examples=25, deadline=None)
counts = st.integers(min_value=1, max_value=10**6)
means = st.floats(min_value=-1.0, max_value=1.0)
cs = st.floats(min_value=0.0, max_value=10.0)
priors_ = st.floats(min_value=0.0, max_value=1.0)
openings = st.lists(st.integers(0, 8), max_size=4, unique=True)


@FEW
@given(q=means, n=counts, extra=st.integers(0, 10**6), c=cs)
def test_ucb1_is_exact(q: float, n: int, extra: int, c: float) -> None:
    parent = n + extra
    assert ucb1(q, n, parent, c) == q + c * math.sqrt(math.log(parent) / n)


@FEW
@given(q=means, n=st.integers(0, 10**6), p=priors_, parent=st.integers(0, 10**6), c=cs)
def test_puct_is_exact(q: float, n: int, p: float, parent: int, c: float) -> None:
    # The engine's grouping, (c * P) * sqrt(N), and the batched search's, (c * sqrt(N)) * P,
    # both through the one rule.
    assert puct_engine(q, n, p, parent, c) == q + c * p * math.sqrt(parent) / (1 + n)
    assert puct(q, n, c * math.sqrt(parent), p) == q + c * math.sqrt(parent) * p / (1 + n)


@FEW
@given(n=st.integers(0, 10**6), k=st.floats(min_value=1e-3, max_value=1e5))
def test_rave_beta_hand_selected_schedule(n: int, k: float) -> None:
    assert rave_beta(n, k) == math.sqrt(k / (3 * n + k))
    assert math.isclose(rave_beta(round(k) + 1, round(k) + 1.0), 0.5)


@FEW
@given(children=st.integers(1, 100), n=st.integers(0, 10**5),
       k=st.floats(min_value=0.1, max_value=5), alpha=st.floats(min_value=0.0, max_value=1.0))
def test_widening_count(children: int, n: int, k: float, alpha: float) -> None:
    assert widened_children(children, n, k, alpha) == min(children,
                                                          max(1, math.ceil(k * n ** alpha)))
    assert widened_children(children, n, 0.0, alpha) == children


def _star(visits: list[int], sums: list[float], priors: list[float]):
    """Arrays of a root (node 0) with len(visits) children."""
    size = len(visits) + 1
    v = np.array([max(1, sum(visits))] + visits, dtype=np.int64)
    s = np.array([0.0] + sums)
    p = np.array([1.0] + priors, dtype=np.float32)
    first = np.full(size, -1, dtype=np.int32)
    first[0] = 1
    num = np.zeros(size, dtype=np.int32)
    num[0] = len(visits)
    zeros_i, zeros_f = np.zeros(size, dtype=np.int64), np.zeros(size)
    return Nodes(v, s, p, first, num, zeros_i, np.zeros(size, dtype=np.int8),
                 np.zeros(size, dtype=np.int8), np.zeros(3, dtype=np.int64), zeros_i, zeros_f,
                 zeros_i)


@FEW
@given(data=st.data(), width=st.integers(2, 9))
def test_select_unvisited_first_then_highest_score(data: st.DataObject, width: int) -> None:
    visits = data.draw(st.lists(st.integers(0, 50), min_size=width, max_size=width))
    sums = [data.draw(st.floats(-1, 1)) * n for n in visits]
    priors = [1.0 / width] * width
    arrays = _star(visits, sums, priors)
    chosen = select_child(arrays, 0, Options(UCT, 1.0, 0.0, 0.5, 0.0, 2))
    if 0 in visits:
        assert chosen == 1 + visits.index(0)
    else:
        parent = arrays[0][0]
        scores = [ucb1(s / n, n, parent, 1.0) for s, n in zip(sums, visits, strict=True)]
        assert chosen == 1 + int(np.argmax(scores))
    chosen = select_child(arrays, 0, Options(PUCT, 1.5, 0.0, 0.5, 0.0, 2))
    parent = arrays[0][0]
    scores = [puct_engine(s / n if n else 0.0, n, np.float32(p), parent, 1.5)
              for s, n, p in zip(sums, visits, priors, strict=True)]
    assert chosen == 1 + int(np.argmax(scores))


def check_tree(grown, simulations: int, players: int) -> None:
    tree = grown.tree
    size = tree.size
    assert tree.visits[0] == simulations and (tree.visits[size:] == 0).all()
    for node in range(size):
        children = tree.children(node)
        if len(children) == 0:
            continue
        child_visits = int(tree.visits[children.start:children.stop].sum())
        # A node's visits: its children's plus its own expanding visit (none for the root).
        assert tree.visits[node] == child_visits + (0 if node == 0 else 1)
        assert (tree.parent[children.start:children.stop] == node).all()
    root_children = tree.children(0)
    if len(root_children) == 0:
        return
    child_sum = tree.value_sum[root_children.start:root_children.stop].sum()
    assert np.isclose(tree.value_sum[0], -child_sum if players == 2 else child_sum)
    assert (np.abs(tree.value_sum[:size]) <= tree.visits[:size] + 1e-9).all()


@FEW
@given(opening=openings, simulations=st.integers(1, 400), seed=st.integers(0, 2**32),
       rule=st.sampled_from(["uct", "puct"]), rave=st.booleans())
def test_conservation_and_determinism(opening: list[int], simulations: int, seed: int, rule: str,
                                      rave: bool) -> None:
    state = tictactoe.from_moves(opening)
    config = SearchConfig(rule=rule, seed=seed, rave_k=100.0 if rave else None)
    a = grow(tictactoe.GAME, state, simulations, config)
    b = grow(tictactoe.GAME, state, simulations, config)
    check_tree(a, simulations, players=2)
    for name in ("visits", "value_sum", "prior", "first_child", "action", "counters"):
        assert np.array_equal(getattr(a.tree, name), getattr(b.tree, name))
    assert np.array_equal(a.amaf_value_sum, b.amaf_value_sum)
    assert np.array_equal(a.phases, b.phases)
    # Work counts: every simulation backs up its whole path; descents and creations add up.
    assert a.phases[BACKUP] == int(a.tree.visits[: a.tree.size].sum())
    assert a.phases[EXPAND] == a.tree.size - 1
    assert a.phases[SELECT] <= a.phases[BACKUP] - simulations


@FEW
@given(capacity=st.integers(1, 40), simulations=st.integers(1, 300), seed=st.integers(0, 100))
def test_a_full_tree_is_reported_not_corrupted(capacity: int, simulations: int,
                                               seed: int) -> None:
    grown = grow(tictactoe.GAME, tictactoe.initial_state(), simulations,
                 SearchConfig(max_nodes=capacity, seed=seed))
    tree = grown.tree
    assert tree.size <= tree.capacity == max(capacity, 8)
    check_tree(grown, simulations, players=2)
    if tree.capacity < 10:  # no room for the root's nine children: nothing is ever expanded
        assert tree.full and tree.size == 1


def test_backup_sign_two_players() -> None:
    # X (to move) has 0 and 1 with O on 3 and 4: cell 2 wins at once, worth +1 to X, and the root
    # (stored for O, who moved into it) loses what X gains.
    state = tictactoe.from_moves([0, 3, 1, 4])
    grown = grow(tictactoe.GAME, state, 300, SearchConfig(seed=1))
    tree = grown.tree
    win = next(c for c in tree.children(0) if tree.action[c] == 2)
    assert tree.value_sum[win] == tree.visits[win] > 0
    children = tree.children(0)
    assert tree.value_sum[0] == -tree.value_sum[children.start:children.stop].sum()
    result = search(tictactoe.GAME, state, 300)
    assert result.values[2] == 1.0 and result.root_value > 0
