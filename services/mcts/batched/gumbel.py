"""Gumbel MuZero's selection rules (Danihelka, Guez, Schrittwieser & Silver 2022, "Policy
improvement by planning with Gumbel"; as mctx's `gumbel_muzero_policy`), the one implementation
the batched search (`services.mcts.batched.search`) uses: the root's sequential-halving schedule,
the completed Q-values and their sigma transform, the root's Gumbel-top-m choice and the
deterministic choice below the root. See docs/services/mcts.md for how a search uses them.

The kernels read the tree through a `Rows` record (`services.mcts.batched.kernels.Rows`: visits,
value_sum, prior, first_child, num_children, raw_value, ...).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LOW_LOGIT = -1e9
"""The floor of a root score (mctx's), so that -inf logits still compare."""
TINY = float(np.finfo(np.float32).tiny)
"""The smallest prior taken for a logarithm (float32's smallest normal, as mctx)."""
RESCALE_EPSILON = 1e-8
"""The smallest range of the completed Q-values rescaled to [0, 1]."""


def considered_visits_sequence(num_considered: int, simulations: int) -> np.ndarray:
    """Sequential halving's visit schedule at the root (Danihelka et al. 2022, as mctx's
    `get_sequence_of_considered_visits`): int64 [simulations], entry k the visit count a
    considered action must have to be chosen by simulation k. Each phase gives every remaining
    action `max(1, floor(simulations / (ceil(log2 m) * remaining)))` more visits, then halves the
    remaining actions (at least 2)."""
    if num_considered <= 1:
        return np.arange(simulations, dtype=np.int64)
    log2_m = math.ceil(math.log2(num_considered))
    sequence: list[int] = []
    visits = [0] * num_considered
    remaining = num_considered
    while len(sequence) < simulations:
        extra = max(1, int(simulations / (log2_m * remaining)))
        for _ in range(extra):
            sequence.extend(visits[:remaining])
            for i in range(remaining):
                visits[i] += 1
        remaining = max(2, remaining // 2)
    return np.asarray(sequence[:simulations], dtype=np.int64)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def completed_qvalues(node, rows, c_visit, c_scale, out):
    """sigma(completed q) of the children of `node` into `out[:num_children]` (float64), as mctx's
    `qtransform_completed_by_mix_value`: a visited child's mean value, an unvisited one's the
    mixed value `(v + sum_b N(b) * sum_{b visited} pi(b) q(b) / sum_{b visited} pi(b)) /
    (1 + sum_b N(b))`, rescaled to [0, 1] over the children, times `(c_visit + max_b N(b)) *
    c_scale`; `rows` is the tree (`batched_kernels.Rows`). Returns max_b N(b)."""
    visits = rows.visits
    value_sum = rows.value_sum
    prior = rows.prior
    start = rows.first_child[node]
    count = rows.num_children[node]
    sum_n = 0
    max_n = 0
    sum_p = 0.0
    for i in range(count):
        n = visits[start + i]
        sum_n += n
        if n > max_n:
            max_n = n
        if n > 0:
            sum_p += max(prior[start + i], TINY)
    weighted = 0.0
    if sum_p > 0.0:
        for i in range(count):
            n = visits[start + i]
            if n > 0:
                weighted += max(prior[start + i], TINY) * (value_sum[start + i] / n) / sum_p
    mixed = (rows.raw_value[node] + sum_n * weighted) / (sum_n + 1.0)
    low = np.inf
    high = -np.inf
    for i in range(count):
        n = visits[start + i]
        q = value_sum[start + i] / n if n > 0 else mixed
        out[i] = q
        low = min(low, q)
        high = max(high, q)
    scale = (c_visit + max_n) * c_scale / max(high - low, RESCALE_EPSILON)
    for i in range(count):
        out[i] = (out[i] - low) * scale
    return max_n


@njit(cache=True, nogil=True)
def root_bases(gumbel, prior):
    """float64 [A]: `g + logits - max(logits)` of the root's children (`gumbel` float64 [A],
    -inf for an action not considered; `prior` their priors), the part of the Gumbel root score
    that stays fixed during a search (`select_gumbel_root`)."""
    count = gumbel.shape[0]
    max_logit = -np.inf
    for i in range(count):
        max_logit = max(max_logit, math.log(max(prior[i], TINY)))
    out = np.empty(count)
    for i in range(count):
        out[i] = gumbel[i] + math.log(max(prior[i], TINY)) - max_logit
    return out


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_gumbel_root(rows, c_visit, c_scale, root_base, considered_table, scratch):
    """Gumbel MuZero's root choice: among the considered actions (finite `root_base`, from
    `root_bases`) whose visits equal `considered_table[sum of root visits]`, the largest
    `g + logits - max(logits) + sigma(q)` (see the module doc)."""
    visits = rows.visits
    start = rows.first_child[0]
    count = rows.num_children[0]
    completed_qvalues(0, rows, c_visit, c_scale, scratch)
    sum_n = 0
    for i in range(count):
        sum_n += visits[start + i]
    index = min(sum_n, considered_table.shape[0] - 1)
    wanted = considered_table[index]
    best = -1
    best_score = -np.inf
    fallback = start
    fallback_score = -np.inf
    for i in range(count):
        base = root_base[i]
        if base == -np.inf:
            continue
        score = max(LOW_LOGIT, base + scratch[i])
        if score > fallback_score:
            fallback_score = score
            fallback = start + i
        if visits[start + i] == wanted and score > best_score:
            best_score = score
            best = start + i
    return best if best >= 0 else fallback


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_gumbel_interior(node, rows, c_visit, c_scale, scratch):
    """Gumbel MuZero's deterministic choice below the root: the largest
    `pi'(a) - N(a) / (1 + sum_b N(b))`, pi' = softmax(logits + sigma(completed q))."""
    visits = rows.visits
    prior = rows.prior
    start = rows.first_child[node]
    count = rows.num_children[node]
    completed_qvalues(node, rows, c_visit, c_scale, scratch)
    sum_n = 0
    top = -np.inf
    for i in range(count):
        sum_n += visits[start + i]
        top = max(top, scratch[i])
    # softmax(log p + sigma) as p * exp(sigma - max sigma), normalised: the same policy without
    # a logarithm per child (a libm call each, which numba cannot vectorise).
    total = 0.0
    for i in range(count):
        scratch[i] = max(prior[start + i], TINY) * math.exp(scratch[i] - top)
        total += scratch[i]
    best = start
    best_score = -np.inf
    for i in range(count):
        score = scratch[i] / total - visits[start + i] / (1.0 + sum_n)
        if score > best_score:
            best_score = score
            best = start + i
    return best
