"""The batched search's numba kernels and the records they take (`services.mcts.batched.search`
drives them; docs/services/mcts.md, "The batched engine", describes the algorithm).

Records (`NamedTuple`s, as the rollout engine's `services.mcts.rollout.records`):
- `Blocks`: the tree's two preallocated blocks, int64 `ints` [7, N] and float64 `floats` [3, N]
  (rows VISITS ... STATUS and VALUE_SUM ... RAW_VALUE, 80 bytes per node), and `counters`.
- `Rows`: the same tree as named rows, which the kernels build from `Blocks` (`rows_of`).
- `BatchedOptions`: the rule, its constants and the Gumbel root's arrays.
- `Buffers`: the compiled loop's leaf and evaluation buffers.

The Python driver passes each record as a plain tuple: numba's dispatcher types a plain tuple in
C but a `NamedTuple` in Python, about 6 us more per call, as much as a descent of a small tree
(measured with three and eight fields); every kernel called from Python names the fields at once
(`Blocks(*blocks)`), which costs nothing once compiled.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from services.mcts.batched.gumbel import select_gumbel_interior, select_gumbel_root
from services.mcts.core.selection import GUMBEL, PUCT, first_max, puct
from services.mcts.core.tree import ENDED, UNEXPANDED

NEW = 0
"""`status`: a leaf never evaluated."""
PENDING = 1
"""`status`: a leaf in the batch being evaluated."""
EVALUATED = 2
"""`status`: a node whose evaluation was submitted (expanded, terminal, or left a leaf because
the tree was full)."""

RULES = {"puct": PUCT, "gumbel": GUMBEL}
"""The rule code (`services.mcts.core.selection`) of each `BatchedConfig.rule`."""

VISITS, FIRST_CHILD, NUM_CHILDREN, PARENT, ACTION, TERMINAL, STATUS = range(7)
"""Rows of the int64 block `ints` [7, N]."""
VALUE_SUM, PRIOR, RAW_VALUE = range(3)
"""Rows of the float64 block `floats` [3, N]."""
SIZE, MAX_DEPTH, FULL, COLLISIONS, STORED_BACKUPS = range(5)
"""Entries of the int64 `counters` [5] (the first three are `Tree.counters`)."""

OK, BAD_VALUE, BAD_PRIOR, ZERO_PRIORS = 0, 1, 2, 3
"""Error codes of `check_evaluations` (`batched.EvaluationError` says which)."""


class Blocks(NamedTuple):
    """The tree's storage: `ints` int64 [7, N], `floats` float64 [3, N], `counters` int64 [5]."""

    ints: np.ndarray
    floats: np.ndarray
    counters: np.ndarray


class Rows(NamedTuple):
    """The tree as named rows of `Blocks` (each int64 or float64 [N]; see
    `services.mcts.core.tree.Tree` for their meaning); `status` NEW / PENDING / EVALUATED and
    `raw_value` the evaluator's value for the player to move at the node."""

    visits: np.ndarray
    value_sum: np.ndarray
    prior: np.ndarray
    first_child: np.ndarray
    num_children: np.ndarray
    parent: np.ndarray
    action: np.ndarray
    terminal: np.ndarray
    status: np.ndarray
    raw_value: np.ndarray
    counters: np.ndarray


class BatchedOptions(NamedTuple):
    """A search's rule (`batched.BatchedConfig`, resolved).

    Attributes:
        rule: PUCT or GUMBEL (`services.mcts.core.selection`).
        c_puct, virtual_loss, c_visit, c_scale: as `BatchedConfig`.
        players: 1 or 2.
        root_base: float64 [C], `gumbel.root_bases` of the root's children (Gumbel; [1] before
            the root is evaluated and for PUCT).
        considered_table: int64 [simulations], `gumbel.considered_visits_sequence` (Gumbel).
    """

    rule: int
    c_puct: float
    virtual_loss: float
    players: int
    c_visit: float
    c_scale: float
    root_base: np.ndarray
    considered_table: np.ndarray


class Buffers(NamedTuple):
    """The compiled loop's buffers: `out` int64 [4, >= batch_size] (a batch's leaves: node,
    parent, action, depth), `scratch` float64 [MAX_ACTIONS], and the evaluator's outputs
    `priors` float64 [>= batch_size, A], `values` float64 [>= batch_size], `terminal` bool
    [>= batch_size]."""

    out: np.ndarray
    scratch: np.ndarray
    priors: np.ndarray
    values: np.ndarray
    terminal: np.ndarray


