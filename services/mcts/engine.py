"""The general search core: UCT or PUCT over any game module, with progressive widening, RAVE,
root Dirichlet noise and a temperature for the final move, compiled with numba.

One simulation descends from the root by the selection rule (`services.mcts.selection`), expands a
leaf the second time it is reached (the root at once), evaluates it with one rollout to the end
of the game (the game's own rollout policy when it has one, else uniformly random moves), and
backs the result up (sign flipped at every ply for two-player games: each node stores values for
the player who moved into it).

- UCT: UCB1 `Q + c * sqrt(ln N / n)`, unvisited children first in child order.
  Plain UCT (no RAVE, no widening) takes a fast path, `select_uct`: the same choice to the bit,
  with eight children scored at once and chosen without a branch (`services.mcts.simd`), ln N
  from a table for N < 65,536, and the next level's rows prefetched. Its backup runs from the
  root down, so that the next descent's first loads do not wait on stores still in flight.
- PUCT: `Q + c_puct * P * sqrt(N) / (1 + n)` (AlphaZero), Q = 0 for an unvisited child, priors from
  the game's `priors` function (uniform for the built-in games), optionally mixed with Dirichlet
  noise at the root, `(1 - epsilon) * P + epsilon * Dir(alpha)` (Silver et al. 2017).
- Progressive widening (Coulom 2007; Couetoux et al. 2011): a node visited N times selects among
  its first `ceil(k * N^alpha)` children only; children are stored by decreasing prior (ties in the
  game's action order), which is the order in which they are introduced.
- RAVE / AMAF (Gelly & Silver 2007): each child also keeps all-moves-as-first statistics (the
  simulations through its parent in which its action was played later by the same player, in the
  tree or the rollout; first occurrence only), and Q becomes `(1 - beta) * Q + beta * Q_amaf` with
  the hand-selected schedule `beta = sqrt(k / (3 N + k))` (`selection.rave_beta`); an unvisited
  child with AMAF statistics uses Q_amaf alone (and n = 1 in the UCB1 term), one without them is
  tried first under UCT.

Time per phase: the kernels count work (selection steps: edges descended; expanded nodes: children
created; rollout plies; backup steps: nodes updated) and time a sample of simulations: one in
TIMING_SAMPLE_EVERY (16) reads the processor's cycle counter (`services.mcts.cycle_clock`, RDTSC, a
few nanoseconds) at the boundaries of its phases. Each thread's wall time inside the kernel is
measured (`time.perf_counter` around every kernel call) and split between the phases in the
proportions of its sampled cycles; `Grown.phase_seconds` is the mean of these splits over the
threads, so its sum is the mean thread's measured kernel time and never exceeds the search's wall
time. (Scaling the sampled cycles by simulations / sampled simulations instead, as before, charged
a sampled simulation's preemption on a busy machine sixteen times over: selection came out at 4x
the elapsed time.) The split's relative error from sampling is about 1 / sqrt(sampled
simulations) for a phase of even cost; a preempted thread charges the wait to the phase it was
in. Five reads per sixteen
simulations cost under 1% of the loop (C4 from the empty board, interleaved against the kernel
without them: within the noise, about 1%). Where the
counter is not usable (not x86-64) nothing is timed and the times are 0.

The kernel's random generator is xorshift64* seeded from `seed` (`services.mcts.xorshift`);
Dirichlet noise and the temperature draw use numpy's PCG64 seeded from `seed`: the same seed and
inputs give the same tree and the same move (with no deadline or stop event, and for tree
parallelisation with one thread only).

Parallel search (Chaslot, Winands & van den Herik 2008, "Parallel Monte-Carlo Tree Search"). The
kernels release the GIL, so threads run in parallel; `grow_parallel` offers two of the paper's
methods. Root parallelisation: independent trees with seeds `seed, seed + 1, ...`, merged at the
root by the caller (reproducible). Tree parallelisation (`grow_tree_parallel`): all threads grow
one tree, each with its own rollouts (seed `seed + i`), and every simulation in flight through a
node counts there as a visit that lost, the paper's virtual loss, so that threads spread over
different lines instead of all following the best one. Numba has no atomics on CPU arrays, so
the shared-tree kernels use LLVM's (`services.mcts.atomics`) and take no lock on the tree, as in
Enzenberger & Mueller (2009, "A lock-free multithreaded Monte-Carlo tree search algorithm"):
    - a thread counts itself into `arrivals[node]` (an atomic fetch-and-add) at every node it
      reaches; arrivals minus visits is the node's virtual loss, and selection treats a child's
      arrivals as its n and the losses as results of -1 (`select_child_shared`);
    - the value returned by that fetch-and-add orders the threads at a leaf: the first evaluates
      the leaf by a rollout, the second expands it (children's rows claimed by compare-and-swap
      on the node counter, written, then published by a release store of `first_child`) and
      any later one waits for the publication; so each node is evaluated by itself once and
      expanded once, exactly as in the sequential kernel, and a node's visits equal its
      children's plus its own, whatever the interleaving;
    - the backup adds visits and values with atomic additions (no update is lost), which also
      reverts the virtual loss: after the search arrivals equal visits everywhere.
Selection reads statistics that other threads are updating; each read sees a value from before
or after an update (aligned words), which only perturbs the choice as virtual loss does. With
one thread, arrivals equal visits whenever a choice is made, and the tree is bit for bit the
sequential kernel's. With more, the interleaving decides the tree: it is not reproducible.
Chaslot et al. judge a parallel search by its strength-speedup (how many times more simulations
the sequential search needs to play as well); `bench/mcts_parallel.py` measures it on Pons'
positions.

Transposition table (`SearchConfig.transpositions`, off by default;
`services.mcts.transpositions`): the tree stays a tree (its invariants and root statistics are
unchanged), and every node also points, from its first visit, to an entry of a table keyed by the
game's `key` (an injective code of the position), which collects the results of all simulations
through that position by any path. Selection then uses the position's mean as a child's Q while the
exploration term keeps the tree's counts of the edge and its parent, in the manner of Childs,
Brodeur & Kocsis (2008, "Transpositions and move groups in Monte Carlo tree search") for positions
reached by several move orders. `Grown.transposition_hits` counts the nodes that found their
position already in the table. The table runs in the shared-tree kernel (one thread when not
tree-parallel), whose atomic updates and the table's look-ups (under a spin lock,
`services.mcts.spinlock`) make a simulation slower than the sequential kernel's; hence off by
default.

A deadline or a stop event is checked every CHUNK_SIMULATIONS simulations.

The game's numba functions are passed to the kernel as arguments; numba types each one by its
identity and compiles one specialisation of the kernel per game, with the calls inlined, so a game
module costs no run-time dispatch. The kernel runs without reference counting (numba's `_nrt=False`
option: all its arrays come from the caller): the atomic reference counts of the arrays handed to
the inlined game functions would otherwise take about a third of its time. Numba cannot reuse its
on-disk cache for a kernel typed by function arguments, so each process compiles the kernel once
per game on its first search (seconds; services warm it up before they report SERVING).
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from services.mcts.atomics import (
    compare_exchange,
    fetch_add,
    load_acquire,
    load_relaxed,
    store_release,
)
from services.mcts.cycle_clock import AVAILABLE as CLOCK_AVAILABLE
from services.mcts.cycle_clock import read_cycles
from services.mcts.game import MAX_ACTIONS, Game
from services.mcts.prefetch import prefetch
from services.mcts.root import add_dirichlet_noise, sample_by_temperature
from services.mcts.selection import (
    PUCT,
    UCT,
    puct,
    rave_beta,
    ucb1_from_log,
    widened_children,
)
from services.mcts.settings import UCT_EXPLORATION
from services.mcts.simd import LANES, ucb1_lanes
from services.mcts.spinlock import SPINS_BEFORE_YIELD, acquire, pause, release
from services.mcts.transpositions import TranspositionTable, find_or_insert
from services.mcts.tree import MAX_VISITS, MIN_CAPACITY, Tree, TreePool
from services.mcts.xorshift import random_below, rng_state

DEFAULT_MAX_NODES = 1_000_000
"""Default node capacity of one tree."""
CHUNK_SIMULATIONS = 4096
"""Simulations per kernel call when a deadline or a stop event has to be checked in between."""

SELECT, EXPAND, ROLLOUT, BACKUP = 0, 1, 2, 3
"""Indices of the phase work counters and of the phase times (see the module doc)."""
WAIT = 4
"""Index of the time spent waiting for another thread: on a shared tree, for an expansion in
progress (tree parallelisation; the transposition table's lock is counted in selection)."""
TIMED = 5
"""Index, in the kernels' cycle counters, of the number of simulations timed."""
TIMING_SAMPLE_EVERY = 16
"""One simulation in this many (a power of two) is timed phase by phase (see the module doc)."""
PARALLELISMS = ("root", "tree")
"""Values of `SearchConfig.parallelism`."""
UNEXPANDED = -1
"""`first_child` of a node without children."""
REFUSED = -2
"""`first_child` of a node a shared tree could not expand (full, or no legal action); it reads
as UNEXPANDED again once the search is over."""


@dataclass(frozen=True)
class SearchConfig:
    """Options of `search`.

    Attributes:
        rule: "uct" or "puct".
        exploration: c of UCB1 or c_puct of PUCT, >= 0.
        widening_k, widening_alpha: progressive widening `ceil(k * N^alpha)`; None = off.
        rave_k: k of the RAVE schedule `sqrt(k / (3N + k))`; None = off.
        dirichlet_alpha, dirichlet_epsilon: root noise on the priors (PUCT); None = off.
        temperature: 0 plays the most visited action; T > 0 samples an action with probability
            proportional to `visits ** (1 / T)`.
        max_nodes: node capacity of the tree (at least MIN_CAPACITY); when full the search keeps
            simulating from the leaves it has and reports `tree_full`.
        seed: seeds the kernel, the noise and the temperature draw.
        parallelism: how `grow_parallel` and `search` use more than one thread: "root" (one
            independent tree per thread, merged at the root) or "tree" (all threads on one
            shared tree with virtual loss); see the module doc.
        transpositions: share statistics between tree nodes of the same position through a
            transposition table (the game needs a `key`); off by default (see the module doc).
    """

    rule: str = "uct"
    exploration: float = UCT_EXPLORATION
    widening_k: float | None = None
    widening_alpha: float = 0.5
    rave_k: float | None = None
    dirichlet_alpha: float | None = None
    dirichlet_epsilon: float = 0.25
    temperature: float = 0.0
    max_nodes: int = DEFAULT_MAX_NODES
    seed: int = 0
    parallelism: str = "root"
    transpositions: bool = False


@dataclass(frozen=True)
class Grown:
    """A tree after `grow` or `grow_tree_parallel`.

    Attributes:
        tree: the `Tree` arrays.
        amaf_visits, amaf_value_sum: AMAF statistics per node (int64 [N], float64 [N], same
            layout as `Tree.visits` / `Tree.value_sum`).
        phases: int64 [4], work counters indexed by SELECT, EXPAND, ROLLOUT, BACKUP.
        simulations: simulations run (fewer than asked when a deadline or a stop event ended the
            search).
        phase_seconds: float64 [5], wall seconds spent in selection, expansion, rollout, backup
            and waiting for other threads (indexed by SELECT .. WAIT): each thread's measured
            kernel time split by its sampled phase shares, mean over the threads (the sum never
            exceeds the wall time of the search); all 0 when no simulation was timed (see the
            module doc).
        timed_simulations: simulations timed phase by phase (about 1 in TIMING_SAMPLE_EVERY).
        threads: threads that grew this tree (more than 1 only with tree parallelisation).
        virtual_loss: int64 [N], virtual losses still applied per node, arrivals minus visits
            (all 0 after a search: every one is reverted by its backup); None for `grow`'s
            sequential kernel.
        table: the transposition table, None when `SearchConfig.transpositions` is off.
        entry: int32 [N], each node's table entry (-1 for nodes never reached); None without a
            table.
    """

    tree: Tree
    amaf_visits: np.ndarray
    amaf_value_sum: np.ndarray
    phases: np.ndarray
    simulations: int
    phase_seconds: np.ndarray
    timed_simulations: int
    threads: int = 1
    virtual_loss: np.ndarray | None = None
    table: TranspositionTable | None = None
    entry: np.ndarray | None = None

    @property
    def transposition_hits(self) -> int:
        """Nodes whose position was already in the table when first reached (0 without one)."""
        return 0 if self.table is None else self.table.hits


@dataclass(frozen=True)
class GameSearchResult:
    """Result of `search`, for the player to move at the root; A = the game's num_actions.

    Attributes:
        action: the action chosen (most visited when temperature is 0; ties: higher value, then
            lower action).
        visits: int64 [A], root visits per action (0 for an illegal action).
        values: float64 [A], mean result per action for the player to move, nan when unvisited.
        priors: float64 [A], root priors after noise (0 for an illegal action).
        root_value: mean result over the root's children, for the player to move.
        simulations: simulations run.
        tree_size: nodes in the tree; max_depth: deepest node, plies below the root.
        tree_full: True when an expansion was refused for lack of room.
        selection_steps, expanded_nodes, rollout_plies, backup_steps: phase work counts.
        elapsed_s: wall-clock seconds; simulations_per_second: simulations / elapsed_s.
        selection_s, expansion_s, rollout_s, backup_s, wait_s: wall seconds per phase, mean over
            the threads (`Grown.phase_seconds`; their sum is at most `elapsed_s`); 0 when
            `timed_simulations` is 0.
        timed_simulations: simulations timed phase by phase.
        transposition_hits: table look-ups that found their position (0 without a table).
        threads: threads used; parallelism: "root" or "tree".
    """

    action: int
    visits: np.ndarray
    values: np.ndarray
    priors: np.ndarray
    root_value: float
    simulations: int
    tree_size: int
    max_depth: int
    tree_full: bool
    selection_steps: int
    expanded_nodes: int
    rollout_plies: int
    backup_steps: int
    elapsed_s: float
    simulations_per_second: float
    selection_s: float = 0.0
    expansion_s: float = 0.0
    rollout_s: float = 0.0
    backup_s: float = 0.0
    wait_s: float = 0.0
    timed_simulations: int = 0
    transposition_hits: int = 0
    threads: int = 1
    parallelism: str = "root"


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
    """`services.mcts.simd.ucb1_lanes` in scalar code, the same results, for the last rows of
    the arrays, where an 8-wide load would read past their end."""
    for i in range(count):
        if visits[start + i] == 0:
            return i, 0, -np.inf
    best = 0
    best_score = -np.inf
    for i in range(count):
        n = visits[start + i]
        score = value_sum[start + i] / n + exploration * math.sqrt(log_parent_n / n)
        if score > best_score:
            best_score = score
            best = i
    return LANES, best, best_score


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_uct(node, visits, value_sum, first_child, num_children, action, exploration):
    """`select_child` for plain UCT (no RAVE, no widening), the same choice computed faster:
    the first unvisited child, else the first child of highest UCB1 score
    `value_sum / n + c * sqrt(ln N / n)`, in the same operations (so to the same bits) but eight
    children at a time in SIMD instructions, without a branch (`services.mcts.simd`). It
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
def select_child(node, visits, value_sum, prior, first_child, num_children, amaf_visits,
                 amaf_value_sum, rule, exploration, widening_k, widening_alpha, rave_k):
    """Index of the child of `node` (expanded) chosen by the rule; see the module doc."""
    start = first_child[node]
    parent_n = visits[node]
    count = widened_children(num_children[node], parent_n, widening_k, widening_alpha)
    if rule == UCT and rave_k <= 0.0:
        # Plain UCT, the common case: the first unvisited child, else the best UCB1 score.
        log_parent_n = math.log(max(parent_n, 1))
        best = start
        best_score = -np.inf
        for child in range(start, start + count):
            n = visits[child]
            if n == 0:
                return child
            score = ucb1_from_log(value_sum[child] / n, n, log_parent_n, exploration)
            if score > best_score:
                best_score = score
                best = child
        return best
    beta = rave_beta(parent_n, rave_k) if rave_k > 0.0 else 0.0
    log_parent_n = math.log(max(parent_n, 1)) if rule == UCT else 0.0
    best = start
    best_score = -np.inf
    for child in range(start, start + count):
        n = visits[child]
        q = value_sum[child] / n if n > 0 else 0.0
        if rave_k > 0.0 and amaf_visits[child] > 0:
            amaf_q = amaf_value_sum[child] / amaf_visits[child]
            q = amaf_q if n == 0 else (1.0 - beta) * q + beta * amaf_q
        elif rule == UCT and n == 0:
            return child
        if rule == PUCT:
            score = puct(q, n, prior[child], parent_n, exploration)
        else:
            score = ucb1_from_log(q, max(n, 1), log_parent_n, exploration)
        if score > best_score:
            best_score = score
            best = child
    return best


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
def write_children(node, size, count, actions, action_priors, visits, value_sum, prior,
                   first_child, num_children, parent, action, terminal, amaf_visits,
                   amaf_value_sum, rave):
    """Writes rows `size .. size + count - 1` as the unexpanded children of `node` for `actions`
    with `action_priors`; the AMAF statistics are reset only when `rave` is set (otherwise never
    read: their untouched zero pages cost no memory)."""
    for i in range(count):
        child = size + i
        visits[child] = 0
        value_sum[child] = 0.0
        if rave:
            amaf_visits[child] = 0
            amaf_value_sum[child] = 0.0
        prior[child] = action_priors[i]
        first_child[child] = UNEXPANDED
        num_children[child] = 0
        parent[child] = node
        action[child] = actions[i]
        terminal[child] = 0


@njit(cache=True, nogil=True, inline="always")
def expand(node, count, actions, action_priors, visits, value_sum, prior, first_child,
           num_children, parent, action, terminal, counters, amaf_visits, amaf_value_sum, rave):
    """Creates the children of `node` for its `count` legal `actions` (int64 [>= count]) with
    their `action_priors` (float64 [>= count]), by decreasing prior; sorts both in place
    (`sort_by_prior`, `write_children`).

    Returns:
        the number of children created; 0 when the arrays are full (`counters[2]` is set then).
    """
    size = counters[0]
    if size + count > visits.shape[0]:
        counters[2] = 1
        return 0
    sort_by_prior(actions, action_priors, count)
    write_children(node, size, count, actions, action_priors, visits, value_sum, prior,
                   first_child, num_children, parent, action, terminal, amaf_visits,
                   amaf_value_sum, rave)
    counters[0] = size + count
    first_child[node] = size
    num_children[node] = count
    return count


@njit(nogil=True, inline="always")
def uniform_rollout(state, rng, moves, ply, actions, legal_actions, play, outcome):
    """The rollout of a game without its own (see `services.mcts.game`): uniformly random legal
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


# No reference counting (`_nrt=False`): every array comes from the caller, and the atomic reference
# counts of the arrays passed to the inlined functions would take a third of the time. Not cached:
# numba's cache never matches a kernel typed by function arguments in a new process (see the
# module doc), it would only pile up files.
# Numpy's error model: the only divisions are by counts checked to be nonzero, and the Python
# model's zero checks would add a branch to each of them.
@njit(nogil=True, _nrt=False, error_model="numpy")
def run_simulations(visits, value_sum, prior, first_child, num_children, parent, action, terminal,
                    counters, amaf_visits, amaf_value_sum, phases, phase_cycles, sample_mask,
                    root_state, simulations, rule, exploration, widening_k, widening_alpha,
                    rave_k, players, rng, state, actions, action_priors, path, moves, seen,
                    legal_actions, play, outcome, priors, rollout):
    """Runs `simulations` simulations in place on a tree whose root holds `root_state` (a state
    whose game goes on); `terminal[node]` is 1 once the move into the node is known to end the
    game. See the module doc for the rules and `Grown` for the arrays. Scratch arrays: `state`
    (like `root_state`), `actions` (int64 [MAX_ACTIONS]), `action_priors` (float64
    [MAX_ACTIONS]), `path` and `moves` (int64 [max_plies + 1]), `seen` (int64 [2, MAX_ACTIONS]).
    Simulation `sim` with `sim & sample_mask == 0` adds the cycle-counter ticks of its phases to
    `phase_cycles` (int64 [6], indexed by SELECT .. BACKUP, and TIMED for the count); a negative
    `sample_mask` times nothing. The game's functions (`rollout` None for uniformly random
    rollouts) are arguments: numba compiles one specialisation per game, with direct calls
    inlined."""
    record = rave_k > 0.0
    plain_uct = rule == UCT and rave_k <= 0.0 and widening_k <= 0.0
    timing = sample_mask >= 0
    selection_steps = 0
    expanded_nodes = 0
    rollout_plies = 0
    backup_steps = 0
    started = selected = expanded = evaluated = 0
    for side in range(seen.shape[0]):
        for a in range(seen.shape[1]):
            seen[side, a] = 0
    for sim in range(simulations):
        sampled = timing and (sim & sample_mask) == 0
        if sampled:
            started = read_cycles()
        for i in range(state.shape[0]):
            state[i] = root_state[i]
        node = 0
        depth = 0
        ended = False
        path[0] = 0
        while num_children[node] > 0:
            if plain_uct:
                node = select_uct(node, visits, value_sum, first_child, num_children, action,
                                  exploration)
            else:
                node = select_child(node, visits, value_sum, prior, first_child, num_children,
                                    amaf_visits, amaf_value_sum, rule, exploration, widening_k,
                                    widening_alpha, rave_k)
            moves[depth] = action[node]
            ended = play(state, action[node])
            terminal[node] = ended
            depth += 1
            path[depth] = node
            selection_steps += 1
        if sampled:
            selected = read_cycles()
        if not ended and (node == 0 or visits[node] > 0):
            count = legal_actions(state, actions)
            created = 0
            if count > 0:
                priors(state, actions, count, action_priors)
                created = expand(node, count, actions, action_priors, visits, value_sum,
                                 prior, first_child, num_children, parent, action, terminal,
                                 counters, amaf_visits, amaf_value_sum, record)
            if created > 0:
                expanded_nodes += created
                node = select_child(node, visits, value_sum, prior, first_child,
                                    num_children, amaf_visits, amaf_value_sum, rule,
                                    exploration, widening_k, widening_alpha, rave_k)
                moves[depth] = action[node]
                ended = play(state, action[node])
                terminal[node] = ended
                depth += 1
                path[depth] = node
        if depth > counters[1]:
            counters[1] = depth
        if sampled:
            expanded = read_cycles()
        # Evaluation: one rollout; `value` is for the player who made the last move.
        plies = depth
        if ended:
            value = outcome(state, rng)
        else:
            if rollout is None:
                value, plies = uniform_rollout(state, rng, moves, depth, actions, legal_actions,
                                               play, outcome)
            else:
                value, plies = rollout(state, rng, moves, depth, record)
        rollout_plies += plies - depth
        if sampled:
            evaluated = read_cycles()
        # Now for the player who moved into `node`.
        if players == 2 and (plies - depth) % 2 == 1:
            value = -value
        # Backup, with the AMAF update of every child of a path node whose action its player
        # played at that ply or later.
        stamp = sim + 1
        if record:
            for ply in range(depth, plies):
                seen[ply % players, moves[ply]] = stamp
        else:
            # From the root down: the next simulation reads the top levels first, and the
            # stores to them, made first, have left the store buffer by then (a vector load
            # over a store still in flight waits for it).
            if players == 2 and depth % 2 == 1:
                value = -value
            for d in range(depth + 1):
                node = path[d]
                visits[node] += 1
                value_sum[node] += value
                if players == 2:
                    value = -value
            backup_steps += depth + 1
        for d in range(depth if record else -1, -1, -1):
            node = path[d]
            visits[node] += 1
            value_sum[node] += value
            backup_steps += 1
            if players == 2:
                value = -value
            if record and num_children[node] > 0:
                side = d % players
                if d < depth:
                    seen[side, moves[d]] = stamp
                # `value` is now for the player to move at `node`, the mover into its
                # children.
                start = first_child[node]
                for child in range(start, start + num_children[node]):
                    if seen[side, action[child]] == stamp:
                        amaf_visits[child] += 1
                        amaf_value_sum[child] += value
        if sampled:
            phase_cycles[0] += selected - started
            phase_cycles[1] += expanded - selected
            phase_cycles[2] += evaluated - expanded
            phase_cycles[3] += read_cycles() - evaluated
            phase_cycles[5] += 1
    phases[0] += selection_steps
    phases[1] += expanded_nodes
    phases[2] += rollout_plies
    phases[3] += backup_steps


@njit(cache=True, nogil=True, inline="always")
def select_child_shared(node, start, count, visits, value_sum, prior, amaf_visits,
                        amaf_value_sum, arrivals, entry, entry_visits, entry_value_sum,
                        shared_values, rule, exploration, widening_k, widening_alpha, rave_k):
    """`select_child` on a tree shared by threads, for a thread that has arrived at `node`
    (children `start .. start + count - 1`): a child's n is its arrivals (visits plus
    simulations in flight through it) and each in-flight simulation counts as a loss (-1 for the
    mover into the child): virtual loss; the parent's N is its arrivals but the thread's own.
    With `shared_values`, a child's Q is its position's mean from the transposition table
    (`entry` >= 0) while N and n stay the tree's (see the module doc). With nothing in flight and
    no table it chooses exactly as `select_child`. Reads that race with other threads' updates
    see each value either before or after an update (aligned 4- and 8-byte words)."""
    parent_n = arrivals[node] - 1
    count = widened_children(count, parent_n, widening_k, widening_alpha)
    beta = rave_beta(parent_n, rave_k) if rave_k > 0.0 else 0.0
    log_parent_n = math.log(max(parent_n, 1)) if rule == UCT else 0.0
    best = start
    best_score = -np.inf
    for child in range(start, start + count):
        n = arrivals[child]
        q = 0.0
        if n > 0:
            lost = max(n - visits[child], 0)
            position = entry[child] if shared_values else -1
            # (A position's count can lag its node's while another thread backs up.)
            shared_n = entry_visits[position] + lost if position >= 0 else 0
            if shared_n > 0:
                q = (entry_value_sum[position] - lost) / shared_n
            else:
                q = (value_sum[child] - lost) / n
        if rave_k > 0.0 and amaf_visits[child] > 0:
            amaf_q = amaf_value_sum[child] / amaf_visits[child]
            q = amaf_q if n == 0 else (1.0 - beta) * q + beta * amaf_q
        elif rule == UCT and n == 0:
            return child
        if rule == PUCT:
            score = puct(q, n, prior[child], parent_n, exploration)
        else:
            score = ucb1_from_log(q, max(n, 1), log_parent_n, exploration)
        if score > best_score:
            best_score = score
            best = child
    return best


@njit(nogil=True, _nrt=False)
def expand_shared(node, state, actions, action_priors, visits, value_sum, prior, first_child,
                  num_children, parent, action, terminal, counters, amaf_visits, amaf_value_sum,
                  rave, legal_actions, priors):
    """`expand` for a tree shared by threads, called by the one thread that expands `node`: the
    children's rows are claimed with a compare-and-swap on `counters[0]`, written, and published
    by a release store of `first_child[node]` (after `num_children[node]`), so that a thread
    that reads `first_child[node] >= 0` with acquire ordering sees every child. A node that gets
    no children (the tree is full: `counters[2]` is set; or no legal action) is marked REFUSED
    in `first_child`. Returns the children created."""
    count = legal_actions(state, actions)
    if count == 0:
        store_release(first_child, node, REFUSED)
        return 0
    priors(state, actions, count, action_priors)
    sort_by_prior(actions, action_priors, count)
    while True:
        size = load_relaxed(counters, 0)
        if size + count > visits.shape[0]:
            counters[2] = 1
            store_release(first_child, node, REFUSED)
            return 0
        if compare_exchange(counters, 0, size, size + count) == size:
            break
    write_children(node, size, count, actions, action_priors, visits, value_sum, prior,
                   first_child, num_children, parent, action, terminal, amaf_visits,
                   amaf_value_sum, rave)
    num_children[node] = count
    store_release(first_child, node, size)
    return count


@njit(nogil=True, inline="always")
def _find_entry(node, state, entry, slot_key, slot_entry, table_counters, table_shift, capacity,
                table_lock, key):
    """Gives `node` its transposition-table entry (the table is guarded by the lock
    `table_lock[0]`; each node is looked up once)."""
    acquire(table_lock, 0)
    if entry[node] < 0:
        entry[node] = find_or_insert(key(state), slot_key, slot_entry, table_counters, capacity,
                                     table_shift)
    release(table_lock, 0)


@njit(nogil=True, _nrt=False)
def descend(visits, value_sum, prior, first_child, num_children, parent, action, terminal,
            counters, amaf_visits, amaf_value_sum, arrivals, entry, slot_key, slot_entry,
            entry_visits, entry_value_sum, table_counters, table_shift, transpositions,
            table_lock, phases, phase_cycles, sampled, root_state, rule, exploration,
            widening_k, widening_alpha, rave_k, state, actions, action_priors, path, moves,
            legal_actions, play, priors, key):
    """The tree part of one simulation on a tree shared by threads, without locks (Enzenberger &
    Mueller 2009): the thread counts itself into `arrivals` of every node it reaches (its
    virtual loss, reverted by `backup_shared`), selects by `select_child_shared` and stops at
    the first node that is terminal, or whose expansion the tree refused, or that it is the
    first to reach (that node is evaluated by the rollout, as in `run_simulations`). The second
    thread to reach a leaf (the first at the root) expands it (`expand_shared`) and goes on to a
    child; a later one that finds the expansion still in progress waits for it. So every node
    is evaluated once itself and expanded once, whatever the threads do, and one thread grows
    exactly the tree of `run_simulations`. With `transpositions`, each node gets its table entry
    (`key`) on its first arrival. Leaves the leaf's state in `state`, the path's nodes in
    `path[0 .. depth]` and its actions in `moves[0 .. depth - 1]`; adds the work counts to
    `phases` and, when `sampled`, the cycles spent selecting, expanding and waiting for other
    threads to `phase_cycles`.

    Returns:
        (depth, ended): the leaf's depth in plies below the root, and whether the move into it
        ended the game.
    """
    started = read_cycles() if sampled else 0
    expanding = 0
    waiting = 0
    capacity = entry_visits.shape[0]
    for i in range(state.shape[0]):
        state[i] = root_state[i]
    node = 0
    depth = 0
    ended = False
    path[0] = 0
    earlier = fetch_add(arrivals, 0, 1)
    if transpositions and entry[0] < 0:
        _find_entry(0, state, entry, slot_key, slot_entry, table_counters, table_shift, capacity,
                    table_lock, key)
    own_expansion = False
    while True:
        # The first to arrive at a leaf evaluates it, even if a later arrival has expanded it
        # meanwhile (the root is expanded by its first arrival).
        if ended or (node != 0 and earlier == 0):
            break
        start = load_acquire(first_child, node)
        if start < 0:
            if start == REFUSED:
                break
            if earlier == (0 if node == 0 else 1):
                clock = read_cycles() if sampled else 0
                created = expand_shared(node, state, actions, action_priors, visits, value_sum,
                                        prior, first_child, num_children, parent, action,
                                        terminal, counters, amaf_visits, amaf_value_sum,
                                        rave_k > 0.0, legal_actions, priors)
                if sampled:
                    expanding += read_cycles() - clock
                phases[1] += created
                own_expansion = created > 0
            else:
                clock = read_cycles() if sampled else 0
                spins = 0
                while load_acquire(first_child, node) == UNEXPANDED:
                    spins += 1
                    if spins == SPINS_BEFORE_YIELD:
                        pause()
                        spins = 0
                if sampled:
                    waiting += read_cycles() - clock
            start = load_acquire(first_child, node)
            if start < 0:
                break
        node = select_child_shared(node, start, num_children[node], visits, value_sum, prior,
                                   amaf_visits, amaf_value_sum, arrivals, entry, entry_visits,
                                   entry_value_sum, transpositions, rule, exploration,
                                   widening_k, widening_alpha, rave_k)
        moves[depth] = action[node]
        ended = play(state, action[node])
        terminal[node] = ended
        depth += 1
        path[depth] = node
        # (The step into a child of the thread's own new expansion is no selection step, as in
        # `run_simulations`; alone, the thread is that child's first arrival and evaluates it.)
        if not own_expansion:
            phases[0] += 1
        own_expansion = False
        earlier = fetch_add(arrivals, node, 1)
        if transpositions and entry[node] < 0:
            _find_entry(node, state, entry, slot_key, slot_entry, table_counters, table_shift,
                        capacity, table_lock, key)
    deepest = load_relaxed(counters, 1)
    while depth > deepest:
        found = compare_exchange(counters, 1, deepest, depth)
        if found == deepest:
            break
        deepest = found
    if sampled:
        phase_cycles[0] += read_cycles() - started - expanding - waiting
        phase_cycles[1] += expanding
        phase_cycles[4] += waiting
    return depth, ended


@njit(nogil=True, _nrt=False)
def backup_shared(visits, value_sum, first_child, num_children, action, amaf_visits,
                  amaf_value_sum, entry, entry_visits, entry_value_sum, path, depth, moves, plies,
                  value, seen, stamp, players, record, shared_values):
    """The backup of one simulation on a tree shared by threads, with atomic additions: `value`
    (for the player who moved into the leaf `path[depth]`) goes to every node of
    `path[0 .. depth]` with the sign flipped at every ply for two players (a node's visit
    reverts the virtual loss of its arrival), with `shared_values` each node's table entry gets
    the same update, and with `record` the AMAF statistics are updated from
    `moves[0 .. plies - 1]` as in `run_simulations` (`seen` and `stamp` as there). Returns the
    backup steps (depth + 1)."""
    if record:
        for ply in range(depth, plies):
            seen[ply % players, moves[ply]] = stamp
    for d in range(depth, -1, -1):
        node = path[d]
        fetch_add(value_sum, node, value)
        fetch_add(visits, node, 1)
        if shared_values:
            position = entry[node]
            if position >= 0:
                fetch_add(entry_value_sum, position, value)
                fetch_add(entry_visits, position, 1)
        if players == 2:
            value = -value
        # The leaf's children, if another thread has made some meanwhile, took no part.
        if record and d < depth:
            side = d % players
            seen[side, moves[d]] = stamp
            start = first_child[node]
            for child in range(start, start + num_children[node]):
                if seen[side, action[child]] == stamp:
                    fetch_add(amaf_value_sum, child, value)
                    fetch_add(amaf_visits, child, 1)
    return depth + 1


@njit(nogil=True, _nrt=False)
def run_shared_simulations(visits, value_sum, prior, first_child, num_children, parent, action,
                           terminal, counters, amaf_visits, amaf_value_sum, arrivals, entry,
                           slot_key, slot_entry, entry_visits, entry_value_sum, table_counters,
                           table_shift, transpositions, shared, phases, phase_cycles,
                           sample_mask, root_state, rule, exploration, widening_k,
                           widening_alpha, rave_k, players, rng, state, actions, action_priors,
                           path, moves, seen, legal_actions, play, outcome, priors, rollout,
                           key):
    """One thread of tree parallelisation: claims simulations (a compare-and-swap on
    `shared[1]`, simulations claimed by all threads) until `shared[2]` (the target) is reached,
    each one `descend`, a rollout and `backup_shared` on the tree all threads share; the
    transposition table is guarded by the lock `shared[0]`. Tree and table arrays as `descend`;
    `phases`, `phase_cycles`, `rng` and the scratch arrays (as `run_simulations`) belong to the
    thread."""
    record = rave_k > 0.0
    timing = sample_mask >= 0
    for side in range(seen.shape[0]):
        for a in range(seen.shape[1]):
            seen[side, a] = 0
    claimed = 0
    while True:
        taken = load_relaxed(shared, 1)
        while taken < shared[2]:
            seen_value = compare_exchange(shared, 1, taken, taken + 1)
            if seen_value == taken:
                break
            taken = seen_value
        if taken >= shared[2]:
            break
        sampled = timing and (claimed & sample_mask) == 0
        claimed += 1
        depth, ended = descend(visits, value_sum, prior, first_child, num_children, parent,
                               action, terminal, counters, amaf_visits, amaf_value_sum,
                               arrivals, entry, slot_key, slot_entry, entry_visits,
                               entry_value_sum, table_counters, table_shift, transpositions,
                               shared, phases, phase_cycles, sampled, root_state, rule,
                               exploration, widening_k, widening_alpha, rave_k, state, actions,
                               action_priors, path, moves, legal_actions, play, priors, key)
        started = read_cycles() if sampled else 0
        plies = depth
        if ended:
            value = outcome(state, rng)
        elif rollout is None:
            value, plies = uniform_rollout(state, rng, moves, depth, actions, legal_actions,
                                           play, outcome)
        else:
            value, plies = rollout(state, rng, moves, depth, record)
        phases[2] += plies - depth
        if players == 2 and (plies - depth) % 2 == 1:
            value = -value
        if sampled:
            clock = read_cycles()
            phase_cycles[2] += clock - started
            started = clock
        phases[3] += backup_shared(visits, value_sum, first_child, num_children, action,
                                   amaf_visits, amaf_value_sum, entry, entry_visits,
                                   entry_value_sum, path, depth, moves, plies, value, seen,
                                   claimed, players, record, transpositions)
        if sampled:
            phase_cycles[3] += read_cycles() - started
            phase_cycles[5] += 1


def _validate(game: Game, state: np.ndarray, simulations: int, config: SearchConfig) -> None:
    if game.num_actions > MAX_ACTIONS:
        raise ValueError(f"a game may have at most {MAX_ACTIONS} actions")
    if state.shape != (game.state_size,):
        raise ValueError(f"the state must have shape ({game.state_size},)")
    if game.legal_actions(state.astype(np.int64), np.empty(MAX_ACTIONS, dtype=np.int64)) == 0:
        raise ValueError("the game is over: no move to search")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if simulations > MAX_VISITS:
        raise ValueError(f"simulations must be at most {MAX_VISITS} (a tree counts visits in "
                         "int32)")
    if config.rule not in ("uct", "puct"):
        raise ValueError("rule must be 'uct' or 'puct'")
    if not (math.isfinite(config.exploration) and config.exploration >= 0):
        raise ValueError("exploration must be a finite number >= 0")
    if config.widening_k is not None and not (config.widening_k > 0 and
                                              0 <= config.widening_alpha <= 1):
        raise ValueError("widening needs k > 0 and 0 <= alpha <= 1")
    if config.rave_k is not None and not config.rave_k > 0:
        raise ValueError("rave_k must be > 0")
    if config.dirichlet_alpha is not None and not (config.dirichlet_alpha > 0 and
                                                   0 <= config.dirichlet_epsilon <= 1):
        raise ValueError("Dirichlet noise needs alpha > 0 and 0 <= epsilon <= 1")
    if not (math.isfinite(config.temperature) and config.temperature >= 0):
        raise ValueError("temperature must be a finite number >= 0")
    if config.parallelism not in PARALLELISMS:
        raise ValueError("parallelism must be 'root' or 'tree'")
    if config.transpositions and game.key is None:
        raise ValueError(f"the game {game.name!r} has no key: no transposition table")


def _run_chunks(run, simulations: int, deadline: float | None,
                stop: threading.Event | None) -> int:
    """Calls `run(n)` until `simulations` are done or the deadline (time.monotonic seconds) passes
    or `stop` is set, checked every CHUNK_SIMULATIONS; returns the simulations done."""
    chunk = simulations if deadline is None and stop is None else CHUNK_SIMULATIONS
    done = 0
    while done < simulations:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if stop is not None and stop.is_set():
            break
        n = min(chunk, simulations - done)
        run(n)
        done += n
    return done


def grow(game: Game, state: np.ndarray, simulations: int,
         config: SearchConfig = SearchConfig(), *, deadline: float | None = None,
         stop: threading.Event | None = None, pool: TreePool | None = None) -> Grown:
    """Builds a search tree from `state` (int64 [S], a game that goes on) with `simulations`
    simulations; see the module doc for the options.

    Args:
        deadline: `time.monotonic()` seconds after which no new chunk of simulations starts.
        stop: an event that stops the search the same way (cancellation).
        pool: where the tree comes from (a new one when None); see `TreePool`.
    Returns:
        the tree; `Grown.simulations` says how many simulations ran (0 when stopped at once).
    Raises:
        ValueError: a finished game, a state of the wrong shape, simulations < 1, or an option out
            of range.
    """
    if config.transpositions:
        return grow_tree_parallel(game, state, simulations, config, 1, deadline=deadline,
                                  stop=stop, pool=pool)
    state = np.ascontiguousarray(state, dtype=np.int64)
    _validate(game, state, simulations, config)
    tree = _new_tree(config, pool)
    capacity = tree.capacity
    amaf_visits = np.zeros(capacity, dtype=np.int64)
    amaf_value_sum = np.zeros(capacity, dtype=np.float64)
    phases = np.zeros(4, dtype=np.int64)
    phase_cycles = np.zeros(6, dtype=np.int64)
    args = (tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
            tree.parent, tree.action, tree.terminal, tree.counters, amaf_visits, amaf_value_sum,
            phases, phase_cycles, _sample_mask(), state)
    options = _options(game, config) + (rng_state(config.seed),)
    scratch = _scratch(game, state)
    kernel_s = np.zeros(1)

    def run(n: int) -> None:
        started = time.perf_counter()
        run_simulations(*args, n, *options, *scratch, game.legal_actions, game.play,
                        game.outcome, game.priors, game.rollout)
        kernel_s[0] += time.perf_counter() - started

    done = _grow_with_noise(tree, run, simulations, config, deadline, stop)
    return Grown(tree=tree, amaf_visits=amaf_visits, amaf_value_sum=amaf_value_sum,
                 phases=phases, simulations=done,
                 phase_seconds=_phase_seconds(phase_cycles[None, :], kernel_s),
                 timed_simulations=int(phase_cycles[TIMED]))


def _new_tree(config: SearchConfig, pool: TreePool | None) -> Tree:
    """The empty tree of a search: `config.max_nodes` nodes, from `pool` when given."""
    capacity = max(config.max_nodes, MIN_CAPACITY)
    return pool.acquire(capacity) if pool is not None else Tree.allocate(capacity)


def _sample_mask() -> int:
    """The kernels' `sample_mask`: time one simulation in TIMING_SAMPLE_EVERY, or none (-1)
    where the cycle counter is not available."""
    return TIMING_SAMPLE_EVERY - 1 if CLOCK_AVAILABLE else -1


def _options(game: Game, config: SearchConfig) -> tuple:
    """The kernels' rule arguments, `rule` .. `players`."""
    return (PUCT if config.rule == "puct" else UCT, float(config.exploration),
            float(config.widening_k or 0.0), float(config.widening_alpha),
            float(config.rave_k or 0.0), game.players)


def _scratch(game: Game, state: np.ndarray) -> tuple:
    """Scratch arrays of one thread of a kernel: the state, legal actions and their priors, the
    path and the actions of a simulation, and the AMAF marks `seen[side, a] == stamp` (`side`
    played `a` at or below the ply being backed up). Each is padded by a cache line on both
    sides, so that threads writing their own scratch never share a line (false sharing)."""
    return (_padded(state.shape, state.dtype), _padded(MAX_ACTIONS, np.int64),
            _padded(MAX_ACTIONS, np.float64), _padded(game.max_plies + 1, np.int64),
            _padded(game.max_plies + 1, np.int64), _padded((2, MAX_ACTIONS), np.int64))


CACHE_LINE = 64
"""Bytes of a cache line (x86-64), the padding between the threads' private arrays."""


def _padded(shape: int | tuple[int, ...], dtype) -> np.ndarray:
    """A zeroed C-contiguous array of `shape` with CACHE_LINE bytes of unused room before and
    after it."""
    count = int(np.prod(shape))
    pad = -(-CACHE_LINE // np.dtype(dtype).itemsize)
    return np.zeros(count + 2 * pad, dtype=dtype)[pad:pad + count].reshape(shape)


def _grow_with_noise(tree: Tree, run, simulations: int, config: SearchConfig,
                     deadline: float | None, stop: threading.Event | None) -> int:
    """Runs the simulations through `run(n)` in chunks; with Dirichlet noise, the first
    simulation expands the root and the noise then goes on the root's priors. Returns the
    simulations done."""
    done = 0
    if config.dirichlet_alpha is not None:
        done = _run_chunks(run, 1, deadline, stop)
        children = tree.children(0)
        if len(children) > 0:
            add_dirichlet_noise(tree.prior[children.start:children.stop],
                                config.dirichlet_alpha, config.dirichlet_epsilon,
                                np.random.default_rng(config.seed))
    if done < simulations and (done > 0 or config.dirichlet_alpha is None):
        done += _run_chunks(run, simulations - done, deadline, stop)
    return done


def _phase_seconds(phase_cycles: np.ndarray, kernel_s: np.ndarray) -> np.ndarray:
    """float64 [5], seconds per phase (SELECT .. WAIT): each thread's measured kernel time
    (`kernel_s`, float64 [T] seconds) split in the proportions of its sampled cycles
    (`phase_cycles`, int64 [T, >= 5]), then the mean over the T threads. The sum is the mean
    thread's kernel time, at most the search's wall time. Zeros when nothing was timed."""
    cycles = np.maximum(phase_cycles[:, :5], 0).astype(np.float64)
    totals = cycles.sum(axis=1)
    timed = totals > 0
    if not timed.any():
        return np.zeros(5)
    shares = cycles[timed] / totals[timed, None]
    return (shares * kernel_s[timed, None]).sum(axis=0) / len(kernel_s)


@njit(cache=True, nogil=True)
def _no_key(state):
    """The `key` passed to the shared kernel for a game without one (never called: a table
    needs the game's key)."""
    return 0


def grow_tree_parallel(game: Game, state: np.ndarray, simulations: int,
                       config: SearchConfig = SearchConfig(), threads: int = 1, *,
                       deadline: float | None = None,
                       stop: threading.Event | None = None,
                       pool: TreePool | None = None) -> Grown:
    """Tree parallelisation (Chaslot, Winands & van den Herik 2008): `threads` threads (at most
    `simulations`) grow ONE tree with virtual loss, without locks (`descend`, `backup_shared`;
    Enzenberger & Mueller 2009); see the module doc. Thread i draws its rollouts with seed
    `config.seed + i`. With `threads == 1` the tree is the one `grow` builds (bit for bit,
    without a transposition table); with more threads the interleaving of the threads changes
    the tree from run to run.

    Args:
        deadline, stop: as `grow` (all threads stop between chunks of CHUNK_SIMULATIONS).
        pool: as `grow`.
    Returns:
        the tree, with its `virtual_loss` (all reverted) and, with `config.transpositions`, its
        transposition table.
    Raises:
        ValueError: threads < 1, a game without `key` when `config.transpositions` is set, or as
            `grow`.
    """
    state = np.ascontiguousarray(state, dtype=np.int64)
    _validate(game, state, simulations, config)
    if threads < 1:
        raise ValueError("threads must be at least 1")
    threads = min(threads, simulations)
    tree = _new_tree(config, pool)
    capacity = tree.capacity
    amaf_visits = np.zeros(capacity, dtype=np.int64)
    amaf_value_sum = np.zeros(capacity, dtype=np.float64)
    arrivals = np.zeros(capacity, dtype=np.int64)
    if config.transpositions:
        table = TranspositionTable.allocate(capacity)
        entry = np.full(capacity, -1, dtype=np.int32)
        table_args = (entry, table.slot_key, table.slot_entry, table.visits, table.value_sum,
                      table.counters, table.shift)
    else:
        table = entry = None
        table_args = (np.full(1, -1, dtype=np.int32), np.zeros(1, dtype=np.int64),
                      np.full(1, -1, dtype=np.int32), np.zeros(1, dtype=np.int64),
                      np.zeros(1), np.zeros(2, dtype=np.int64), 63)
    # The transposition table's lock word, the simulations claimed and the current target.
    shared = np.zeros(3, dtype=np.int64)
    # Each thread's counters and random state on cache lines of their own (rows of 16 words).
    phases = np.zeros((threads, 16), dtype=np.int64)
    phase_cycles = np.zeros((threads, 16), dtype=np.int64)
    rngs = np.zeros((threads, 16), dtype=np.uint64)
    for i in range(threads):
        rngs[i, 0] = rng_state(config.seed + i)[0]
    tree_args = (tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
                 tree.parent, tree.action, tree.terminal, tree.counters, amaf_visits,
                 amaf_value_sum, arrivals, *table_args, config.transpositions, shared)
    options = _options(game, config)
    scratches = [_scratch(game, state) for _ in range(threads)]
    key = game.key if game.key is not None else _no_key
    sample_mask = _sample_mask()
    kernel_s = np.zeros(threads)

    def run_thread(i: int) -> None:
        started = time.perf_counter()
        run_shared_simulations(*tree_args, phases[i, :4], phase_cycles[i, :6], sample_mask,
                               state, *options, rngs[i, :1], *scratches[i],
                               game.legal_actions, game.play, game.outcome, game.priors,
                               game.rollout, key)
        kernel_s[i] += time.perf_counter() - started

    with ThreadPoolExecutor(max_workers=threads - 1 or 1,
                            thread_name_prefix="mcts-tree") as pool:

        def run(n: int) -> None:
            shared[2] = shared[1] + n
            # The calling thread is thread 0; the pool runs the others.
            others = [pool.submit(run_thread, i) for i in range(1, threads)]
            run_thread(0)
            for other in others:
                other.result()

        done = _grow_with_noise(tree, run, simulations, config, deadline, stop)
    tree.first_child[tree.first_child == REFUSED] = UNEXPANDED
    cycles = phase_cycles[:, :6].sum(axis=0)
    return Grown(tree=tree, amaf_visits=amaf_visits, amaf_value_sum=amaf_value_sum,
                 phases=phases[:, :4].sum(axis=0), simulations=done,
                 phase_seconds=_phase_seconds(phase_cycles, kernel_s),
                 timed_simulations=int(cycles[TIMED]),
                 threads=threads, virtual_loss=arrivals - tree.visits, table=table, entry=entry)


def split_simulations(total: int, parts: int) -> list[int]:
    """`total` simulations split as evenly as possible into `parts` (the first ones get more)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def grow_parallel(game: Game, state: np.ndarray, simulations: int,
                  config: SearchConfig = SearchConfig(), threads: int = 1, *,
                  deadline: float | None = None,
                  stop: threading.Event | None = None,
                  pool: TreePool | None = None) -> list[Grown]:
    """`threads` threads searching `state` as `config.parallelism` says.

    "root": root parallelisation (Chaslot, Winands & van den Herik 2008), `threads` independent
    trees (`min(threads, simulations)` of them) grown in parallel threads, tree i with seed
    `config.seed + i` and `split_simulations(simulations, threads)[i]` simulations. "tree": one
    tree grown by all the threads (`grow_tree_parallel`). The trees come from `pool` when given
    (see `grow`).

    Returns:
        the trees, in seed order (one for "tree"); merge them at the root by summing visits and
        values.
    Raises:
        ValueError: threads < 1, or as `grow`.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if config.parallelism == "tree":
        return [grow_tree_parallel(game, state, simulations, config, threads, deadline=deadline,
                                   stop=stop, pool=pool)]
    threads = min(threads, simulations)
    per_tree = split_simulations(simulations, threads)
    if threads == 1:
        return [grow(game, state, simulations, config, deadline=deadline, stop=stop, pool=pool)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mcts") as executor:
        futures = [executor.submit(grow, game, state, per_tree[i],
                                   replace(config, seed=config.seed + i), deadline=deadline,
                                   stop=stop, pool=pool)
                   for i in range(threads)]
        return [future.result() for future in futures]


SPARE_TREES = TreePool()
"""The trees of finished searches (`search`, `services.mcts.search.uct_search`), kept for the next
ones of the same capacity (see `TreePool`): those functions return statistics, not trees."""


def search(game: Game, state: np.ndarray, simulations: int,
           config: SearchConfig = SearchConfig(), threads: int = 1) -> GameSearchResult:
    """Searches `state` (int64 [S]) of `game` with `threads` threads (`grow_parallel`, as
    `config.parallelism` says) and chooses an action; see `GameSearchResult`. The trees come
    from and go back to `SPARE_TREES`.

    Raises:
        ValueError: as `grow_parallel`.
    """
    started = time.perf_counter()
    runs = grow_parallel(game, state, simulations, config, threads, pool=SPARE_TREES)
    elapsed = time.perf_counter() - started
    visits = np.zeros(game.num_actions, dtype=np.int64)
    value_sums = np.zeros(game.num_actions, dtype=np.float64)
    priors = np.zeros(game.num_actions, dtype=np.float64)
    for grown in runs:
        tree = grown.tree
        for child in tree.children(0):
            a = int(tree.action[child])
            visits[a] += tree.visits[child]
            value_sums[a] += tree.value_sum[child]
            priors[a] += tree.prior[child] / len(runs)
    values = np.full(game.num_actions, np.nan)
    seen = visits > 0
    values[seen] = value_sums[seen] / visits[seen]
    legal = sorted({int(grown.tree.action[child]) for grown in runs
                    for child in grown.tree.children(0)})
    if not legal:
        # The root could not be expanded (max_nodes too small): every legal action is equal.
        buffer = np.empty(MAX_ACTIONS, dtype=np.int64)
        legal = sorted(buffer[:game.legal_actions(state.astype(np.int64), buffer)].tolist())
    if config.temperature > 0 and visits.sum() > 0:
        chosen = sample_by_temperature(visits, config.temperature, config.seed)
    else:
        chosen = max(legal, key=lambda a: (visits[a], values[a] if seen[a] else -np.inf, -a))
    total = int(visits.sum())
    done = sum(grown.simulations for grown in runs)
    phases = sum(grown.phases for grown in runs)
    phase_seconds = sum(grown.phase_seconds for grown in runs) / len(runs)
    result = GameSearchResult(
        action=chosen,
        visits=visits,
        values=values,
        priors=priors,
        root_value=float(value_sums.sum() / total) if total else 0.0,
        simulations=done,
        tree_size=sum(grown.tree.size for grown in runs),
        max_depth=max(grown.tree.max_depth for grown in runs),
        tree_full=any(grown.tree.full for grown in runs),
        selection_steps=int(phases[SELECT]),
        expanded_nodes=int(phases[EXPAND]),
        rollout_plies=int(phases[ROLLOUT]),
        backup_steps=int(phases[BACKUP]),
        elapsed_s=elapsed,
        simulations_per_second=done / elapsed if elapsed > 0 else 0.0,
        selection_s=float(phase_seconds[SELECT]),
        expansion_s=float(phase_seconds[EXPAND]),
        rollout_s=float(phase_seconds[ROLLOUT]),
        backup_s=float(phase_seconds[BACKUP]),
        wait_s=float(phase_seconds[WAIT]),
        timed_simulations=sum(grown.timed_simulations for grown in runs),
        transposition_hits=sum(grown.transposition_hits for grown in runs),
        threads=max(grown.threads for grown in runs) if config.parallelism == "tree"
        else len(runs),
        parallelism=config.parallelism,
    )
    for grown in runs:
        SPARE_TREES.release(grown.tree)
    return result
