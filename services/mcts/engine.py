"""The general search core: UCT or PUCT over any game module, with progressive widening, RAVE,
root Dirichlet noise and a temperature for the final move, compiled with numba.

One simulation descends from the root by the selection rule (`services.mcts.selection`), expands a
leaf the second time it is reached (the root at once), evaluates it with one rollout to the end
of the game (the game's own rollout policy when it has one, else uniformly random moves), and
backs the result up (sign flipped at every ply for two-player games: each node stores values for
the player who moved into it).

- UCT: UCB1 `Q + c * sqrt(ln N / n)`, unvisited children first in child order.
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

Time per phase is reported as work counts, not clock time (a clock read inside the kernel would
cost more than the work it measures): selection steps (edges descended), expanded nodes (children
created), rollout plies and backup steps (nodes updated).

The kernel's random generator is xorshift64* seeded from `seed` (`services.mcts.xorshift`);
Dirichlet noise and the temperature draw use numpy's PCG64 seeded from `seed`: the same seed and
inputs give the same tree and the same move (with no deadline or stop event).

The kernel releases the GIL, so trees grown in different threads run in parallel: `grow_parallel`
is root parallelisation (Chaslot, Winands & van den Herik 2008), independent trees with seeds
`seed, seed + 1, ...`. A deadline or a stop event is checked every CHUNK_SIMULATIONS simulations.

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

from services.mcts.game import MAX_ACTIONS, Game
from services.mcts.selection import PUCT, UCT, puct, rave_beta, ucb1_from_log, widened_children
from services.mcts.tree import MIN_CAPACITY, Tree
from services.mcts.xorshift import random_below, rng_state

DEFAULT_MAX_NODES = 1_000_000
"""Default node capacity of one tree."""
CHUNK_SIMULATIONS = 4096
"""Simulations per kernel call when a deadline or a stop event has to be checked in between."""

SELECT, EXPAND, ROLLOUT, BACKUP = 0, 1, 2, 3
"""Indices of the phase work counters (see the module doc)."""


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
    """

    rule: str = "uct"
    exploration: float = 2.0
    widening_k: float | None = None
    widening_alpha: float = 0.5
    rave_k: float | None = None
    dirichlet_alpha: float | None = None
    dirichlet_epsilon: float = 0.25
    temperature: float = 0.0
    max_nodes: int = DEFAULT_MAX_NODES
    seed: int = 0


@dataclass(frozen=True)
class Grown:
    """A tree after `grow`: the `Tree` arrays, AMAF statistics per node (int64 [N] visits,
    float64 [N] value sums, same layout as `Tree.visits` / `Tree.value_sum`), and the phase work
    counters int64 [4] indexed by SELECT, EXPAND, ROLLOUT, BACKUP; `simulations` run (fewer than
    asked when a deadline or a stop event ended the search)."""

    tree: Tree
    amaf_visits: np.ndarray
    amaf_value_sum: np.ndarray
    phases: np.ndarray
    simulations: int


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
def expand(node, count, actions, action_priors, visits, value_sum, prior, first_child,
           num_children, parent, action, terminal, counters, amaf_visits, amaf_value_sum, rave):
    """Creates the children of `node` for its `count` legal `actions` (int64 [>= count]) with
    their `action_priors` (float64 [>= count]), by decreasing prior; sorts both in place. The
    AMAF statistics are reset only when `rave` is set (otherwise never read: their untouched
    zero pages cost no memory).

    Returns:
        the number of children created; 0 when the arrays are full (`counters[2]` is set then).
    """
    size = counters[0]
    if size + count > visits.shape[0]:
        counters[2] = 1
        return 0
    # Insertion sort by decreasing prior, stable: equal priors keep the game's action order.
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
    for i in range(count):
        child = size + i
        visits[child] = 0
        value_sum[child] = 0.0
        if rave:
            amaf_visits[child] = 0
            amaf_value_sum[child] = 0.0
        prior[child] = action_priors[i]
        first_child[child] = -1
        num_children[child] = 0
        parent[child] = node
        action[child] = actions[i]
        terminal[child] = 0
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
@njit(nogil=True, _nrt=False)
def run_simulations(visits, value_sum, prior, first_child, num_children, parent, action, terminal,
                    counters, amaf_visits, amaf_value_sum, phases, root_state, simulations, rule,
                    exploration, widening_k, widening_alpha, rave_k, players, rng, state, actions,
                    action_priors, path, moves, seen, legal_actions, play, outcome, priors,
                    rollout):
    """Runs `simulations` simulations in place on a tree whose root holds `root_state` (a state
    whose game goes on); `terminal[node]` is 1 once the move into the node is known to end the
    game. See the module doc for the rules and `Grown` for the arrays. Scratch arrays: `state`
    (like `root_state`), `actions` (int64 [MAX_ACTIONS]), `action_priors` (float64
    [MAX_ACTIONS]), `path` and `moves` (int64 [max_plies + 1]), `seen` (int64 [2, MAX_ACTIONS]).
    The game's functions (`rollout` None for uniformly random rollouts) are arguments: numba
    compiles one specialisation per game, with direct calls inlined."""
    record = rave_k > 0.0
    selection_steps = 0
    expanded_nodes = 0
    rollout_plies = 0
    backup_steps = 0
    for side in range(seen.shape[0]):
        for a in range(seen.shape[1]):
            seen[side, a] = 0
    for sim in range(simulations):
        for i in range(state.shape[0]):
            state[i] = root_state[i]
        node = 0
        depth = 0
        ended = False
        path[0] = 0
        while num_children[node] > 0:
            node = select_child(node, visits, value_sum, prior, first_child, num_children,
                                amaf_visits, amaf_value_sum, rule, exploration, widening_k,
                                widening_alpha, rave_k)
            moves[depth] = action[node]
            ended = play(state, action[node])
            terminal[node] = ended
            depth += 1
            path[depth] = node
            selection_steps += 1
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
        # Now for the player who moved into `node`.
        if players == 2 and (plies - depth) % 2 == 1:
            value = -value
        # Backup, with the AMAF update of every child of a path node whose action its player
        # played at that ply or later.
        stamp = sim + 1
        if record:
            for ply in range(depth, plies):
                seen[ply % players, moves[ply]] = stamp
        for d in range(depth, -1, -1):
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
    phases[0] += selection_steps
    phases[1] += expanded_nodes
    phases[2] += rollout_plies
    phases[3] += backup_steps