@njit(cache=True, nogil=True, inline="always")
def rows_of(blocks):
    """The `Rows` of `blocks` (`Blocks`)."""
    ints = blocks.ints
    floats = blocks.floats
    return Rows(ints[VISITS], floats[VALUE_SUM], floats[PRIOR], ints[FIRST_CHILD],
                ints[NUM_CHILDREN], ints[PARENT], ints[ACTION], ints[TERMINAL], ints[STATUS],
                floats[RAW_VALUE], blocks.counters)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_puct(rows, node, c_puct, scores):
    """The child of `node` with the largest PUCT score `Q + c_puct * P * sqrt(N) / (1 + n)`
    (`selection.puct`; ties: the lower action; an unvisited child has Q = 0).

    Two passes: the scores of all children into `scores` (float64 [>= children]), a loop with no
    branch that LLVM vectorises (int64 visits convert to doubles in SIMD lanes on AVX-512; numpy's
    error model, since Python's zero checks on the divisions would be branches), then the first
    maximum. `c_puct * sqrt(N)` is computed once per node (`puct`'s `weight`).
    """
    visits = rows.visits
    value_sum = rows.value_sum
    prior = rows.prior
    start = rows.first_child[node]
    count = rows.num_children[node]
    coefficient = c_puct * math.sqrt(visits[node])
    for i in range(count):
        n = np.float64(visits[start + i])
        scores[i] = puct(value_sum[start + i] / max(n, 1.0), n, coefficient, prior[start + i])
    return start + first_max(scores, count)


@njit(cache=True, nogil=True, inline="always")
def revert_virtual_loss(rows, node, virtual_loss):
    """Takes the virtual loss of a descent ending at `node` back from its whole path."""
    while node >= 0:
        rows.visits[node] -= 1
        rows.value_sum[node] += virtual_loss
        node = rows.parent[node]


@njit(cache=True, nogil=True, inline="always")
def backup(rows, node, value, virtual_loss, players):
    """Backs up `value` (for the player to move at `node`) along the path of a descent whose
    virtual loss is in place: each node keeps its visit and gets `virtual_loss + value` for the
    player who moved into it (sign flipped per ply when players == 2). Returns the nodes updated."""
    v = -value if players == 2 else value
    steps = 0
    while node >= 0:
        rows.value_sum[node] += v + virtual_loss
        node = rows.parent[node]
        steps += 1
        if players == 2:
            v = -v
    return steps


@njit(cache=True, nogil=True, inline="always")
def select(rows, node, options, scratch):
    """The child of `node` the rule chooses (PUCT, or Gumbel at the root and below it)."""
    if options.rule == GUMBEL:
        if node == 0:
            return select_gumbel_root(rows, options.c_visit, options.c_scale, options.root_base,
                                      options.considered_table, scratch)
        return select_gumbel_interior(node, rows, options.c_visit, options.c_scale, scratch)
    return select_puct(rows, node, options.c_puct, scratch)


@njit(cache=True, nogil=True, inline="always")
def descend_with_virtual_loss(rows, options, scratch):
    """One descent from the root to a node without children, applying the virtual loss on the
    way. Returns (the node, its depth)."""
    virtual_loss = options.virtual_loss
    node = 0
    depth = 0
    rows.visits[0] += 1
    rows.value_sum[0] -= virtual_loss
    while rows.first_child[node] >= 0:
        node = select(rows, node, options, scratch)
        depth += 1
        rows.visits[node] += 1
        rows.value_sum[node] -= virtual_loss
    return node, depth


@njit(cache=True, nogil=True, inline="always")
def collect_leaves(blocks, options, max_descents, out, scratch):
    """Runs up to `max_descents` descents from the (expanded) root of `blocks` (`Blocks`, or
    its plain tuple) under `options` (`BatchedOptions`, or its tuple); see
    `services.mcts.batched.search`.

    Writes each new leaf to `out[:, k]` (int64 [4, >= max_descents]: node, parent, action,
    depth) and marks it PENDING; counts collisions and stored values backed up in `counters`;
    `scratch` is float64 [MAX_ACTIONS].
    Returns (leaves written, descents completed: leaves + stored-value backups).
    """
    rows = rows_of(Blocks(*blocks))
    options = BatchedOptions(*options)
    counters = rows.counters
    leaves = 0
    done = 0
    for _ in range(max_descents):
        node, depth = descend_with_virtual_loss(rows, options, scratch)
        if depth > counters[MAX_DEPTH]:
            counters[MAX_DEPTH] = depth
        if rows.status[node] == PENDING:
            revert_virtual_loss(rows, node, options.virtual_loss)
            counters[COLLISIONS] += 1
            break
        done += 1
        if rows.status[node] == EVALUATED:
            backup(rows, node, rows.raw_value[node], options.virtual_loss, options.players)
            counters[STORED_BACKUPS] += 1
            continue
        rows.status[node] = PENDING
        out[0, leaves] = node
        out[1, leaves] = rows.parent[node]
        out[2, leaves] = rows.action[node]
        out[3, leaves] = depth
        leaves += 1
    return leaves, done


@njit(cache=True, nogil=True)
def check_evaluations(priors, values, terminal):
    """(error code, row) of the first malformed row, (OK, -1) when all are valid: a value not
    finite or outside [-1, 1]; a prior negative or not finite; all-zero priors on a non-terminal
    leaf."""
    for b in range(values.shape[0]):
        v = values[b]
        if not (v >= -1.0 and v <= 1.0):
            return BAD_VALUE, b
        total = 0.0
        for a in range(priors.shape[1]):
            p = priors[b, a]
            if not (p >= 0.0 and p < np.inf):
                return BAD_PRIOR, b
            total += p
        if not terminal[b] and not total > 0.0:
            return ZERO_PRIORS, b
    return OK, -1


