"""The mctx half of the batched PUCT benchmark: `mctx.muzero_policy` and
`mctx.gumbel_muzero_policy` (DeepMind's JAX MCTS, Danihelka et al. 2022) on JAX's CPU backend,
driven by the same MuZero-style MLP as `bench/mcts_puct.py` (`MlpMuZero`, the same float32
weights copied into JAX arrays).

One search: the representation and prediction networks on the root observation (float32
[1, embedding]) give the root's prior logits [1, A], value [1] and embedding [1, embedding]; then
the policy runs `simulations` simulations, each calling the dynamics and prediction networks on
one leaf (root batch 1, so every network call has batch 1). Two-player convention as in our
search: reward 0 and discount -1 on every transition (the value flips sign at each ply). PUCT
(`muzero_policy`) with no Dirichlet noise (ours has it off), twice: with our rule's Q scale
(`q_as_ours`, the like-for-like row) and with mctx's default Q normalisation (see `q_as_ours`);
Gumbel (`gumbel_muzero_policy`) with m = 16 considered actions and mctx's default sigma constants,
as in our Gumbel rule.

The whole search (root networks included) is one `jax.jit` function per (policy, actions,
simulations, embedding), compiled once by `MctxSearch.warm_up`; a timed search calls it with a new
PRNG key and waits for the result with `block_until_ready`.

Requires the benchmark-only packages `jax` (CPU) and `mctx`; `available()` says whether they import.
"""

from __future__ import annotations

import time

import numpy as np

try:  # benchmark-only dependencies: the table reports them as skipped when missing
    import jax
    import jax.numpy as jnp
    import mctx
except ImportError:  # pragma: no cover - depends on the environment
    jax = jnp = mctx = None

POLICIES = ("muzero_matched", "muzero", "gumbel")
"""`muzero_matched`: mctx.muzero_policy with our PUCT's Q scale (`q_as_ours`); `muzero`:
mctx.muzero_policy with its defaults (min-max normalised Q); `gumbel`: mctx.gumbel_muzero_policy."""


C_PUCT = 1.25
"""Our PUCT's c_puct in bench/mcts_puct.py."""


def available() -> str | None:
    """None when jax and mctx import, else the reason the mctx rows are skipped."""
    if mctx is None:
        return "jax / mctx not installed"
    return None


def versions() -> dict[str, str]:
    """Installed versions of jax, jaxlib and mctx ({} when missing)."""
    if mctx is None:
        return {}
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "mctx": mctx.__version__}


def q_as_ours(tree, node_index):
    """A qtransform giving mctx's PUCT our rule's Q: the mean value in [-1, 1] of a visited child,
    0 for an unvisited one (AlphaZero), mapped to [0, 1] by `(Q + 1) / 2`. With pb_c_init =
    c_puct / 2 and pb_c_base so large that its log term vanishes, mctx's score is half of
    `Q + c_puct * P * sqrt(N) / (1 + n)`, the same argmax, so both searches grow the same tree
    (up to ties). mctx's default (`qtransform_by_parent_and_siblings`, MuZero's min-max
    normalisation over the node and its siblings) stretches small value differences to [0, 1],
    which makes its PUCT much greedier: with this network its 800-simulation trees reach depth
    ~55 where ours (and this transform) stop at ~3, and a deeper descent costs more per
    simulation. Both are timed; the matched one is the like-for-like comparison."""
    qvalues = jnp.where(tree.children_visits[node_index] > 0, tree.qvalues(node_index), 0.0)
    return (qvalues + 1.0) / 2.0


def _to_jax(layers) -> list[tuple]:
    return [(jnp.asarray(weight), jnp.asarray(bias)) for weight, bias in layers]


def _mlp(layers, x):
    hidden = jnp.tanh(x @ layers[0][0] + layers[0][1])
    return hidden @ layers[1][0] + layers[1][1]