def _validate(game: Game, state: np.ndarray, simulations: int, config: SearchConfig) -> None:
    if game.num_actions > MAX_ACTIONS:
        raise ValueError(f"a game may have at most {MAX_ACTIONS} actions")
    if state.shape != (game.state_size,):
        raise ValueError(f"the state must have shape ({game.state_size},)")
    if game.legal_actions(state.astype(np.int64), np.empty(MAX_ACTIONS, dtype=np.int64)) == 0:
        raise ValueError("the game is over: no move to search")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
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
         stop: threading.Event | None = None) -> Grown:
    """Builds a search tree from `state` (int64 [S], a game that goes on) with `simulations`
    simulations; see the module doc for the options.

    Args:
        deadline: `time.monotonic()` seconds after which no new chunk of simulations starts.
        stop: an event that stops the search the same way (cancellation).
    Returns:
        the tree; `Grown.simulations` says how many simulations ran (0 when stopped at once).
    Raises:
        ValueError: a finished game, a state of the wrong shape, simulations < 1, or an option out
            of range.
    """
    state = np.ascontiguousarray(state, dtype=np.int64)
    _validate(game, state, simulations, config)
    tree = Tree.allocate(max(config.max_nodes, MIN_CAPACITY))
    capacity = tree.capacity
    amaf_visits = np.zeros(capacity, dtype=np.int64)
    amaf_value_sum = np.zeros(capacity, dtype=np.float64)
    phases = np.zeros(4, dtype=np.int64)
    rng = rng_state(config.seed)
    args = (tree.visits, tree.value_sum, tree.prior, tree.first_child, tree.num_children,
            tree.parent, tree.action, tree.terminal, tree.counters, amaf_visits, amaf_value_sum,
            phases, state)
    options = (PUCT if config.rule == "puct" else UCT, float(config.exploration),
               float(config.widening_k or 0.0), float(config.widening_alpha),
               float(config.rave_k or 0.0), game.players, rng)
    # Scratch arrays of the kernel: the state, legal actions and their priors, the path and the
    # actions of a simulation, and the AMAF marks `seen[side, a] == sim + 1` (`side` played `a`
    # at or below the ply being backed up).
    scratch = (np.empty_like(state), np.empty(MAX_ACTIONS, dtype=np.int64),
               np.empty(MAX_ACTIONS, dtype=np.float64),
               np.empty(game.max_plies + 1, dtype=np.int64),
               np.empty(game.max_plies + 1, dtype=np.int64),
               np.zeros((2, MAX_ACTIONS), dtype=np.int64))

    def run(n: int) -> None:
        run_simulations(*args, n, *options, *scratch, game.legal_actions, game.play,
                        game.outcome, game.priors, game.rollout)

    done = 0
    if config.dirichlet_alpha is not None:
        # The first simulation expands the root; the noise then goes on the root's priors.
        done = _run_chunks(run, 1, deadline, stop)
        children = tree.children(0)
        if len(children) > 0:
            noise = np.random.default_rng(config.seed).dirichlet(
                np.full(len(children), config.dirichlet_alpha))
            mixed = ((1 - config.dirichlet_epsilon) * tree.prior[children.start:children.stop]
                     + config.dirichlet_epsilon * noise)
            tree.prior[children.start:children.stop] = mixed
    if done < simulations and (done > 0 or config.dirichlet_alpha is None):
        done += _run_chunks(run, simulations - done, deadline, stop)
    return Grown(tree=tree, amaf_visits=amaf_visits, amaf_value_sum=amaf_value_sum,
                 phases=phases, simulations=done)


