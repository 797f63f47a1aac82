"""The tree-parallel kernel, `run_shared_simulations`: threads growing one tree without locks
(Chaslot, Winands & van den Herik 2008; Enzenberger & Mueller 2009), with an optional
transposition table. The algorithm is described in docs/services/mcts.md ("Parallel search");
the records the kernels take in `services.mcts.rollout.records`; selection, expansion and the
rollout are the sequential kernel's (`services.mcts.rollout.kernel`) where they can be.
"""

from __future__ import annotations

from numba import njit

from services.mcts.core.tree import UNEXPANDED
from services.mcts.native import kernel_cache
from services.mcts.native.atomics import (
    compare_exchange,
    fetch_add,
    load_acquire,
    load_relaxed,
    store_release,
)
from services.mcts.native.cycle_clock import read_cycles
from services.mcts.native.spinlock import SPINS_BEFORE_YIELD, acquire, pause, release
from services.mcts.rollout.kernel import (
    BACKUP,
    EXPAND,
    ROLLOUT,
    SELECT,
    TIMED,
    WAIT,
    choose_child,
    clear_seen,
    evaluate,
    sort_by_prior,
    step,
    write_children,
)
from services.mcts.rollout.transpositions import find_or_insert

REFUSED = -2
"""`first_child` of a node a shared tree could not expand (full, or no legal action); it reads
as UNEXPANDED again once the search is over."""
LOCK, CLAIMED, TARGET = 0, 1, 2
"""Entries of the threads' shared int64 [3] `shared`: the transposition table's lock word, the
simulations claimed so far and the simulations to reach."""


@njit(nogil=True)
def no_key(state):
    """The `key` in `GameFunctions` of a game without one (never called: a table needs the
    game's key)."""
    return 0


@njit(cache=True, nogil=True, inline="always")
def shared_statistics(nodes, table, child):
    """(n, Q) of `child` for `rollout_kernel.choose_child` on a shared tree: n is its arrivals,
    and Q (for n > 0; 0 otherwise) its mean under virtual loss, every simulation in flight
    through it counted as a loss; with a table, its position's mean (while the position has a
    count)."""
    n = nodes.arrivals[child]
    if n == 0:
        return n, 0.0
    lost = max(n - nodes.visits[child], 0)
    position = table.entry[child] if table.on else -1
    # (A position's count can lag its node's while another thread backs up.)
    shared_n = table.visits[position] + lost if position >= 0 else 0
    if shared_n > 0:
        return n, (table.value_sum[position] - lost) / shared_n
    return n, (nodes.value_sum[child] - lost) / n


@njit(cache=True, nogil=True, inline="always")
def select_child_shared(nodes, table, node, start, count, options):
    """`rollout_kernel.select_child` on a tree shared by threads, for a thread that has arrived
    at `node` (children `start .. start + count - 1`): a child's n is its arrivals (visits plus
    simulations in flight through it) and each in-flight simulation counts as a loss (-1 for the
    mover into the child): virtual loss; the parent's N is its arrivals but the thread's own.
    With `table.on`, a child's Q is its position's mean from the transposition table while N
    and n stay the tree's (see docs/services/mcts.md). With nothing in flight and no table
    it chooses exactly as `select_child`. Reads that race with other threads' updates see each value
    either before or after an update (aligned 4- and 8-byte words)."""
    return choose_child(nodes, start, count, nodes.arrivals[node] - 1, options,
                        shared_statistics, table)


@njit(nogil=True, _nrt=False)
def expand_shared(nodes, scratch, game, node, rave):
    """`rollout_kernel.expand` for a tree shared by threads, called by the one thread that
    expands `node` (its state in `scratch.state`): the children's rows are claimed with a
    compare-and-swap on `counters[0]`, written, and published by a release store of
    `first_child[node]` (after `num_children[node]`), so that a thread that reads
    `first_child[node] >= 0` with acquire ordering sees every child. A node that gets no
    children (the tree is full: `counters[2]` is set; or no legal action) is marked REFUSED in
    `first_child`. Returns the children created."""
    actions = scratch.actions
    action_priors = scratch.action_priors
    counters = nodes.counters
    count = game.legal_actions(scratch.state, actions)
    if count == 0:
        store_release(nodes.first_child, node, REFUSED)
        return 0
    game.priors(scratch.state, actions, count, action_priors)
    sort_by_prior(actions, action_priors, count)
    while True:
        size = load_relaxed(counters, 0)
        if size + count > nodes.visits.shape[0]:
            counters[2] = 1
            store_release(nodes.first_child, node, REFUSED)
            return 0
        if compare_exchange(counters, 0, size, size + count) == size:
            break
    write_children(nodes, node, size, count, actions, action_priors, rave)
    nodes.num_children[node] = count
    store_release(nodes.first_child, node, size)
    return count


