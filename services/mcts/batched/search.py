"""Batched leaf evaluation for PUCT and Gumbel search: an ask/tell driver over numba kernels.

The caller owns the evaluator (a network, a game, a remote process): `BatchedSearch.next_batch`
returns up to `batch_size` leaves to evaluate, `BatchedSearch.submit` takes their priors, values
and terminal flags, expands the leaves and backs the values up. `run_batched` loops the two.

Tree: `services.mcts.core.tree.Tree` (struct of arrays, node 0 the root, the children of a node in
one contiguous block in increasing action order; only actions with a prior > 0 get a child) plus,
per node, `raw_value` (float64 [N], the evaluator's value for the player to move at the node) and
`status` (NEW / PENDING / EVALUATED). The arrays are the rows of two preallocated blocks, int64
`ints` [7, N] and float64 `floats` [3, N] (see VISITS ... RAW_VALUE), 80 bytes per node: a kernel
takes the two blocks in one record (`batched_kernels.Blocks`), since numba's dispatch costs about
half a microsecond per array argument, as much as a whole descent of a small tree. N is at most
`max_nodes` and
`(simulations + 1) * num_actions + 1`. A node is expanded when its evaluation is submitted; a
full tree stops expanding (`tree_full`), and a leaf it could not expand keeps its value, backed
up again without an evaluation whenever a descent reaches it.

The kernels, in `services.mcts.batched.kernels`, are `njit(cache=True, nogil=True)`:
`collect_leaves` (selection with virtual loss), `apply_evaluations` (validation, expansion and
backup); they take the records `Blocks` and `BatchedOptions` there. Gumbel's rules are in
`services.mcts.batched.gumbel`, PUCT in `services.mcts.core.selection` (one implementation with the
engine's).

Two drivers run the same kernels in the same order, so the same evaluations give the same tree:
- ask/tell (`next_batch` / `submit`, `run_batched`): the evaluator is any Python callable (a
  network, a remote caller); about 20 us of Python per batch;
- compiled (`BatchedSearch.run_compiled`, kernel `run_batches`): the evaluator is an njit
  function, passed as an argument the way the engine takes a game's functions, and the loop
  collect_leaves -> evaluate -> apply_evaluations runs in numba with no Python per batch (the
  root batch and the root's noise are still prepared in Python). The two kernels are
  `inline="always"` so that they are compiled into it without reference counting.

One batch:
- The first batch is the root alone; its evaluation does not count as a simulation (as in mctx,
  the root ends with `simulations + 1` visits).
- Every later descent starts at the root and selects children until it reaches a node that is
  not expanded. On the way it applies a *virtual loss* to every node of its path: one visit and
  `-virtual_loss` on the node's value sum (its value for the player who moved into it), so later
  descents of the same batch prefer other paths (Chaslot, Winands & van den Herik 2008; Silver
  et al. 2016). Submitting a leaf reverts the loss: its visit stays, as the real one, and the
  value sum gets `virtual_loss + value`. With batch_size 1 the tree equals one searched without
  virtual loss.
- A descent that ends at a leaf already in the batch is a *collision*: its virtual loss is
  reverted, it is counted, and the batch closes there (the tree is then exactly as before the
  descent, so every further descent would collide the same way).
- A descent that ends at a known terminal node (or a leaf the full tree could not expand) backs up
  the node's stored value at once, without an evaluation; it counts as a simulation.
- Backup adds the leaf's value to each node of the path, flipping its sign at every ply when
  `players == 2` (each node stores values for the player who moved into it).

Selection rules (`BatchedConfig.rule`):
- "puct": AlphaZero's `Q + c_puct * P * sqrt(N) / (1 + n)` (`selection.puct`), Q = 0 for an
  unvisited child, ties to the lower action; optional root Dirichlet noise
  `(1 - epsilon) * P + epsilon * Dir(alpha)` (Silver et al. 2017).
- "gumbel": Gumbel MuZero (Danihelka, Guez, Schrittwieser & Silver 2022, "Policy improvement by
  planning with Gumbel"; as mctx's `gumbel_muzero_policy`). At the root, Gumbel-top-m: the m
  actions with the largest `g + logits` are considered and the simulation budget is spent on them
  by sequential halving (`considered_visits_sequence`); a descent at the root takes, among the
  considered actions whose visits equal the scheduled count, the one with the largest
  `g + logits + sigma(q)`. `sigma(q) = (c_visit + max_b N(b)) * c_scale * q` over completed
  Q-values (visited: their mean; unvisited: the mixed value of the node, mctx's
  `qtransform_completed_by_mix_value`, rescaled to [0, 1] over the children). Below the root the
  choice is deterministic: `argmax(pi'(a) - N(a) / (1 + sum_b N(b)))` with the improved policy
  `pi' = softmax(logits + sigma(completed q))`. The chosen action is the considered action with
  the most visits and the largest `g + logits + sigma(q)`; `BatchedResult.policy` is pi' at the
  root.

Random draws (Dirichlet noise, Gumbel noise, the temperature draw) come from numpy's PCG64 seeded
by `seed`; the kernels are deterministic, so the same seed and evaluations give the same tree.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from services.mcts.batched.gumbel import (
    LOW_LOGIT,
    TINY,
    completed_qvalues,
    considered_visits_sequence,
    root_bases,
)
from services.mcts.batched.kernels import (
    ACTION,
    BAD_PRIOR,
    BAD_VALUE,
    COLLISIONS,
    EVALUATED,
    FIRST_CHILD,
    NEW,
    NUM_CHILDREN,
    PARENT,
    PENDING,
    PRIOR,
    RAW_VALUE,
    RULES,
    SIZE,
    STATUS,
    STORED_BACKUPS,
    TERMINAL,
    VALUE_SUM,
    VISITS,
    ZERO_PRIORS,
    Rows,
    apply_evaluations,
    collect_leaves,
    run_batches,
)
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.core.root import add_dirichlet_noise, sample_by_temperature
from services.mcts.core.selection import GUMBEL
from services.mcts.core.tree import MIN_CAPACITY, UNEXPANDED, Tree
from services.mcts.settings import (
    C_PUCT,
    DEFAULT_MAX_NODES,
    DIRICHLET_EPSILON,
    GUMBEL_NUM_CONSIDERED,
    VIRTUAL_LOSS,
)

__all__ = ["EVALUATED", "NEW", "PENDING", "STORED_BACKUPS"]

COMPILED_CHUNK_BATCHES = 256
"""Batches per call of the compiled loop (`BatchedSearch.run_compiled`) when a deadline or a stop
event must be checked between calls."""


class EvaluationError(ValueError):
    """A malformed evaluation passed to `BatchedSearch.submit`.

    Attributes:
        argument: "priors", "values" or "terminal".
        row: the leaf (row) at fault, -1 for a wrong shape.
    """

    def __init__(self, argument: str, row: int, description: str) -> None:
        where = f"row {row} " if row >= 0 else ""
        super().__init__(f"{argument}: {where}{description}")
        self.argument = argument
        self.row = row
        self.description = description


@dataclass(frozen=True)
class BatchedConfig:
    """Options of `BatchedSearch`.

    Attributes:
        rule: "puct" or "gumbel" (see the module doc).
        c_puct: c_puct of PUCT, >= 0.
        virtual_loss: value subtracted per in-flight descent, >= 0 (0 = visits only).
        batch_size: most leaves per batch, >= 1.
        max_nodes: node capacity of the tree (>= MIN_CAPACITY); a full tree stops expanding and
            reports `tree_full`.
        seed: seeds the Dirichlet noise, the Gumbel noise and the temperature draw.
        dirichlet_alpha, dirichlet_epsilon: root noise on the priors (PUCT only); None = off.
        temperature: PUCT only; 0 plays the most visited action, T > 0 samples proportionally to
            `visits ** (1 / T)`.
        gumbel_num_considered: m, actions considered at the root by Gumbel-top-m (mctx default 16).
        c_visit, c_scale: sigma's constants (mctx's maxvisit_init = 50, value_scale = 0.1).
    """

    rule: str = "puct"
    c_puct: float = C_PUCT
    virtual_loss: float = VIRTUAL_LOSS
    batch_size: int = 1
    max_nodes: int = DEFAULT_MAX_NODES
    seed: int = 0
    dirichlet_alpha: float | None = None
    dirichlet_epsilon: float = DIRICHLET_EPSILON
    temperature: float = 0.0
    gumbel_num_considered: int = GUMBEL_NUM_CONSIDERED
    c_visit: float = 50.0
    c_scale: float = 0.1


class LeafBatch:
    """Leaves to evaluate; B = leaves in the batch. Read-only by convention (a plain class with
    slots: a frozen dataclass would cost more to build than a descent of a small tree).

    Attributes:
        nodes: int64 [B], leaf node ids.
        parents: int64 [B], parent node ids (-1 for the root).
        actions: int64 [B], action from the parent into the leaf (-1 for the root).
        depths: int64 [B], plies from the root.
        batch_id: 0 for the root batch, then 1, 2, ...
        paths: list of B lists of int, the actions from the root to each leaf (computed on access).
    """

    __slots__ = ("nodes", "parents", "actions", "depths", "batch_id", "_tree")

    def __init__(self, nodes: np.ndarray, parents: np.ndarray, actions: np.ndarray,
                 depths: np.ndarray, batch_id: int, tree: Tree) -> None:
        self.nodes = nodes
        self.parents = parents
        self.actions = actions
        self.depths = depths
        self.batch_id = batch_id
        self._tree = tree

    def __len__(self) -> int:
        return int(self.nodes.shape[0])

    def __repr__(self) -> str:
        return f"LeafBatch(batch_id={self.batch_id}, nodes={self.nodes.tolist()})"

    @property
    def paths(self) -> list[list[int]]:
        """The actions from the root to each leaf, root first."""
        paths = []
        for node in self.nodes.tolist():
            path = []
            while node > 0:
                path.append(int(self._tree.action[node]))
                node = int(self._tree.parent[node])
            path.reverse()
            paths.append(path)
        return paths


@dataclass(frozen=True)
class BatchedResult:
    """Result of a batched search, for the player to move at the root; A = num_actions.

    Attributes:
        action: the action chosen (-1 when the root has no child: a terminal root).
        visits: int64 [A], root visits per action (0 for an action without a child).
        values: float64 [A], mean value per action for the player to move, nan when unvisited.
        priors: float64 [A], root priors (after Dirichlet noise).
        policy: float64 [A], the search policy: visit shares (PUCT) or the improved policy
            softmax(logits + sigma(completed q)) (Gumbel).
        root_value: the root's mean value for the player to move (its own evaluation included).
        simulations: descents completed (leaves evaluated + stored values backed up).
        tree_size: nodes; max_depth: deepest node reached, plies below the root.
        tree_full: True when an expansion was refused for lack of room.
        collisions: descents that reached a leaf already in their batch (reverted, not counted).
        evaluations: leaves evaluated by the caller, the root included.
        batches: batches handed out, the root's included.
        elapsed_s: wall seconds from the first `next_batch` to the last `submit`.
        simulations_per_second: simulations / elapsed_s.
        select_s, evaluate_s, backup_s: wall seconds in selection (`next_batch`), in the caller's
            evaluation (from `next_batch` returning to `submit` being called) and in `submit`
            (the root batch only after `BatchedSearch.run_compiled`, whose loop is not split).
    """

    action: int
    visits: np.ndarray
    values: np.ndarray
    priors: np.ndarray
    policy: np.ndarray
    root_value: float
    simulations: int
    tree_size: int
    max_depth: int
    tree_full: bool
    collisions: int
    evaluations: int
    batches: int
    elapsed_s: float
    simulations_per_second: float
    select_s: float
    evaluate_s: float
    backup_s: float


def validate_config(num_actions: int, simulations: int, config: BatchedConfig,
                    players: int) -> None:
    """Raises ValueError naming the option that is out of range."""
    if not 1 <= num_actions <= MAX_ACTIONS:
        raise ValueError(f"num_actions must be in 1..{MAX_ACTIONS}")
    if simulations < 1:
        raise ValueError("simulations must be at least 1")
    if players not in (1, 2):
        raise ValueError("players must be 1 or 2")
    if config.rule not in RULES:
        raise ValueError("rule must be 'puct' or 'gumbel'")
    if not (math.isfinite(config.c_puct) and config.c_puct >= 0):
        raise ValueError("c_puct must be a finite number >= 0")
    if not (math.isfinite(config.virtual_loss) and config.virtual_loss >= 0):
        raise ValueError("virtual_loss must be a finite number >= 0")
    if config.batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if config.max_nodes < max(MIN_CAPACITY, num_actions + 1):
        raise ValueError(f"max_nodes must be at least {MIN_CAPACITY} and hold the root's children "
                         "(num_actions + 1)")
    if config.dirichlet_alpha is not None and not (config.dirichlet_alpha > 0 and
                                                   0 <= config.dirichlet_epsilon <= 1):
        raise ValueError("Dirichlet noise needs alpha > 0 and 0 <= epsilon <= 1")
    if not (math.isfinite(config.temperature) and config.temperature >= 0):
        raise ValueError("temperature must be a finite number >= 0")
    if config.gumbel_num_considered < 1:
        raise ValueError("gumbel_num_considered must be at least 1")
    if not (config.c_visit >= 0 and config.c_scale >= 0):
        raise ValueError("c_visit and c_scale must be >= 0")


class BatchedSearch:
    """One batched PUCT or Gumbel search, driven by `next_batch` / `submit` (module doc).

    Not thread-safe: one driver calls `next_batch` and `submit` alternately.
    """

    def __init__(self, num_actions: int, simulations: int, config: BatchedConfig = BatchedConfig(),
                 players: int = 2, *, blocks: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> None:
        """
        Args:
            num_actions: A, the size of the action space, 1..127.
            simulations: descents after the root's evaluation, >= 1.
            config: see `BatchedConfig`.
            players: 2 for alternating zero-sum games (values flip sign per ply), 1 otherwise.
            blocks: optional (int64 [7, N], float64 [3, N]) C-contiguous arrays to build the tree
                in, N = `capacity_for(...)`, e.g. those of a finished search (`blocks`): their
                contents do not matter (a search writes every row before reading it), and
                reusing them spares the page faults of fresh memory (about one per 4 KiB
                touched). The earlier search's tree is overwritten.
        Raises:
            ValueError: an argument out of range (see `validate_config`), or blocks of the wrong
                shape or dtype.
        """
        validate_config(num_actions, simulations, config, players)
        self.num_actions = num_actions
        self.simulations = simulations
        self.config = config
        self.players = players
        capacity = self.capacity_for(num_actions, simulations, config)
        if blocks is None:
            # Zero-filled blocks are mapped lazily by the OS; rows past the tree's size are never
            # read.
            self._ints = np.zeros((7, capacity), dtype=np.int64)
            self._floats = np.zeros((3, capacity), dtype=np.float64)
        else:
            ints, floats = blocks
            if not (ints.shape == (7, capacity) and ints.dtype == np.int64
                    and floats.shape == (3, capacity) and floats.dtype == np.float64
                    and ints.flags.c_contiguous and floats.flags.c_contiguous):
                raise ValueError(f"blocks must be C-contiguous int64 [7, {capacity}] and "
                                 f"float64 [3, {capacity}]")
            self._ints, self._floats = ints, floats
            ints[:, 0] = 0
            floats[:, 0] = 0.0
        self._counters = np.zeros(5, dtype=np.int64)
        self._ints[FIRST_CHILD, 0] = UNEXPANDED
        self._ints[PARENT, 0] = -1
        self._ints[ACTION, 0] = -1
        self._floats[PRIOR, 0] = 1.0
        self._counters[SIZE] = 1
        ints, floats = self._ints, self._floats
        self.tree = Tree(visits=ints[VISITS], value_sum=floats[VALUE_SUM], prior=floats[PRIOR],
                         first_child=ints[FIRST_CHILD], num_children=ints[NUM_CHILDREN],
                         parent=ints[PARENT], action=ints[ACTION], terminal=ints[TERMINAL],
                         counters=self._counters[:3])
        """The tree (`services.mcts.core.tree.Tree`; here every array is an int64 or float64 row of
        the search's two blocks)."""
        self.raw_value = floats[RAW_VALUE]
        """float64 [N], each evaluated node's value for the player to move there."""
        self.status = ints[STATUS]
        """int64 [N], NEW, PENDING or EVALUATED."""
        self._rule = RULES[config.rule]
        self._vl = float(config.virtual_loss)
        self._scratch = np.zeros(MAX_ACTIONS, dtype=np.float64)
        # The kernels' records as plain tuples (`batched_kernels.Blocks`, `BatchedOptions`):
        # numba's dispatcher types those in C, a NamedTuple in Python (6 us a call).
        self._blocks = (self._ints, self._floats, self._counters)
        self._options = self._options_with(np.zeros(1, dtype=np.float64),
                                           np.zeros(1, dtype=np.int64))
        self._root_gumbel = np.zeros(1, dtype=np.float64)
        self._remaining = simulations
        self._done = 0
        self._evaluations = 0
        self._batches = 0
        self._pending: LeafBatch | None = None
        self._handed_out_at = 0.0
        self._started: float | None = None
        self._ended = 0.0
        self.select_s = 0.0
        self.evaluate_s = 0.0
        self.backup_s = 0.0

    @staticmethod
    def capacity_for(num_actions: int, simulations: int, config: BatchedConfig) -> int:
        """N, the nodes a search of these sizes allocates: at most `config.max_nodes` and
        `(simulations + 1) * num_actions + 1`, at least MIN_CAPACITY."""
        return max(MIN_CAPACITY, min(config.max_nodes, (simulations + 1) * num_actions + 1))

    @property
    def blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """The tree's two blocks (int64 [7, N], float64 [3, N]), to pass to a later search of
        the same capacity once this one's tree is no longer needed."""
        return self._ints, self._floats

    @property
    def simulations_done(self) -> int:
        """Descents completed so far (the root's evaluation not included)."""
        return self._done

    def next_batch(self) -> LeafBatch | None:
        """The next leaves to evaluate, or None when the simulation budget is spent.

        Raises:
            RuntimeError: the previous batch was not submitted.
        """
        if self._pending is not None:
            raise RuntimeError("submit the previous batch first")
        now = time.perf_counter()
        if self._started is None:
            self._started = now
        tree = self.tree
        if self._batches == 0:
            tree.visits[0] += 1
            tree.value_sum[0] -= self._vl
            self.status[0] = PENDING
            out = np.array([[0], [-1], [-1], [0]], dtype=np.int64)
            leaves = 1
        else:
            out = np.empty((4, self.config.batch_size), dtype=np.int64)
            leaves = 0
            while leaves == 0 and self._remaining > 0:
                leaves, done = collect_leaves(
                    self._blocks, self._options, min(self.config.batch_size, self._remaining),
                    out, self._scratch)
                self._remaining -= done
                self._done += done - leaves
        ended = time.perf_counter()
        self.select_s += ended - now
        if leaves == 0:
            self._ended = ended
            return None
        if leaves == out.shape[1]:
            batch = LeafBatch(out[0], out[1], out[2], out[3], self._batches, tree)
        else:
            batch = LeafBatch(out[0, :leaves], out[1, :leaves], out[2, :leaves],
                              out[3, :leaves], self._batches, tree)
        self._batches += 1
        self._pending = batch
        self._handed_out_at = ended
        return batch

    def submit(self, priors: np.ndarray, values: np.ndarray, terminal: np.ndarray) -> None:
        """Evaluations of the batch last returned by `next_batch`, row b for leaf b.

        Args:
            priors: float32 or float64 [B, A], >= 0; 0 = illegal action (no child); each row is
                renormalised; ignored for a terminal leaf.
            values: [B], in [-1, 1], for the player to move at the leaf (for a terminal leaf, its
                exact outcome).
            terminal: bool [B], True when the game (or episode) is over at the leaf.
        Raises:
            RuntimeError: no batch is waiting.
            EvaluationError (a ValueError): wrong shapes, a value outside [-1, 1] or not finite,
                a negative or non-finite prior, all-zero priors on a non-terminal leaf; it names
                the argument and the row. Nothing is changed then.
        """
        now = time.perf_counter()
        batch = self._pending
        if batch is None:
            raise RuntimeError("no batch is waiting for evaluations")
        if not (isinstance(priors, np.ndarray) and priors.dtype == np.float64):
            priors = np.asarray(priors, dtype=np.float64)
        if not (isinstance(values, np.ndarray) and values.dtype == np.float64):
            values = np.asarray(values, dtype=np.float64)
        if not (isinstance(terminal, np.ndarray) and terminal.dtype == np.bool_):
            terminal = np.asarray(terminal, dtype=np.bool_)
        size = batch.nodes.shape[0]
        if priors.shape != (size, self.num_actions):
            raise EvaluationError("priors", -1, f"shape {priors.shape}, expected ({size}, "
                                                f"{self.num_actions})")
        if values.shape != (size,):
            raise EvaluationError("values", -1, f"shape {values.shape}, expected ({size},)")
        if terminal.shape != (size,):
            raise EvaluationError("terminal", -1, f"shape {terminal.shape}, expected ({size},)")
        code, row = apply_evaluations(self._blocks, self._options, batch.nodes, priors, values,
                                      terminal)
        _raise_for(code, row, values)
        self._pending = None
        self._evaluations += size
        if batch.batch_id == 0:
            self._prepare_root()
        else:
            self._done += size
        ended = time.perf_counter()
        self.evaluate_s += now - self._handed_out_at
        self.backup_s += ended - now
        self._ended = ended

    def run_compiled(self, evaluate, model, *, deadline: float | None = None,
                     stop: threading.Event | None = None) -> BatchedResult:
        """Runs the search to the end with an njit evaluator and the whole loop in numba
        (`run_batches`): no Python per batch. The same seed, options and evaluations give the
        same tree as `run_batched` (batch by batch the same kernels run in the same order).

        Args:
            evaluate: an njit function `evaluate(model, nodes, parents, actions, priors, values,
                terminal)` filling row b of `priors` (float64 [B, A]), `values` (float64 [B]) and
                `terminal` (bool [B]) for leaf b (int64 [B] node ids, parent ids (-1 for the
                root) and actions (-1 for the root)); it must not allocate (see `run_batches`).
                Also called once from Python for the root batch.
            model: its first argument (e.g. a tuple of arrays: weights, per-node states).
            deadline: `time.monotonic()` seconds after which no new chunk of
                COMPILED_CHUNK_BATCHES batches starts (checked between chunks only).
            stop: an event that stops the search the same way (cancellation).
        Returns:
            the result, as `result()`. `select_s`, `evaluate_s` and `backup_s` then cover the
            root batch only (the compiled loop is not split into phases; `elapsed_s` has it all).
        Raises:
            RuntimeError: a batch of `next_batch` is waiting for `submit`.
            EvaluationError: a malformed evaluation (the search stops; its leaves stay PENDING).
        """
        if self._pending is not None:
            raise RuntimeError("submit the previous batch first")
        size = self.config.batch_size
        priors = np.zeros((size, self.num_actions), dtype=np.float64)
        values = np.zeros(size, dtype=np.float64)
        terminal = np.zeros(size, dtype=np.bool_)
        if self._batches == 0:
            root = self.next_batch()
            evaluate(model, root.nodes, root.parents, root.actions, priors[:1], values[:1],
                     terminal[:1])
            self.submit(priors[:1], values[:1], terminal[:1])
        chunk = (self._remaining if deadline is None and stop is None
                 else COMPILED_CHUNK_BATCHES)
        out = np.empty((4, size), dtype=np.int64)
        while (self._remaining > 0 and (deadline is None or time.monotonic() < deadline)
               and (stop is None or not stop.is_set())):
            done, evaluated, batches, code, row = run_batches(
                self._blocks, self._options, self._remaining, size, chunk,
                (out, self._scratch, priors, values, terminal),
                evaluate, model)
            self._remaining -= done
            self._done += done
            self._evaluations += evaluated
            self._batches += batches
            self._ended = time.perf_counter()
            _raise_for(code, row, values)
        return self.result()

    def _options_with(self, root_base: np.ndarray, considered_table: np.ndarray) -> tuple:
        """The kernels' `BatchedOptions`, as a plain tuple, with the Gumbel root's arrays."""
        config = self.config
        return (self._rule, float(config.c_puct), self._vl, self.players, float(config.c_visit),
                float(config.c_scale), root_base, considered_table)

    def _rows(self) -> Rows:
        """The tree as the kernels' `Rows`."""
        ints, floats = self._ints, self._floats
        return Rows(ints[VISITS], floats[VALUE_SUM], floats[PRIOR], ints[FIRST_CHILD],
                    ints[NUM_CHILDREN], ints[PARENT], ints[ACTION], ints[TERMINAL],
                    ints[STATUS], floats[RAW_VALUE], self._counters)

    def _prepare_root(self) -> None:
        """After the root's evaluation: Dirichlet noise (PUCT) or the Gumbel draw and the
        sequential-halving schedule (Gumbel)."""
        tree = self.tree
        children = tree.children(0)
        count = len(children)
        if count == 0:
            return
        rng = np.random.default_rng(self.config.seed)
        block = slice(children.start, children.stop)
        if self._rule == GUMBEL:
            gumbel = rng.gumbel(size=count)
            considered = min(self.config.gumbel_num_considered, count)
            # Gumbel-top-m: only the m largest g + logits are considered.
            scores = gumbel + np.log(np.maximum(tree.prior[block].astype(np.float64), TINY))
            keep = np.argsort(-scores, kind="stable")[:considered]
            masked = np.full(count, -np.inf)
            masked[keep] = gumbel[keep]
            self._root_gumbel = masked
            self._options = self._options_with(
                root_bases(masked, tree.prior[block].astype(np.float64)),
                considered_visits_sequence(considered, self.simulations))
        elif self.config.dirichlet_alpha is not None:
            add_dirichlet_noise(tree.prior[block], self.config.dirichlet_alpha,
                                self.config.dirichlet_epsilon, rng)

    def result(self) -> BatchedResult:
        """Statistics of the search so far (usually after `next_batch` returned None)."""
        tree = self.tree
        a = self.num_actions
        visits = np.zeros(a, dtype=np.int64)
        value_sums = np.zeros(a, dtype=np.float64)
        priors = np.zeros(a, dtype=np.float64)
        children = tree.children(0)
        block = slice(children.start, children.stop)
        acts = tree.action[block].astype(np.int64)
        visits[acts] = tree.visits[block]
        value_sums[acts] = tree.value_sum[block]
        priors[acts] = tree.prior[block]
        values = np.full(a, np.nan)
        seen = visits > 0
        values[seen] = value_sums[seen] / visits[seen]
        policy = np.zeros(a, dtype=np.float64)
        action = -1
        if len(children) > 0:
            if self._rule == GUMBEL:
                action, policy = self._gumbel_choice(acts)
            else:
                total = visits.sum()
                if total > 0:
                    policy = visits / total
                action = self._puct_choice(acts, visits, values)
        root_visits = int(tree.visits[0])
        root_value = 0.0
        if root_visits > 0:
            root_value = float(tree.value_sum[0] / root_visits)
            if self.players == 2:
                root_value = -root_value
        elapsed = (self._ended - self._started) if self._started is not None else 0.0
        return BatchedResult(
            action=action, visits=visits, values=values, priors=priors, policy=policy,
            root_value=root_value, simulations=self._done, tree_size=tree.size,
            max_depth=tree.max_depth, tree_full=tree.full,
            collisions=int(self._counters[COLLISIONS]),
            evaluations=self._evaluations, batches=self._batches, elapsed_s=elapsed,
            simulations_per_second=self._done / elapsed if elapsed > 0 else 0.0,
            select_s=self.select_s, evaluate_s=self.evaluate_s, backup_s=self.backup_s)

    def _puct_choice(self, acts: np.ndarray, visits: np.ndarray, values: np.ndarray) -> int:
        if self.config.temperature > 0 and visits.sum() > 0:
            return sample_by_temperature(visits, self.config.temperature, self.config.seed)
        legal = acts.tolist()
        return max(legal, key=lambda x: (visits[x], values[x] if visits[x] > 0 else -np.inf, -x))

    def _gumbel_choice(self, acts: np.ndarray) -> tuple[int, np.ndarray]:
        tree = self.tree
        children = tree.children(0)
        count = len(children)
        sigma = np.zeros(MAX_ACTIONS, dtype=np.float64)
        completed_qvalues(0, self._rows(), self.config.c_visit, self.config.c_scale, sigma)
        sigma = sigma[:count]
        block = slice(children.start, children.stop)
        logits = np.log(np.maximum(tree.prior[block].astype(np.float64), TINY))
        child_visits = tree.visits[block]
        considered = np.isfinite(self._root_gumbel)
        most = child_visits[considered].max()
        score = np.maximum(LOW_LOGIT, self._root_gumbel + logits - logits.max() + sigma)
        score = np.where(considered & (child_visits == most), score, -np.inf)
        action = int(acts[int(np.argmax(score))])
        improved = logits + sigma
        improved = np.exp(improved - improved.max())
        policy = np.zeros(self.num_actions, dtype=np.float64)
        policy[acts] = improved / improved.sum()
        return action, policy


def _raise_for(code: int, row: int, values: np.ndarray) -> None:
    """Raises the EvaluationError of a kernel's error code (nothing for _OK)."""
    if code == BAD_VALUE:
        raise EvaluationError("values", row, f"is {values[row]}; must be in [-1, 1]")
    if code == BAD_PRIOR:
        raise EvaluationError("priors", row, "has a negative or non-finite prior")
    if code == ZERO_PRIORS:
        raise EvaluationError("priors", row, "is all zero on a non-terminal leaf")


def run_batched(search: BatchedSearch,
                evaluate: Callable[[LeafBatch], tuple[np.ndarray, np.ndarray, np.ndarray]],
                deadline: float | None = None, stop: threading.Event | None = None
                ) -> BatchedResult:
    """Runs `search` to the end: `evaluate(batch)` returns (priors [B, A], values [B], terminal
    bool [B]) as `BatchedSearch.submit` takes them.

    Args:
        deadline: `time.monotonic()` seconds after which no new batch starts.
        stop: an event that stops the search the same way (cancellation).
    Returns:
        the result; `simulations` says how many ran when the deadline or `stop` ended it early.
    Raises:
        EvaluationError: as `BatchedSearch.submit`, for a malformed evaluation.
    """
    while ((deadline is None or time.monotonic() < deadline)
           and (stop is None or not stop.is_set())):
        batch = search.next_batch()
        if batch is None:
            break
        search.submit(*evaluate(batch))
    return search.result()


def warm_up() -> None:
    """Compiles (or loads from numba's cache) the kernels of both rules, so that a service's first
    batched search pays no JIT time."""
    for rule in RULES:
        search = BatchedSearch(2, 4, BatchedConfig(rule=rule, batch_size=2))
        run_batched(search, lambda batch: (np.full((len(batch), 2), 0.5), np.zeros(len(batch)),
                                           np.zeros(len(batch), dtype=np.bool_)))