def split_simulations(total: int, parts: int) -> list[int]:
    """`total` simulations split as evenly as possible into `parts` (the first ones get more)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def grow_parallel(game: Game, state: np.ndarray, simulations: int,
                  config: SearchConfig = SearchConfig(), threads: int = 1, *,
                  deadline: float | None = None,
                  stop: threading.Event | None = None) -> list[Grown]:
    """Root parallelisation (Chaslot, Winands & van den Herik 2008): `threads` independent trees
    (`min(threads, simulations)` of them) grown in parallel threads, tree i with seed
    `config.seed + i` and `split_simulations(simulations, threads)[i]` simulations.

    Returns:
        the trees, in seed order; merge them at the root by summing visits and values.
    Raises:
        ValueError: threads < 1, or as `grow`.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    threads = min(threads, simulations)
    per_tree = split_simulations(simulations, threads)
    if threads == 1:
        return [grow(game, state, simulations, config, deadline=deadline, stop=stop)]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mcts") as pool:
        futures = [pool.submit(grow, game, state, per_tree[i],
                               replace(config, seed=config.seed + i), deadline=deadline,
                               stop=stop)
                   for i in range(threads)]
        return [future.result() for future in futures]


def search(game: Game, state: np.ndarray, simulations: int,
           config: SearchConfig = SearchConfig()) -> GameSearchResult:
    """Searches `state` (int64 [S]) of `game` and chooses an action; see `GameSearchResult`.

    Raises:
        ValueError: as `grow`.
    """
    started = time.perf_counter()
    grown = grow(game, state, simulations, config)
    elapsed = time.perf_counter() - started
    tree = grown.tree
    visits = np.zeros(game.num_actions, dtype=np.int64)
    value_sums = np.zeros(game.num_actions, dtype=np.float64)
    priors = np.zeros(game.num_actions, dtype=np.float64)
    for child in tree.children(0):
        a = int(tree.action[child])
        visits[a] = tree.visits[child]
        value_sums[a] = tree.value_sum[child]
        priors[a] = tree.prior[child]
    values = np.full(game.num_actions, np.nan)
    seen = visits > 0
    values[seen] = value_sums[seen] / visits[seen]
    legal = [int(tree.action[child]) for child in tree.children(0)]
    if not legal:
        # The root could not be expanded (max_nodes too small): every legal action is equal.
        buffer = np.empty(MAX_ACTIONS, dtype=np.int64)
        legal = sorted(buffer[:game.legal_actions(state.astype(np.int64), buffer)].tolist())
    if config.temperature > 0 and visits.sum() > 0:
        weights = (visits / visits.max()) ** (1.0 / config.temperature)
        draw = np.random.default_rng([config.seed, 1])
        chosen = int(draw.choice(game.num_actions, p=weights / weights.sum()))
    else:
        chosen = max(legal, key=lambda a: (visits[a], values[a] if seen[a] else -np.inf, -a))
    total = int(visits.sum())
    return GameSearchResult(
        action=chosen,
        visits=visits,
        values=values,
        priors=priors,
        root_value=float(value_sums.sum() / total) if total else 0.0,
        simulations=grown.simulations,
        tree_size=tree.size,
        max_depth=tree.max_depth,
        tree_full=tree.full,
        selection_steps=int(grown.phases[SELECT]),
        expanded_nodes=int(grown.phases[EXPAND]),
        rollout_plies=int(grown.phases[ROLLOUT]),
        backup_steps=int(grown.phases[BACKUP]),
        elapsed_s=elapsed,
        simulations_per_second=grown.simulations / elapsed if elapsed > 0 else 0.0,
    )