@njit(nogil=True, inline="always")
def find_entry(table, node, state, lock, key):
    """Gives `node` its transposition-table entry (the table is guarded by the lock word
    `lock[LOCK]`; each node is looked up once)."""
    acquire(lock, LOCK)
    if table.entry[node] < 0:
        table.entry[node] = find_or_insert(key(state), table.slot_key, table.slot_entry,
                                           table.counters, table.visits.shape[0], table.shift)
    release(lock, LOCK)


@njit(nogil=True, inline="always")
def expand_or_wait(nodes, scratch, game, node, earlier, rave, sampled):
    """At a node without published children: the node's second arrival (the root's first)
    expands it (`expand_shared`), a later one waits for that expansion. Returns (first child or
    REFUSED, children created by this thread, cycles expanding, cycles waiting)."""
    expanding = 0
    waiting = 0
    created = 0
    if earlier == (0 if node == 0 else 1):
        clock = read_cycles() if sampled else 0
        created = expand_shared(nodes, scratch, game, node, rave)
        if sampled:
            expanding = read_cycles() - clock
    else:
        clock = read_cycles() if sampled else 0
        spins = 0
        while load_acquire(nodes.first_child, node) == UNEXPANDED:
            spins += 1
            if spins == SPINS_BEFORE_YIELD:
                pause()
                spins = 0
        if sampled:
            waiting = read_cycles() - clock
    return load_acquire(nodes.first_child, node), created, expanding, waiting


@njit(nogil=True, inline="always")
def raise_max_depth(counters, depth):
    """`counters[1] = max(counters[1], depth)` with a compare-and-swap loop."""
    deepest = load_relaxed(counters, 1)
    while depth > deepest:
        found = compare_exchange(counters, 1, deepest, depth)
        if found == deepest:
            break
        deepest = found


@njit(nogil=True, _nrt=False)
def descend(nodes, table, shared, options, scratch, game, root_state, sampled):
    """The tree part of one simulation on a tree shared by threads, without locks (Enzenberger &
    Mueller 2009): the thread counts itself into `nodes.arrivals` of every node it reaches (its
    virtual loss, reverted by `backup_shared`), selects by `select_child_shared` and stops at
    the first node that is terminal, or whose expansion the tree refused, or that it is the
    first to reach (that node is evaluated by the rollout, as in `run_simulations`). The second
    thread to reach a leaf (the first at the root) expands it and goes on to a child; a later
    one that finds the expansion still in progress waits for it (`expand_or_wait`). So every
    node is evaluated once itself and expanded once, whatever the threads do, and one thread
    grows exactly the tree of `run_simulations`. With `table.on`, each node gets its table entry
    (`game.key`) on its first arrival. Leaves the leaf's state in `scratch.state`, the path in
    `scratch.path[0 .. depth]` and its actions in `scratch.moves[0 .. depth - 1]`; adds the
    work counts to `scratch.phases` and, when `sampled`, the cycles spent selecting, expanding
    and waiting for other threads to `scratch.phase_cycles`.

    Returns:
        (depth, ended): the leaf's depth in plies below the root, and whether the move into it
        ended the game.
    """
    started = read_cycles() if sampled else 0
    expanding = waiting = 0
    state = scratch.state
    for i in range(state.shape[0]):
        state[i] = root_state[i]
    node = depth = 0
    ended = False
    scratch.path[0] = 0
    earlier = fetch_add(nodes.arrivals, 0, 1)
    if table.on and table.entry[0] < 0:
        find_entry(table, 0, state, shared, game.key)
    own_expansion = False
    # The first to arrive at a leaf evaluates it, even if a later arrival has expanded it
    # meanwhile (the root is expanded by its first arrival).
    while not (ended or (node != 0 and earlier == 0)):
        start = load_acquire(nodes.first_child, node)
        if start < 0:
            if start == REFUSED:
                break
            start, created, spent, waited = expand_or_wait(nodes, scratch, game, node, earlier,
                                                           options.rave_k > 0.0, sampled)
            expanding += spent
            waiting += waited
            scratch.phases[EXPAND] += created
            own_expansion = created > 0
            if start < 0:
                break
        node = select_child_shared(nodes, table, node, start, nodes.num_children[node],
                                   options)
        ended = step(nodes, scratch, game, node, depth)
        depth += 1
        # (The step into a child of the thread's own new expansion is no selection step, as in
        # `run_simulations`; alone, the thread is that child's first arrival and evaluates it.)
        if not own_expansion:
            scratch.phases[SELECT] += 1
        own_expansion = False
        earlier = fetch_add(nodes.arrivals, node, 1)
        if table.on and table.entry[node] < 0:
            find_entry(table, node, state, shared, game.key)
    raise_max_depth(nodes.counters, depth)
    if sampled:
        scratch.phase_cycles[SELECT] += read_cycles() - started - expanding - waiting
        scratch.phase_cycles[EXPAND] += expanding
        scratch.phase_cycles[WAIT] += waiting
    return depth, ended