@njit(cache=True, nogil=True, inline="always")
def expand(rows, node, priors):
    """Gives `node` a child per action with a prior > 0 in `priors` (float64 [A]), renormalised,
    unless the tree is full (which sets `counters[FULL]`)."""
    counters = rows.counters
    count = 0
    total = 0.0
    for a in range(priors.shape[0]):
        if priors[a] > 0.0:
            count += 1
            total += priors[a]
    size = counters[SIZE]
    if size + count > rows.visits.shape[0]:
        counters[FULL] = 1
        return
    child = size
    for a in range(priors.shape[0]):
        p = priors[a]
        if p > 0.0:
            rows.visits[child] = 0
            rows.value_sum[child] = 0.0
            rows.prior[child] = p / total
            rows.raw_value[child] = 0.0
            rows.first_child[child] = UNEXPANDED
            rows.num_children[child] = 0
            rows.parent[child] = node
            rows.action[child] = a
            rows.terminal[child] = 0
            rows.status[child] = NEW
            child += 1
    counters[SIZE] = size + count
    rows.first_child[node] = size
    rows.num_children[node] = count


@njit(cache=True, nogil=True, inline="always")
def apply_evaluations(blocks, options, nodes, priors, values, terminals):
    """Checks the evaluations (`check_evaluations`; nothing changes when one is malformed), then
    expands each leaf of `nodes` (int64 [B]) with its `priors` row (float64 [B, A]; `expand`;
    no child for a terminal leaf) and backs its value up. `blocks` and `options` as in
    `collect_leaves`.

    Returns:
        (error code, row) as `check_evaluations`.
    """
    code, row = check_evaluations(priors, values, terminals)
    if code != OK:
        return code, row
    rows = rows_of(Blocks(*blocks))
    options = BatchedOptions(*options)
    for b in range(nodes.shape[0]):
        node = nodes[b]
        rows.status[node] = EVALUATED
        rows.raw_value[node] = values[b]
        if terminals[b]:
            rows.terminal[node] = ENDED
        else:
            expand(rows, node, priors[b])
        backup(rows, node, values[b], options.virtual_loss, options.players)
    return OK, -1


# No reference counting (`_nrt=False`, as the engine's kernels): every array comes from the caller,
# and the inlined kernels and evaluator would otherwise count references of every row and slice.
# Not cached: numba's cache never matches a kernel typed by a function argument in a new process.
@njit(nogil=True, _nrt=False)
def run_batches(blocks, options, remaining, batch_size, max_batches, buffers, evaluate, model):
    """The ask/tell loop compiled: up to `max_batches` batches of `collect_leaves` ->
    `evaluate` -> `apply_evaluations` on an expanded root, with no Python between them.

    `evaluate(model, nodes, parents, actions, priors, values, terminal)` is an njit function
    (passed as an argument: numba compiles one specialisation of this kernel per evaluator, with
    the call inlined when it is `inline="always"`); `model` is anything numba can pass (a tuple
    of arrays: weights, per-node states, scratch). It gets the batch's leaves as int64 [B] node
    ids, parent ids and actions from the parent, and must fill `priors` (float64 [B, A], >= 0,
    0 = no child), `values` (float64 [B], in [-1, 1], for the player to move at the leaf) and
    `terminal` (bool [B]) row b for leaf b, exactly as `BatchedSearch.submit` takes them; it
    must not allocate (the kernel runs without reference counting).

    Args:
        blocks, options: as `collect_leaves`.
        remaining: descents left in the search budget; a batch holds at most
            `min(batch_size, remaining)` descents, as in `BatchedSearch.next_batch`.
        buffers: `Buffers` (or its tuple).
    Returns:
        (descents completed, leaves evaluated, batches, error code, row): the error code is
        `check_evaluations`' for the first malformed evaluation (0 when none), which stops the
        loop with that batch's leaves still PENDING and their virtual loss in place.
    """
    out, scratch, priors, values, terminal = buffers
    done = 0
    evaluated = 0
    batches = 0
    while remaining > 0 and batches < max_batches:
        leaves, completed = collect_leaves(blocks, options, min(batch_size, remaining), out,
                                           scratch)
        remaining -= completed
        done += completed
        if leaves == 0:
            continue
        nodes = out[0, :leaves]
        evaluate(model, nodes, out[1, :leaves], out[2, :leaves], priors[:leaves],
                 values[:leaves], terminal[:leaves])
        code, row = apply_evaluations(blocks, options, nodes, priors[:leaves], values[:leaves],
                                      terminal[:leaves])
        if code != OK:
            return done - leaves, evaluated, batches, code, row
        evaluated += leaves
        batches += 1
    return done, evaluated, batches, OK, -1
