"""Batched PUCT / Gumbel search of services/mcts/batched/search.py driven by a small MuZero-style
MLP.

The model (numpy, float32, weights drawn from `seed`): representation `h(o)` maps an observation
(float32 [embedding]) to an embedding (float32 [embedding]); dynamics `g(s, a)` maps an embedding
and a one-hot action to the next embedding; prediction `f(s)` gives policy logits [A] and a value
`tanh(.)`. Each layer is `tanh(W x + b)` with one hidden layer of `embedding` units, so the
network is the same size as the MLPs usually run with mctx. Leaf b of a batch gets
`g(s[parent_b], a_b)` and `f` of that, evaluated for the whole batch at once; the embeddings are
kept per node id.

`ours_puct_mlp_compiled` runs the same search compiled (`BatchedSearch.run_compiled`) with the
same model as the njit evaluator `mlp_evaluate` (weights in `MlpArrays`, one embedding row per
node id); it measures the network's share by replaying the evaluator on the search's leaves (see
its doc).

`ours_puct_mlp` returns the total seconds of the search, the seconds spent in the network (numpy
matmuls), and our own overhead per simulation in microseconds `(total - network) / simulations *
1e6`: selection, expansion, backup, the ask/tell calls and the embedding bookkeeping. Both in
wall-clock time and in CPU time of the process (`time.process_time`); `overhead_us_per_sim` is
the CPU-time one, which preemption by other processes on a busy machine does not inflate.

    .venv/bin/python bench/mcts_puct.py [--actions 16] [--simulations 800] [--embedding 64]
        [--searches 64] [--rule puct|gumbel] [--batch-size 1] [--driver compiled|asktell]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import namedtuple

import numpy as np
from numba import njit

from services.mcts.batched.kernels import EVALUATED
from services.mcts.batched.search import BatchedSearch
from services.mcts.core.config import BatchedConfig


class MlpMuZero:
    """A MuZero-style model of three MLPs (see the module doc); all arrays float32."""

    def __init__(self, num_actions: int, embedding: int, seed: int) -> None:
        rng = np.random.default_rng(seed)

        def layer(fan_in: int, fan_out: int) -> tuple[np.ndarray, np.ndarray]:
            weight = rng.normal(0.0, 1.0 / np.sqrt(fan_in), size=(fan_in, fan_out))
            return weight.astype(np.float32), np.zeros(fan_out, dtype=np.float32)

        self.num_actions = num_actions
        self.embedding = embedding
        self.representation = [layer(embedding, embedding), layer(embedding, embedding)]
        self.dynamics = [layer(embedding + num_actions, embedding), layer(embedding, embedding)]
        self.prediction = [layer(embedding, embedding), layer(embedding, num_actions + 1)]
        self.eye = np.eye(num_actions, dtype=np.float32)
        self._store = np.zeros((0, embedding), dtype=np.float32)

    def state_store(self, max_nodes: int) -> np.ndarray:
        """A float32 [>= max_nodes, E] embedding store kept across searches (grown when too
        small), for `mlp_arrays`: a search writes a node's row when it evaluates the node, before
        any child reads it, so rows left by an earlier search are never read, and the pages of a
        fresh store are not faulted in again by every search (as mctx's buffers, which XLA's
        allocator reuses). One search at a time per model."""
        if self._store.shape[0] < max_nodes:
            self._store = np.zeros((max_nodes, self.embedding), dtype=np.float32)
        return self._store

    @staticmethod
    def _mlp(layers, x: np.ndarray) -> np.ndarray:
        hidden = np.tanh(x @ layers[0][0] + layers[0][1])
        return hidden @ layers[1][0] + layers[1][1]

    def represent(self, observation: np.ndarray) -> np.ndarray:
        """float32 [B, E] -> embeddings float32 [B, E]."""
        return np.tanh(self._mlp(self.representation, observation))

    def recurrent(self, embeddings: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Next embeddings float32 [B, E] after int64 `actions` [B]."""
        x = np.concatenate([embeddings, self.eye[actions]], axis=1)
        return np.tanh(self._mlp(self.dynamics, x))

    def predict(self, embeddings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Priors float64 [B, A] (softmax of the logits) and values float64 [B] in (-1, 1)."""
        out = self._mlp(self.prediction, embeddings)
        logits = out[:, :-1]
        logits = np.exp(logits - logits.max(axis=1, keepdims=True))
        priors = logits / logits.sum(axis=1, keepdims=True)
        return priors.astype(np.float64), np.tanh(out[:, -1]).astype(np.float64)


MlpArrays = namedtuple("MlpArrays", [
    "representation_w1", "representation_b1", "representation_w2", "representation_b2",
    "dynamics_w1", "dynamics_b1", "dynamics_w2", "dynamics_b2",
    "prediction_w1", "prediction_b1", "prediction_w2", "prediction_b2",
    "observation", "states", "hidden", "output"])
"""`MlpMuZero`'s weights as the njit evaluator `mlp_evaluate` takes them (its `model` argument),
all float32 and C-contiguous: weights transposed, [fan_out, fan_in] (each output's weights in one
contiguous row, so a layer is fan_out dot products that LLVM vectorises), and biases [fan_out] of
each layer (E = embedding, A = actions; dynamics_w1 is [E, E + A]), the root `observation` [E],
the embedding of every evaluated node `states` [max_nodes, E] (written by the evaluator, row =
node id), and scratch rows `hidden` [E] and `output` [max(E, A + 1)]."""


def mlp_arrays(model: MlpMuZero, observation: np.ndarray, max_nodes: int,
               states: np.ndarray | None = None) -> MlpArrays:
    """`model`'s weights (shared, not copied) with the root `observation` (float32 [1, E] or [E])
    and the embedding store `states` (float32 [>= max_nodes, E], e.g. `model.state_store`; by
    default a new zeroed one, whose pages are mapped lazily: only rows written cost memory)."""
    e, a = model.embedding, model.num_actions
    layers = [array for pair in model.representation + model.dynamics + model.prediction
              for array in pair]
    if states is None:
        states = np.zeros((max_nodes, e), dtype=np.float32)
    if states.shape[0] < max_nodes or states.shape[1] != e or states.dtype != np.float32:
        raise ValueError(f"states must be float32 [>= {max_nodes}, {e}]")
    layers = [layer.T if layer.ndim == 2 else layer for layer in layers]
    return MlpArrays(*[np.ascontiguousarray(x, dtype=np.float32) for x in layers],
                     np.ascontiguousarray(observation, dtype=np.float32).reshape(e), states,
                     np.zeros(e, dtype=np.float32), np.zeros(max(e, a + 1), dtype=np.float32))


# tanh(x) ~ x P(x^2) / Q(x^2) on [-9, 9] (float32; |x| > 9 is clamped, tanh(9) = 1 - 3e-8), a
# rational fit of degrees 4 / 4 in x^2 made for this benchmark by weighted least squares
# (Sanathanan-Koerner iteration, 60 rounds, 40,000 points in [0, 9]): largest error 3.6e-7 against
# numpy's float32 tanh. Libm's tanhf is a call per element (~25 ns here, 193 per leaf: most of
# the network's time); this is a dozen vectorisable multiply-adds. The njit functions below use
# numpy's error model: Python's adds a zero check to each division, and that branch alone kept
# the tanh loops scalar (1.75 ns an element instead of 0.24).
_TANH_P = tuple(np.float32(c) for c in (0.9999999428251926, 0.1338815829144772,
                                       0.003504209028590563, 2.075648451668457e-05,
                                       1.3568730870935033e-08))
_TANH_Q = tuple(np.float32(c) for c in (1.0, 0.4672146662311156, 0.02590939984430159,
                                       0.00032999769305642606, 7.862123471695889e-07))
_TANH_LIMIT = np.float32(9.0)
_ONE = np.float32(1.0)


@njit(cache=True, nogil=True, fastmath=True, inline="always", error_model="numpy")
def fast_tanh(value):
    """tanh of a float32 within 4e-7 of numpy's, in [-1, 1] (see the fit above)."""
    x = min(max(value, -_TANH_LIMIT), _TANH_LIMIT)
    u = x * x
    p0, p1, p2, p3, p4 = _TANH_P
    q0, q1, q2, q3, q4 = _TANH_Q
    p = (((p4 * u + p3) * u + p2) * u + p1) * u + p0
    q = (((q4 * u + q3) * u + q2) * u + q1) * u + q0
    return min(max(x * p / q, -_ONE), _ONE)


@njit(cache=True, nogil=True, fastmath=True, inline="always", error_model="numpy")
def _dense(x, weight, bias, out, activate):
    """out[:fan_out] = weight @ x + bias for `weight` float32 [fan_out, fan_in] (transposed: one
    dot product per output, vectorised with reassociated sums under fastmath), then tanh when
    `activate` (in a loop of its own, which vectorises too)."""
    fan_out, fan_in = weight.shape
    for j in range(fan_out):
        total = np.float32(0.0)
        row = weight[j]
        for i in range(fan_in):
            total += x[i] * row[i]
        out[j] = total + bias[j]
    if activate:
        for j in range(fan_out):
            out[j] = fast_tanh(out[j])


@njit(cache=True, nogil=True, fastmath=True, inline="always", error_model="numpy")
def mlp_evaluate(model, nodes, parents, actions, priors, values, terminal):
    """`MlpMuZero` as an njit evaluator for `BatchedSearch.run_compiled`: the numpy model's
    numbers within 1e-6 (the same layers in float32, summed in another order under fastmath, with
    `fast_tanh` for numpy's tanh; its 4e-7 error passes through layers of weights ~ 1 /
    sqrt(fan_in)). Leaf b (node `nodes[b]`) gets the embedding `h(observation)` when
    `parents[b] < 0` (the root), else `g(states[parents[b]], actions[b])` (the one-hot action's
    product is one weight column), stored into `model.states[nodes[b]]`; then `priors[b]`
    (float64 [A], softmax of the logits) and `values[b]` (float64, tanh of the value head) from
    `f`; `terminal[b]` = False. No allocation: scratch rows come from `model`."""
    e = model.states.shape[1]
    num_actions = priors.shape[1]
    hidden = model.hidden
    output = model.output
    for b in range(nodes.shape[0]):
        state = model.states[nodes[b]]
        if parents[b] < 0:
            _dense(model.observation, model.representation_w1, model.representation_b1, hidden,
                   True)
            _dense(hidden, model.representation_w2, model.representation_b2, output, False)
        else:
            source = model.states[parents[b]]
            column = e + actions[b]
            for j in range(e):
                row = model.dynamics_w1[j]
                total = np.float32(0.0)
                for i in range(e):
                    total += source[i] * row[i]
                hidden[j] = total + row[column] + model.dynamics_b1[j]
            for j in range(e):
                hidden[j] = fast_tanh(hidden[j])
            _dense(hidden, model.dynamics_w2, model.dynamics_b2, output, False)
        for j in range(e):
            state[j] = fast_tanh(output[j])
        _dense(state, model.prediction_w1, model.prediction_b1, hidden, True)
        _dense(hidden, model.prediction_w2, model.prediction_b2, output, False)
        top = output[0]
        for a in range(1, num_actions):
            top = max(top, output[a])
        total = np.float32(0.0)
        for a in range(num_actions):
            output[a] = math.exp(output[a] - top)
            total += output[a]
        for a in range(num_actions):
            priors[b, a] = output[a] / total
        values[b] = fast_tanh(output[num_actions])
        terminal[b] = False


def ours_puct_mlp(num_actions: int, simulations: int, embedding: int = 64, seed: int = 0, *,
                  rule: str = "puct", batch_size: int = 1, virtual_loss: float = 1.0,
                  players: int = 2, model: MlpMuZero | None = None) -> dict:
    """Times one search of `simulations` simulations over `num_actions` actions with the MLP
    evaluator (embedding width `embedding`), PUCT c_puct 1.25 or Gumbel (m = 16).

    Returns:
        {"total_s", "network_s", "total_cpu_s", "network_cpu_s", "overhead_us_per_sim" (CPU),
         "overhead_wall_us_per_sim", "simulations", "action", "evaluations",
         "batches", "collisions", "select_s", "backup_s"}; seconds are wall-clock.
    """
    model = model or MlpMuZero(num_actions, embedding, seed)
    observation = np.random.default_rng(seed + 1).normal(size=(1, embedding)).astype(np.float32)
    config = BatchedConfig(rule=rule, c_puct=1.25, virtual_loss=virtual_loss,
                           batch_size=batch_size, seed=seed)
    started = time.perf_counter()
    started_cpu = time.process_time()
    network = 0.0
    network_cpu = 0.0
    search = BatchedSearch(num_actions, simulations, config, players=players)
    # Embeddings by node id (zero pages are mapped lazily: only the rows written cost memory).
    states = np.zeros((search.tree.capacity, embedding), dtype=np.float32)
    terminal = np.zeros(batch_size, dtype=np.bool_)
    while (batch := search.next_batch()) is not None:
        tick = time.perf_counter()
        tick_cpu = time.process_time()
        if batch.batch_id == 0:
            embeddings = model.represent(observation)
        else:
            embeddings = model.recurrent(states[batch.parents], batch.actions)
        priors, values = model.predict(embeddings)
        network_cpu += time.process_time() - tick_cpu
        network += time.perf_counter() - tick
        states[batch.nodes] = embeddings
        search.submit(priors, values, terminal[:len(batch.nodes)])
    result = search.result()
    total_cpu = time.process_time() - started_cpu
    total = time.perf_counter() - started
    return {
        "total_s": total,
        "network_s": network,
        "total_cpu_s": total_cpu,
        "network_cpu_s": network_cpu,
        "overhead_us_per_sim": (total_cpu - network_cpu) / simulations * 1e6,
        "overhead_wall_us_per_sim": (total - network) / simulations * 1e6,
        "simulations": result.simulations,
        "action": result.action,
        "evaluations": result.evaluations,
        "batches": result.batches,
        "collisions": result.collisions,
        "select_s": result.batch_selection_s,
        "backup_s": result.batch_backup_s,
    }


_TREE_BLOCKS: dict[int, tuple[np.ndarray, np.ndarray]] = {}
"""The tree blocks of the last compiled search of each capacity, reused by the next one
(`BatchedSearch(blocks=...)`), as the embedding store is (`MlpMuZero.state_store`)."""


def ours_puct_mlp_compiled(num_actions: int, simulations: int, embedding: int = 64,
                           seed: int = 0, *, rule: str = "puct", batch_size: int = 1,
                           virtual_loss: float = 1.0, players: int = 2,
                           model: MlpMuZero | None = None) -> dict:
    """As `ours_puct_mlp`, with the whole search compiled: `BatchedSearch.run_compiled` with the
    njit evaluator `mlp_evaluate` (no Python per simulation).

    The network's share cannot be timed per call inside the compiled loop (a clock read per leaf
    would cost as much as a small descent), so it is measured apart: after the search, the same
    evaluator is run once more, from one call, on exactly the leaves the search evaluated (the
    root and every expanded or evaluated node, with their parents and actions; each leaf costs
    the same whatever batch it was in, since `mlp_evaluate` loops over leaves), and that time is
    `network_s` / `network_cpu_s`. It rewrites the same embeddings. The replay runs in a tight
    loop with warm caches, so it may underestimate the network's time inside the search a
    little and the overhead `(total - network) / simulations` errs high, not low.

    Memory is reused across searches, as a service running search after search would (and as
    XLA's allocator reuses mctx's buffers): the tree blocks of the previous search of the same
    capacity and the model's embedding store. A fresh 64 x 800 search would touch about 4 MiB of
    new tree pages (64 children of 80 bytes per evaluation) and a page of embeddings per leaf:
    ~2,000 page faults, several milliseconds on this machine, more than the search itself.

    Returns:
        the keys of `ours_puct_mlp` ("select_s" and "backup_s" are 0: the compiled loop is not
        split into phases).
    """
    model = model or MlpMuZero(num_actions, embedding, seed)
    observation = np.random.default_rng(seed + 1).normal(size=(1, embedding)).astype(np.float32)
    config = BatchedConfig(rule=rule, c_puct=1.25, virtual_loss=virtual_loss,
                           batch_size=batch_size, seed=seed)
    started = time.perf_counter()
    started_cpu = time.process_time()
    capacity = BatchedSearch.capacity_for(num_actions, simulations, config)
    search = BatchedSearch(num_actions, simulations, config, players=players,
                           blocks=_TREE_BLOCKS.pop(capacity, None))
    arrays = mlp_arrays(model, observation, capacity, model.state_store(capacity))
    result = search.run_compiled(mlp_evaluate, arrays)
    total_cpu = time.process_time() - started_cpu
    total = time.perf_counter() - started
    _TREE_BLOCKS[capacity] = search.blocks
    network, network_cpu = _replay_network(search, arrays)
    return {
        "total_s": total,
        "network_s": network,
        "total_cpu_s": total_cpu,
        "network_cpu_s": network_cpu,
        "overhead_us_per_sim": (total_cpu - network_cpu) / simulations * 1e6,
        "overhead_wall_us_per_sim": (total - network) / simulations * 1e6,
        "simulations": result.simulations,
        "action": result.action,
        "evaluations": result.evaluations,
        "batches": result.batches,
        "collisions": result.collisions,
        "select_s": 0.0,
        "backup_s": 0.0,
    }


def _replay_network(search: BatchedSearch, arrays: MlpArrays) -> tuple[float, float]:
    """Wall and CPU seconds of `mlp_evaluate` on the leaves `search` evaluated, in one call."""
    size = search.tree.size
    nodes = np.flatnonzero(search.status[:size] == EVALUATED).astype(np.int64)
    parents = search.tree.parent[nodes].astype(np.int64)
    actions = search.tree.action[nodes].astype(np.int64)
    priors = np.zeros((len(nodes), search.num_actions), dtype=np.float64)
    values = np.zeros(len(nodes), dtype=np.float64)
    terminal = np.zeros(len(nodes), dtype=np.bool_)
    started, started_cpu = time.perf_counter(), time.process_time()
    mlp_evaluate(arrays, nodes, parents, actions, priors, values, terminal)
    return time.perf_counter() - started, time.process_time() - started_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=16)
    parser.add_argument("--simulations", type=int, default=800)
    parser.add_argument("--embedding", type=int, default=64)
    parser.add_argument("--searches", type=int, default=64)
    parser.add_argument("--rule", default="puct", choices=["puct", "gumbel"])
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--driver", default="compiled", choices=["compiled", "asktell"])
    args = parser.parse_args()
    run = ours_puct_mlp_compiled if args.driver == "compiled" else ours_puct_mlp
    model = MlpMuZero(args.actions, args.embedding, 0)
    run(args.actions, 8, args.embedding, 0, rule=args.rule, model=model)  # JIT warm-up
    runs = [run(args.actions, args.simulations, args.embedding, seed, rule=args.rule,
                batch_size=args.batch_size, model=model)
            for seed in range(args.searches)]
    sims = sum(r["simulations"] for r in runs)
    summary = {"searches": args.searches, "simulations": args.simulations, "rule": args.rule,
               "batch_size": args.batch_size, "driver": args.driver}
    for key in ("total_s", "network_s", "total_cpu_s", "network_cpu_s"):
        summary[key] = sum(r[key] for r in runs)
    summary["overhead_us_per_sim"] = ((summary["total_cpu_s"] - summary["network_cpu_s"])
                                      / sims * 1e6)
    summary["overhead_wall_us_per_sim"] = (summary["total_s"] - summary["network_s"]) / sims * 1e6
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
