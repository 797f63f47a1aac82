"""Batched PUCT / Gumbel search of services/mcts/batched.py driven by a small MuZero-style MLP.

The model (numpy, float32, weights drawn from `seed`): representation `h(o)` maps an observation
(float32 [embedding]) to an embedding (float32 [embedding]); dynamics `g(s, a)` maps an embedding
and a one-hot action to the next embedding; prediction `f(s)` gives policy logits [A] and a value
`tanh(.)`. Each layer is `tanh(W x + b)` with one hidden layer of `embedding` units, so the
network is the same size as the MLPs usually run with mctx. Leaf b of a batch gets
`g(s[parent_b], a_b)` and `f` of that, evaluated for the whole batch at once; the embeddings are
kept per node id.

`ours_puct_mlp` returns the total seconds of the search, the seconds spent in the network (numpy
matmuls), and our own overhead per simulation in microseconds `(total - network) / simulations *
1e6`: selection, expansion, backup, the ask/tell calls and the embedding bookkeeping. Both in
wall-clock time and in CPU time of the process (`time.process_time`); `overhead_us_per_sim` is
the CPU-time one, which preemption by other processes on a busy machine does not inflate.

    .venv/bin/python bench/mcts_puct.py [--actions 16] [--simulations 800] [--embedding 64]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from services.mcts.batched import BatchedConfig, BatchedSearch


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
        "select_s": result.select_s,
        "backup_s": result.backup_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=16)
    parser.add_argument("--simulations", type=int, default=800)
    parser.add_argument("--embedding", type=int, default=64)
    parser.add_argument("--searches", type=int, default=64)
    parser.add_argument("--rule", default="puct", choices=["puct", "gumbel"])
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    ours_puct_mlp(args.actions, 8, args.embedding, 0, rule=args.rule)  # JIT / cache warm-up
    runs = [ours_puct_mlp(args.actions, args.simulations, args.embedding, seed, rule=args.rule,
                          batch_size=args.batch_size)
            for seed in range(args.searches)]
    sims = sum(r["simulations"] for r in runs)
    summary = {"searches": args.searches, "simulations": args.simulations, "rule": args.rule,
               "batch_size": args.batch_size}
    for key in ("total_s", "network_s", "total_cpu_s", "network_cpu_s"):
        summary[key] = sum(r[key] for r in runs)
    summary["overhead_us_per_sim"] = ((summary["total_cpu_s"] - summary["network_cpu_s"])
                                      / sims * 1e6)
    summary["overhead_wall_us_per_sim"] = (summary["total_s"] - summary["network_s"]) / sims * 1e6
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
