"""The rollout engine's sequential kernel, `run_simulations`, and the pieces it shares with the
tree-parallel kernel (`services.mcts.rollout.shared_kernel`): selection, expansion, the rollout.

The rules (`services.mcts.core.selection`) and the algorithm are described in
docs/services/mcts.md; the records the kernels take (`Nodes`, `Options`, `Scratch`,
`GameFunctions`) in `services.mcts.rollout.records`. Every function here is `inline="always"` but
the kernel itself, so the kernel compiles to one loop per game, as it did when every array was its
own argument.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from services.mcts.core.selection import (
    PUCT,
    UCT,
    puct_engine,
    rave_beta,
    ucb1_from_log,
    widened_children,
)
from services.mcts.core.tree import UNEXPANDED
from services.mcts.native import kernel_cache
from services.mcts.native.cycle_clock import read_cycles
from services.mcts.native.prefetch import prefetch
from services.mcts.native.simd import LANES, ucb1_lanes
from services.mcts.native.xorshift import random_below

SELECT, EXPAND, ROLLOUT, BACKUP = 0, 1, 2, 3
"""Indices of the phase work counters and of the phase times (see
docs/services/mcts.md, "Time per phase")."""
WAIT = 4
"""Index of the time spent waiting for another thread: on a shared tree, for an expansion in
progress (tree parallelisation; the transposition table's lock is counted in selection)."""
TIMED = 5
"""Index, in the kernels' cycle counters, of the number of simulations timed."""


@njit(cache=True, nogil=True)
def _log_table(size):
    """float64 [size]: `math.log(n)` for n = 1 .. size - 1 as the kernels compute it (the same
    libm call, so the same bits), 0 at index 0."""
    out = np.zeros(size, dtype=np.float64)
    for n in range(1, size):
        out[n] = math.log(n)
    return out


LOG_TABLE_SIZE = 1 << 16
"""Visit counts below this read their logarithm from a table (512 KB) instead of calling libm:
the counts of every node a simulation passes but the root and its busiest children in a search of
a few hundred thousand simulations. A node's count grows by one per visit, so its look-ups walk
the table in order and touch few cache lines."""
_LOG_VISITS = _log_table(LOG_TABLE_SIZE)


@njit(cache=True, nogil=True, inline="always")
def log_visits(n):
    """`math.log(n)` (bit for bit) of a visit count n >= 1, from the table when small."""
    return _LOG_VISITS[n] if n < LOG_TABLE_SIZE else math.log(n)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def ucb1_lanes_scalar(visits, value_sum, start, count, log_parent_n, exploration):
    """`services.mcts.native.simd.ucb1_lanes` in scalar code (`selection.ucb1_from_log`), the same
    results, for the last rows of the arrays, where an 8-wide load would read past their end."""
    for i in range(count):
        if visits[start + i] == 0:
            return i, 0, -np.inf
    best = 0
    best_score = -np.inf
    for i in range(count):
        n = visits[start + i]
        score = ucb1_from_log(value_sum[start + i] / n, n, log_parent_n, exploration)
        if score > best_score:
            best_score = score
            best = i
    return LANES, best, best_score


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_uct(node, visits, value_sum, first_child, num_children, action, exploration):
    """`select_child` for plain UCT (no RAVE, no widening), the same choice computed faster:
    the first unvisited child, else the first child of highest UCB1 score
    `value_sum / n + c * sqrt(ln N / n)`, in the same operations (so to the same bits) but eight
    children at a time in SIMD instructions, without a branch (`services.mcts.native.simd`). It
    prefetches the children's rows of `first_child`, `num_children` and `action`, which the
    descent reads next, while their statistics load."""
    start = first_child[node]
    count = num_children[node]
    prefetch(first_child, start)
    prefetch(num_children, start)
    prefetch(action, start)
    log_parent_n = log_visits(max(visits[node], 1))
    if count <= LANES and start + LANES <= visits.shape[0]:
        unvisited, index, _ = ucb1_lanes(visits, value_sum, start, count, log_parent_n,
                                         exploration)
        return start + (unvisited if unvisited < LANES else index)
    best = 0
    best_score = -np.inf
    for base in range(0, count, LANES):
        width = min(count - base, LANES)
        if start + base + LANES <= visits.shape[0]:
            unvisited, index, score = ucb1_lanes(visits, value_sum, start + base, width,
                                                 log_parent_n, exploration)
        else:
            unvisited, index, score = ucb1_lanes_scalar(visits, value_sum, start + base,
                                                        width, log_parent_n, exploration)
        if unvisited < LANES:
            return start + base + unvisited
        if score > best_score:
            best_score = score
            best = base + index
    return start + best


@njit(cache=True, nogil=True, inline="always")
def amaf_mixed(q, n, child, nodes, beta):
    """RAVE's Q of `child` (`nodes.amaf_*`, Gelly & Silver 2007): `(1 - beta) Q + beta Q_amaf`,
    Q_amaf alone when n == 0. Returns (q, True), or (q, False) when the child has no AMAF
    statistics (q unchanged)."""
    if nodes.amaf_visits[child] > 0:
        amaf_q = nodes.amaf_value_sum[child] / nodes.amaf_visits[child]
        return (amaf_q if n == 0 else (1.0 - beta) * q + beta * amaf_q), True
    return q, False


@njit(cache=True, nogil=True, inline="always")
def score_child(q, n, prior, parent_n, log_parent_n, options):
    """The rule's score of a child of mean `q` visited `n` times (PUCT: `selection.puct`; UCT:
    UCB1 with n counted as 1 when 0, for a child valued by its AMAF statistics alone)."""
    if options.rule == PUCT:
        return puct_engine(q, n, prior, parent_n, options.exploration)
    return ucb1_from_log(q, max(n, 1), log_parent_n, options.exploration)


@njit(cache=True, nogil=True, inline="always")
def choose_child(nodes, start, count, parent_n, options, statistics, source):
    """The one loop of the rules' child choice, for the sequential kernel (`select_child`) and
    the tree-parallel one (`shared_kernel.select_child_shared`): among the children
    `start .. start + count - 1` of a node counted `parent_n` times, progressive widening first
    (`selection.widened_children`), then the first child of highest score by `options`' rule
    (`score_child`), with RAVE's mix of Q when on (`amaf_mixed`); under UCT a child with no
    visits and no AMAF statistics is taken at once, in child order. `statistics(nodes, source,
    child)` gives a child's (n, Q), Q = 0 when n == 0: the tree's visits and mean, or, on a
    shared tree, arrivals and the mean under virtual loss. The kernels pass a compiled
    function, so numba inlines it: no call at run time."""
    rave_k = options.rave_k
    count = widened_children(count, parent_n, options.widening_k, options.widening_alpha)
    beta = rave_beta(parent_n, rave_k) if rave_k > 0.0 else 0.0
    log_parent_n = math.log(max(parent_n, 1)) if options.rule == UCT else 0.0
    best = start
    best_score = -np.inf
    for child in range(start, start + count):
        n, q = statistics(nodes, source, child)
        mixed = False
        if rave_k > 0.0:
            q, mixed = amaf_mixed(q, n, child, nodes, beta)
        if not mixed and options.rule == UCT and n == 0:
            return child
        score = score_child(q, n, nodes.prior[child], parent_n, log_parent_n, options)
        if score > best_score:
            best_score = score
            best = child
    return best


@njit(cache=True, nogil=True, inline="always")
def tree_statistics(nodes, source, child):
    """(n, Q) of `child` for `choose_child` in the sequential kernel: its visits and mean value
    (0 when unvisited); `source` is unused."""
    n = nodes.visits[child]
    return n, (nodes.value_sum[child] / n if n > 0 else 0.0)


@njit(cache=True, nogil=True, inline="always")
def select_child(nodes, node, options):
    """Index of the child of `node` (expanded) chosen by `options`' rule, with progressive
    widening and RAVE when on (`choose_child` over the tree's visits); see
    docs/services/mcts.md."""
    return choose_child(nodes, nodes.first_child[node], nodes.num_children[node],
                        nodes.visits[node], options, tree_statistics, 0)


@njit(cache=True, nogil=True, inline="always")
def sort_by_prior(actions, action_priors, count):
    """Sorts the first `count` actions and their priors in place by decreasing prior; an
    insertion sort, stable: equal priors keep the game's action order."""
    for i in range(1, count):
        a = actions[i]
        p = action_priors[i]
        j = i - 1
        while j >= 0 and action_priors[j] < p:
            actions[j + 1] = actions[j]
            action_priors[j + 1] = action_priors[j]
            j -= 1
        actions[j + 1] = a
        action_priors[j + 1] = p


@njit(cache=True, nogil=True, inline="always")
def write_children(nodes, node, size, count, actions, action_priors, rave):
    """Writes rows `size .. size + count - 1` as the unexpanded children of `node` for `actions`
    with `action_priors`; the AMAF statistics are reset only when `rave` is set (otherwise never
    read: their untouched zero pages cost no memory)."""
    for i in range(count):
        child = size + i
        nodes.visits[child] = 0
        nodes.value_sum[child] = 0.0
        if rave:
            nodes.amaf_visits[child] = 0
            nodes.amaf_value_sum[child] = 0.0
        nodes.prior[child] = action_priors[i]
        nodes.first_child[child] = UNEXPANDED
        nodes.num_children[child] = 0
        nodes.parent[child] = node
        nodes.action[child] = actions[i]
        nodes.terminal[child] = 0


@njit(cache=True, nogil=True, inline="always")
def expand(nodes, node, count, actions, action_priors, rave):
    """Creates the children of `node` for its `count` legal `actions` (int64 [>= count]) with
    their `action_priors` (float64 [>= count]), by decreasing prior; sorts both in place
    (`sort_by_prior`, `write_children`).

    Returns:
        the number of children created; 0 when the arrays are full (`counters[2]` is set then).
    """
    counters = nodes.counters
    size = counters[0]
    if size + count > nodes.visits.shape[0]:
        counters[2] = 1
        return 0
    sort_by_prior(actions, action_priors, count)
    write_children(nodes, node, size, count, actions, action_priors, rave)
    counters[0] = size + count
    nodes.first_child[node] = size
    nodes.num_children[node] = count
    return count


@njit(nogil=True, inline="always")
def uniform_rollout(state, rng, moves, ply, actions, legal_actions, play, outcome):
    """The rollout of a game without its own (see `services.mcts.core.game`): uniformly random legal
    actions until the game ends, recorded in `moves[ply:]`; `actions` is a scratch buffer
    (int64 [MAX_ACTIONS]). Returns (the result for the last mover, the ply after the last move)."""
    ended = False
    while not ended:
        count = legal_actions(state, actions)
        move = actions[random_below(rng, count)]
        moves[ply] = move
        ended = play(state, move)
        ply += 1
    return outcome(state, rng), ply


def rollout(game, scratch, depth, record):
    """The evaluation of a leaf that goes on: the game's own rollout, or `uniform_rollout` for a
    game without one (chosen when the kernel is compiled). Returns (value for the last mover,
    the ply after the last move)."""


@overload(rollout, inline="always")
def _rollout(game, scratch, depth, record):
    if isinstance(game.types[4], types.NoneType):
        def uniform(game, scratch, depth, record):
            return uniform_rollout(scratch.state, scratch.rng, scratch.moves, depth,
                                   scratch.actions, game.legal_actions, game.play, game.outcome)
        return uniform

    def own(game, scratch, depth, record):
        return game.rollout(scratch.state, scratch.rng, scratch.moves, depth, record)
    return own


@njit(nogil=True, inline="always")
def evaluate(game, scratch, depth, ended, record, players):
    """One rollout from the leaf at `depth` (the outcome itself when the move into it `ended`
    the game). Returns (the value for the player who moved into the leaf, the plies played to
    the end)."""
    plies = depth
    if ended:
        value = game.outcome(scratch.state, scratch.rng)
    else:
        value, plies = rollout(game, scratch, depth, record)
    if players == 2 and (plies - depth) % 2 == 1:
        value = -value
    return value, plies


@njit(nogil=True, inline="always")
def step(nodes, scratch, game, node, depth):
    """Plays the move into `node` (a child chosen at ply `depth`) on the scratch state, records it
    and marks the node terminal if the move ended the game. Returns whether it did."""
    scratch.moves[depth] = nodes.action[node]
    ended = game.play(scratch.state, nodes.action[node])
    nodes.terminal[node] = ended
    scratch.path[depth + 1] = node
    return ended


@njit(nogil=True, inline="always")
def select_leaf(nodes, options, scratch, game, root_state, plain_uct):
    """Selection: from the root (its state copied from `root_state`) down by the rule to a node
    without children. Returns (node, depth, ended, steps)."""
    state = scratch.state
    for i in range(state.shape[0]):
        state[i] = root_state[i]
    node = 0
    depth = 0
    ended = False
    scratch.path[0] = 0
    while nodes.num_children[node] > 0:
        if plain_uct:
            node = select_uct(node, nodes.visits, nodes.value_sum, nodes.first_child,
                              nodes.num_children, nodes.action, options.exploration)
        else:
            node = select_child(nodes, node, options)
        ended = step(nodes, scratch, game, node, depth)
        depth += 1
    return node, depth, ended, depth


@njit(nogil=True, inline="always")
def expand_leaf(nodes, options, scratch, game, node, depth, ended, record):
    """Expansion: a leaf that goes on and was visited before (the root at once) gets its
    children, and the simulation steps into the one the rule chooses. Returns (node, depth,
    ended, children created)."""
    created = 0
    if not ended and (node == 0 or nodes.visits[node] > 0):
        count = game.legal_actions(scratch.state, scratch.actions)
        if count > 0:
            game.priors(scratch.state, scratch.actions, count, scratch.action_priors)
            created = expand(nodes, node, count, scratch.actions, scratch.action_priors,
                             record)
        if created > 0:
            node = select_child(nodes, node, options)
            ended = step(nodes, scratch, game, node, depth)
            depth += 1
    if depth > nodes.counters[1]:
        nodes.counters[1] = depth
    return node, depth, ended, created


@njit(nogil=True, inline="always")
def backup_down(nodes, path, depth, value, players):
    """Backup without RAVE, from the root down: the next simulation reads the top levels first,
    and the stores to them, made first, have left the store buffer by then (a vector load over a
    store still in flight waits for it). `value` is for the player who moved into `path[depth]`.
    Returns the nodes updated."""
    if players == 2 and depth % 2 == 1:
        value = -value
    for d in range(depth + 1):
        node = path[d]
        nodes.visits[node] += 1
        nodes.value_sum[node] += value
        if players == 2:
            value = -value
    return depth + 1


@njit(nogil=True, inline="always")
def backup_amaf(nodes, scratch, depth, plies, value, stamp, players):
    """Backup with RAVE, from the leaf up, with the AMAF update of every child of a path node
    whose action its player played at that ply or later (`scratch.seen` marks `stamp`). Returns
    the nodes updated."""
    seen = scratch.seen
    moves = scratch.moves
    for ply in range(depth, plies):
        seen[ply % players, moves[ply]] = stamp
    for d in range(depth, -1, -1):
        node = scratch.path[d]
        nodes.visits[node] += 1
        nodes.value_sum[node] += value
        if players == 2:
            value = -value
        if nodes.num_children[node] > 0:
            side = d % players
            if d < depth:
                seen[side, moves[d]] = stamp
            # `value` is now for the player to move at `node`, the mover into its children.
            start = nodes.first_child[node]
            for child in range(start, start + nodes.num_children[node]):
                if seen[side, nodes.action[child]] == stamp:
                    nodes.amaf_visits[child] += 1
                    nodes.amaf_value_sum[child] += value
    return depth + 1


@njit(nogil=True, inline="always")
def clear_seen(seen):
    """Zeroes the AMAF marks (int64 [2, MAX_ACTIONS]) before a kernel's first simulation."""
    for side in range(seen.shape[0]):
        for a in range(seen.shape[1]):
            seen[side, a] = 0


# No reference counting (`_nrt=False`): every array comes from the caller, and the atomic reference
# counts of the arrays passed to the inlined functions would take a third of the time. Cached on
# disk by `kernel_cache` (numba's own cache never matches a kernel typed by function arguments in
# a new process; see docs/services/mcts.md).
# Numpy's error model: the only divisions are by counts checked to be nonzero, and the Python
# model's zero checks would add a branch to each of them.
@njit(nogil=True, _nrt=False, error_model="numpy")
def run_simulations(nodes, options, scratch, game, root_state, simulations, sample_mask):
    """Runs `simulations` simulations in place on the tree `nodes` whose root holds `root_state`
    (a state whose game goes on); `nodes.terminal[node]` is 1 once the move into the node is
    known to end the game. See docs/services/mcts.md for the rules and `records` for the
    records. Simulation `sim` with `sim & sample_mask == 0` adds the cycle-counter ticks of its
    phases to `scratch.phase_cycles` (SELECT .. BACKUP, and TIMED for the count); a negative
    `sample_mask` times nothing. Work counts go to `scratch.phases`."""
    record = options.rave_k > 0.0
    plain_uct = options.rule == UCT and not record and options.widening_k <= 0.0
    players = options.players
    timing = sample_mask >= 0
    cycles = scratch.phase_cycles
    work = scratch.phases
    selection_steps = expanded_nodes = rollout_plies = backup_steps = 0
    started = selected = expanded = evaluated = 0
    clear_seen(scratch.seen)
    for sim in range(simulations):
        sampled = timing and (sim & sample_mask) == 0
        if sampled:
            started = read_cycles()
        node, depth, ended, steps = select_leaf(nodes, options, scratch, game, root_state,
                                                plain_uct)
        selection_steps += steps
        if sampled:
            selected = read_cycles()
        node, depth, ended, created = expand_leaf(nodes, options, scratch, game, node, depth,
                                                  ended, record)
        expanded_nodes += created
        if sampled:
            expanded = read_cycles()
        value, plies = evaluate(game, scratch, depth, ended, record, players)
        rollout_plies += plies - depth
        if sampled:
            evaluated = read_cycles()
        if record:
            backup_steps += backup_amaf(nodes, scratch, depth, plies, value, sim + 1, players)
        else:
            backup_steps += backup_down(nodes, scratch.path, depth, value, players)
        if sampled:
            cycles[SELECT] += selected - started
            cycles[EXPAND] += expanded - selected
            cycles[ROLLOUT] += evaluated - expanded
            cycles[BACKUP] += read_cycles() - evaluated
            cycles[TIMED] += 1
    work[SELECT] += selection_steps
    work[EXPAND] += expanded_nodes
    work[ROLLOUT] += rollout_plies
    work[BACKUP] += backup_steps


kernel_cache.enable(run_simulations)