@njit(nogil=True, _nrt=False)
def backup_shared(nodes, table, scratch, depth, plies, value, stamp, players, record):
    """The backup of one simulation on a tree shared by threads, with atomic additions: `value`
    (for the player who moved into the leaf `scratch.path[depth]`) goes to every node of
    `path[0 .. depth]` with the sign flipped at every ply for two players (a node's visit
    reverts the virtual loss of its arrival), with `table.on` each node's table entry gets the
    same update, and with `record` the AMAF statistics are updated from
    `scratch.moves[0 .. plies - 1]` as in `run_simulations` (`scratch.seen` marks `stamp`).
    Returns the backup steps (depth + 1)."""
    seen = scratch.seen
    moves = scratch.moves
    if record:
        for ply in range(depth, plies):
            seen[ply % players, moves[ply]] = stamp
    for d in range(depth, -1, -1):
        node = scratch.path[d]
        fetch_add(nodes.value_sum, node, value)
        fetch_add(nodes.visits, node, 1)
        if table.on:
            position = table.entry[node]
            if position >= 0:
                fetch_add(table.value_sum, position, value)
                fetch_add(table.visits, position, 1)
        if players == 2:
            value = -value
        # The leaf's children, if another thread has made some meanwhile, took no part.
        if record and d < depth:
            side = d % players
            seen[side, moves[d]] = stamp
            start = nodes.first_child[node]
            for child in range(start, start + nodes.num_children[node]):
                if seen[side, nodes.action[child]] == stamp:
                    fetch_add(nodes.amaf_value_sum, child, value)
                    fetch_add(nodes.amaf_visits, child, 1)
    return depth + 1


@njit(nogil=True, inline="always")
def claim(shared):
    """Claims one simulation (a compare-and-swap on `shared[CLAIMED]`); False once
    `shared[TARGET]` simulations are claimed."""
    taken = load_relaxed(shared, CLAIMED)
    while taken < shared[TARGET]:
        found = compare_exchange(shared, CLAIMED, taken, taken + 1)
        if found == taken:
            return True
        taken = found
    return False


@njit(nogil=True, _nrt=False)
def run_shared_simulations(nodes, table, shared, options, scratch, game, root_state,
                           sample_mask):
    """One thread of tree parallelisation: claims simulations until `shared[TARGET]` is reached
    (`claim`), each one `descend`, a rollout and `backup_shared` on the tree all threads share;
    the transposition table is guarded by the lock `shared[LOCK]`. `scratch` (its counters and
    random state included) belongs to the thread; `sample_mask` as in `run_simulations`."""
    record = options.rave_k > 0.0
    timing = sample_mask >= 0
    cycles = scratch.phase_cycles
    clear_seen(scratch.seen)
    claimed = 0
    while claim(shared):
        sampled = timing and (claimed & sample_mask) == 0
        claimed += 1
        depth, ended = descend(nodes, table, shared, options, scratch, game, root_state, sampled)
        started = read_cycles() if sampled else 0
        value, plies = evaluate(game, scratch, depth, ended, record, options.players)
        scratch.phases[ROLLOUT] += plies - depth
        if sampled:
            clock = read_cycles()
            cycles[ROLLOUT] += clock - started
            started = clock
        scratch.phases[BACKUP] += backup_shared(nodes, table, scratch, depth, plies, value,
                                                claimed, options.players, record)
        if sampled:
            cycles[BACKUP] += read_cycles() - started
            cycles[TIMED] += 1


# Cached on disk as `run_simulations` is (see `kernel_cache`).
kernel_cache.enable(run_shared_simulations)
