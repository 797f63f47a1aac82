"""The batched engine's driver: `BatchedSearch`, one PUCT or Gumbel search whose leaves the
caller evaluates, by ask/tell (`next_batch` / `submit`, looped by `run_batched`) or with an njit
evaluator in a compiled loop (`run_compiled`). The design (the tree's two blocks, virtual loss,
collisions, the Gumbel root, reproducibility) is in docs/services/mcts.md, "The batched engine".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
    COLLISIONS,
    FIRST_CHILD,
    NUM_CHILDREN,
    PARENT,
    PENDING,
    PRIOR,
    RAW_VALUE,
    RULES,
    SIZE,
    STATUS,
    TERMINAL,
    VALUE_SUM,
    VISITS,
    Rows,
    apply_evaluations,
    collect_leaves,
    run_batches,
)
from services.mcts.batched.leaves import EvaluationError, LeafBatch, raise_for, validate_config
from services.mcts.core.config import BatchedConfig
from services.mcts.core.game import MAX_ACTIONS
from services.mcts.core.result import SearchResult
from services.mcts.core.root import add_dirichlet_noise, sample_by_temperature
from services.mcts.core.selection import GUMBEL
from services.mcts.core.tree import UNEXPANDED, Tree
from services.mcts.settings import MIN_CAPACITY

DEFAULT_CONFIG = BatchedConfig()
"""The options of a search that sets none (PUCT, c_puct 1.25, batches of one leaf)."""
COMPILED_CHUNK_BATCHES = 256
"""Batches per call of the compiled loop (`BatchedSearch.run_compiled`) when a deadline or a stop
event must be checked between calls."""


class BatchedSearch:
    """One batched PUCT or Gumbel search, driven by `next_batch` / `submit`
    (docs/services/mcts.md, "The batched engine").

    Not thread-safe: one driver calls `next_batch` and `submit` alternately.

    Attributes:
        tree: the tree (`core.tree.Tree`; here every array is an int64 or float64 row of the
            search's two blocks).
        raw_value: float64 [N], each evaluated node's value for the player to move there.
        status: int64 [N], NEW, PENDING or EVALUATED.
    """

    def __init__(self, num_actions: int, simulations: int, config: BatchedConfig = DEFAULT_CONFIG,
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
        self._ints, self._floats = _root_blocks(
            self.capacity_for(num_actions, simulations, config), blocks)
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
        self.raw_value = floats[RAW_VALUE]
        self.status = ints[STATUS]
        self._rule = RULES[config.rule]
        self._vl = float(config.virtual_loss)
        self._scratch = np.zeros(MAX_ACTIONS, dtype=np.float64)
        # The kernels' records as plain tuples (`kernels.Blocks`, `BatchedOptions`), derived here:
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
        raise_for(code, row, values)
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
                     stop: threading.Event | None = None) -> SearchResult:
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
            raise_for(code, row, values)
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

    def result(self) -> SearchResult:
        """Statistics of the search so far (usually after `next_batch` returned None), with the
        search policy (`SearchResult.policy`) and the batch counts and times; `action` is -1 when
        the root has no child (a terminal root)."""
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
        return SearchResult(
            action=action, visits=visits, values=values, priors=priors, policy=policy,
            root_value=root_value, simulations=self._done, tree_size=tree.size,
            max_depth=tree.max_depth, tree_full=tree.full, elapsed_s=elapsed,
            simulations_per_second=self._done / elapsed if elapsed > 0 else 0.0,
            seed=self.config.seed, collisions=int(self._counters[COLLISIONS]),
            evaluations=self._evaluations, batches=self._batches,
            batch_selection_s=self.select_s, evaluation_s=self.evaluate_s,
            batch_backup_s=self.backup_s)

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


def _root_blocks(capacity: int, blocks: tuple[np.ndarray, np.ndarray] | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The int64 [7, capacity] and float64 [3, capacity] blocks of a new search: `blocks` when
    given (checked, the root's column cleared), else new zeroed ones, which the OS maps lazily
    (rows past the tree's size are never read).

    Raises:
        ValueError: blocks of the wrong shape or dtype, or not C-contiguous.
    """
    if blocks is None:
        return np.zeros((7, capacity), dtype=np.int64), np.zeros((3, capacity), dtype=np.float64)
    ints, floats = blocks
    if not (ints.shape == (7, capacity) and ints.dtype == np.int64
            and floats.shape == (3, capacity) and floats.dtype == np.float64
            and ints.flags.c_contiguous and floats.flags.c_contiguous):
        raise ValueError(f"blocks must be C-contiguous int64 [7, {capacity}] and "
                         f"float64 [3, {capacity}]")
    ints[:, 0] = 0
    floats[:, 0] = 0.0
    return ints, floats


def run_batched(search: BatchedSearch,
                evaluate: Callable[[LeafBatch], tuple[np.ndarray, np.ndarray, np.ndarray]],
                deadline: float | None = None, stop: threading.Event | None = None
                ) -> SearchResult:
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