class MctxSearch:
    """One jitted mctx search over `model`'s weights (an `MlpMuZero` of bench/mcts_puct.py).

    Args:
        model: the MLP (numpy float32 weights; copied to JAX once).
        policy: one of POLICIES.
        simulations: simulations per search (static: one compilation per value).
    Raises:
        RuntimeError: jax or mctx is not installed.
        ValueError: unknown policy.
    """

    def __init__(self, model, policy: str, simulations: int) -> None:
        if mctx is None:
            raise RuntimeError(available())
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}")
        self.num_actions = model.num_actions
        self.simulations = simulations
        params = {
            "representation": _to_jax(model.representation),
            "dynamics": _to_jax(model.dynamics),
            "prediction": _to_jax(model.prediction),
        }
        self._params = params
        num_actions = model.num_actions

        def predict(params, embedding):
            out = _mlp(params["prediction"], embedding)
            return out[:, :-1], jnp.tanh(out[:, -1])

        def recurrent_fn(params, rng_key, action, embedding):
            del rng_key
            x = jnp.concatenate([embedding, jax.nn.one_hot(action, num_actions)], axis=1)
            next_embedding = jnp.tanh(_mlp(params["dynamics"], x))
            logits, value = predict(params, next_embedding)
            batch = action.shape[0]
            output = mctx.RecurrentFnOutput(reward=jnp.zeros(batch), discount=-jnp.ones(batch),
                                            prior_logits=logits, value=value)
            return output, next_embedding

        def search(params, rng_key, observation):
            embedding = jnp.tanh(_mlp(params["representation"], observation))
            logits, value = predict(params, embedding)
            root = mctx.RootFnOutput(prior_logits=logits, value=value, embedding=embedding)
            if policy == "muzero_matched":
                out = mctx.muzero_policy(params, rng_key, root, recurrent_fn,
                                         num_simulations=simulations, qtransform=q_as_ours,
                                         pb_c_init=C_PUCT / 2, pb_c_base=1e12,
                                         dirichlet_fraction=0.0)
            elif policy == "muzero":
                out = mctx.muzero_policy(params, rng_key, root, recurrent_fn,
                                         num_simulations=simulations, pb_c_init=C_PUCT,
                                         dirichlet_fraction=0.0)
            else:
                out = mctx.gumbel_muzero_policy(params, rng_key, root, recurrent_fn,
                                                num_simulations=simulations,
                                                max_num_considered_actions=16)
            tree = out.search_tree
            return out.action, tree.summary().visit_counts, tree.parents

        self._search = jax.jit(search)

    def run(self, observation: np.ndarray, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
        """One search from `observation` (float32 [1, embedding]); returns the chosen action, the
        root visit counts int32 [A] (they sum to `simulations`) and the tree's parent ids int32
        [simulations + 1] (-1 for the root and for unused rows)."""
        action, visits, parents = self._search(self._params, jax.random.PRNGKey(seed),
                                               jnp.asarray(observation))
        action.block_until_ready()
        return int(action[0]), np.asarray(visits[0]), np.asarray(parents[0])

    def warm_up(self, observation: np.ndarray) -> None:
        """Compiles the search (the first call traces and compiles; not timed)."""
        self.run(observation, 0)


def max_depth(parents: np.ndarray) -> int:
    """Deepest node below the root (plies) of an mctx tree given its parent ids (node i's parent
    has a smaller id; -1 for the root and for unused rows)."""
    depth = np.zeros(len(parents), dtype=np.int64)
    for node in range(1, len(parents)):
        if parents[node] >= 0:
            depth[node] = depth[parents[node]] + 1
    return int(depth.max())


def timed_search(search: MctxSearch, observation: np.ndarray, seed: int) -> dict:
    """Times one compiled search: {"total_s" (wall), "total_cpu_s" (process CPU, all threads),
    "action", "simulations", "max_depth" (computed after the timing)}."""
    started, started_cpu = time.perf_counter(), time.process_time()
    action, visits, parents = search.run(observation, seed)
    total_s = time.perf_counter() - started
    total_cpu_s = time.process_time() - started_cpu
    return {"total_s": total_s, "total_cpu_s": total_cpu_s, "action": action,
            "simulations": int(visits.sum()), "max_depth": max_depth(parents)}
