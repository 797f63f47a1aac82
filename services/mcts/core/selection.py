"""Selection scores of the search core, as numba kernels tested for exact values.

Values are means in [-1, 1] for the player choosing at the node (the mover into the child).
"""

from __future__ import annotations

import math

from numba import njit

UCT = 0
"""Selection rule code: UCB1 (Kocsis & Szepesvari 2006)."""
PUCT = 1
"""Selection rule code: PUCT as in AlphaZero (Silver et al. 2018)."""
GUMBEL = 2
"""Selection rule code: Gumbel MuZero (Danihelka et al. 2022; `services.mcts.batched.gumbel`),
batched search only."""


@njit(cache=True, nogil=True, inline="always")
def first_max(scores, count):
    """Index of the largest of `scores[:count]` (float64, count >= 1); ties go to the lowest
    index. Selection writes every child's score in one branch-free loop that LLVM vectorises,
    then calls this."""
    best = 0
    best_score = scores[0]
    for i in range(1, count):
        if scores[i] > best_score:
            best_score = scores[i]
            best = i
    return best


@njit(cache=True, nogil=True)
def ucb1(q, n, parent_visits, exploration):
    """UCB1 score `q + c * sqrt(ln N / n)` of a child visited `n >= 1` times under a parent visited
    `parent_visits >= 1` times (Auer et al. 2002; Kocsis & Szepesvari 2006)."""
    return ucb1_from_log(q, n, math.log(parent_visits), exploration)


@njit(cache=True, nogil=True)
def ucb1_from_log(q, n, log_parent_visits, exploration):
    """`ucb1` given `ln N`: selection computes the logarithm once per node, not once per child."""
    return q + exploration * math.sqrt(log_parent_visits / n)


@njit(cache=True, nogil=True, inline="always")
def puct(q, n, weight, scale):
    """AlphaZero's PUCT score `q + c_puct * P * sqrt(N) / (1 + n)` (Silver et al. 2018), the one
    implementation of the rule for the rollout engine and the batched search: an unvisited child
    has `q = 0` and `n = 0`, and `weight * scale` is the product `c_puct * P * sqrt(N)`, given
    as two factors so that each search keeps the rounding of its trees:

    - the rollout engine (`rollout_kernel.select_child`) passes `weight = c_puct * P`,
      `scale = sqrt(N)` (`puct_engine`);
    - the batched search (`batched_kernels.select_puct`), which scores a node's children in one
      vectorised loop, hoists `weight = c_puct * sqrt(N)` out of it and passes `scale = P`.

    The two groupings can differ in the last bit, which decides ties between children; each
    search's trees hash as before the rule was shared
    (`tests/unit/mcts/test_tree_hashes_golden.py`)."""
    return q + weight * scale / (1.0 + n)


@njit(cache=True, nogil=True, inline="always")
def puct_engine(q, n, prior, parent_visits, exploration):
    """`puct` with the rollout engine's grouping: `q + (c_puct * P) * sqrt(N) / (1 + n)`."""
    return puct(q, n, exploration * prior, math.sqrt(parent_visits))


@njit(cache=True, nogil=True)
def rave_beta(parent_visits, rave_k):
    """Weight of the AMAF value, Gelly & Silver's "hand-selected schedule" (2007; 2011, eq. 9):
    `beta = sqrt(k / (3 N + k))`, N the parent's visits; at N = k the AMAF and the Monte-Carlo
    values weigh equally (beta = 1/2)."""
    return math.sqrt(rave_k / (3.0 * parent_visits + rave_k))


@njit(cache=True, nogil=True)
def widened_children(num_children, parent_visits, widening_k, widening_alpha):
    """Children open to selection under progressive widening (Coulom 2007; Couetoux et al. 2011):
    `min(num_children, max(1, ceil(k * N^alpha)))`, N the parent's visits; all when k <= 0."""
    if widening_k <= 0.0:
        return num_children
    allowed = math.ceil(widening_k * parent_visits ** widening_alpha)
    if allowed < 1:
        allowed = 1
    return min(num_children, allowed)
