"""Self-play positions per second at 800 simulations with the shipped Connect Four network: our
batched PUCT (`training.az.games.search_many`, the loop's self-play driver: every
network call batches the leaves of all concurrent games) against `mctx.gumbel_muzero_policy`
(DeepMind's JAX MCTS) driving the same network in the same run.

The same network twice: `models/connect4-pv` in torch for ours, and its weights copied into a JAX
port of the same forward pass (batch norm folded as in eval mode; the port is checked against
torch on the bench's positions before timing, max |difference| printed). mctx needs the game in
JAX too: the embedding is the board (planes of the player to move and of the opponent, column
heights, a finished flag); a move that makes four in a row gives reward 1 to its player and ends
the game (discount 0 from then on); otherwise reward 0, discount -1 (two-player convention). The
whole mctx search (root network call and 800 simulations, each one network call over the batch
of games) is one `jax.jit` function, compiled before timing.

A self-play *step* searches every game's position once and plays the chosen move (ours: visit
shares at temperature 0 after Dirichlet noise; mctx: its Gumbel action); positions/s = games x
steps / seconds. Games start from `--opening-plies` random plies (seeded), the same for both.
The load average is printed beside the table: the machine is shared.

    .venv/bin/python bench/selfplay.py [--games 64] [--steps 2] [--simulations 800]

jax and mctx come from `make bench` (pyproject's `bench` extra); without them the mctx row is
skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from services.neural.checkpoint import load_checkpoint
from training.az import learner
from training.az.games import STANDARD_GAME, SearchOptions, search_many

try:  # benchmark-only dependencies
    import jax
    import jax.numpy as jnp
    import mctx
except ImportError:  # pragma: no cover - depends on the environment
    jax = jnp = mctx = None

boards = STANDARD_GAME
"""Connect Four 7x6's vectorised rules (`training.az.boards`)."""

ROWS, COLUMNS = 6, 7


def openings(games: int, plies: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Bitboards of `games` positions reached by `plies` random legal moves (no finished game)."""
    rng = np.random.default_rng(seed)
    positions, masks = [], []
    while len(positions) < games:
        position, mask = np.zeros(1, np.int64), np.zeros(1, np.int64)
        won = False
        for _ in range(plies):
            columns = np.flatnonzero(boards.legal(mask)[0])
            position, mask, won_now = boards.play(position, mask, rng.choice(columns, size=1))
            won = won or bool(won_now[0])
        if not won:
            positions.append(position[0])
            masks.append(mask[0])
    return np.array(positions), np.array(masks)


def ours(model, position, mask, steps: int, simulations: int, leaves: int,
         device: str = "cpu") -> dict:
    evaluate = learner.evaluator(model.to(device), device)
    options = SearchOptions(simulations=simulations, leaves_per_search=leaves)
    count = len(position)
    searched, calls, started = 0, 0, time.perf_counter()
    for step in range(steps):
        results, counters = search_many(position, mask, np.zeros(count, np.int64), [evaluate],
                                        options, np.arange(count) + 1000 * step,
                                        np.zeros(count))
        searched += count
        calls += counters.calls
        actions = np.array([r.action for r in results])
        position, mask, won = boards.play(position, mask, actions)
        keep = ~won & boards.legal(mask).any(axis=1)
        position, mask, count = position[keep], mask[keep], int(keep.sum())
    seconds = time.perf_counter() - started
    return {"positions": searched, "seconds": seconds, "network_calls": calls}


# --- the JAX port of Connect4PV (eval mode) and the game, for mctx ---------------------------


def jax_params(model) -> dict:
    """Torch state -> JAX arrays, batch norms folded into scale and shift."""
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}

    def bn(prefix):
        scale = state[f"{prefix}.weight"] / np.sqrt(state[f"{prefix}.running_var"] + 1e-5)
        return (jnp.asarray(scale), jnp.asarray(state[f"{prefix}.bias"]
                                                - state[f"{prefix}.running_mean"] * scale))

    params = {"stem": (jnp.asarray(state["stem.0.weight"]), *bn("stem.1")), "tower": []}
    for index in range(model.config.blocks):
        p = f"tower.{index}"
        params["tower"].append((jnp.asarray(state[f"{p}.conv1.weight"]), *bn(f"{p}.bn1"),
                                jnp.asarray(state[f"{p}.conv2.weight"]), *bn(f"{p}.bn2")))
    params["policy"] = (jnp.asarray(state["policy_conv.0.weight"]), *bn("policy_conv.1"),
                        jnp.asarray(state["policy_fc.weight"]),
                        jnp.asarray(state["policy_fc.bias"]))
    params["value"] = (jnp.asarray(state["value_conv.0.weight"]), *bn("value_conv.1"),
                       jnp.asarray(state["value_fc1.weight"]), jnp.asarray(state["value_fc1.bias"]),
                       jnp.asarray(state["value_fc2.weight"]), jnp.asarray(state["value_fc2.bias"]))
    return params


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _affine(x, scale, shift):
    return x * scale[None, :, None, None] + shift[None, :, None, None]


def jax_forward(params, planes, legal):
    """planes float32 [B, 2, 6, 7], legal bool [B, 7] -> logits [B, 7] (illegal -1e9), value [B]."""
    w, s, b = params["stem"]
    x = jax.nn.relu(_affine(_conv(planes, w), s, b))
    for w1, s1, b1, w2, s2, b2 in params["tower"]:
        y = jax.nn.relu(_affine(_conv(x, w1), s1, b1))
        x = jax.nn.relu(x + _affine(_conv(y, w2), s2, b2))
    w, s, b, fw, fb = params["policy"]
    p = jax.nn.relu(_affine(_conv(x, w), s, b)).reshape(planes.shape[0], -1)
    logits = jnp.where(legal, p @ fw.T + fb, -1e9)
    w, s, b, w1, b1, w2, b2 = params["value"]
    v = jax.nn.relu(_affine(_conv(x, w), s, b)).reshape(planes.shape[0], -1)
    value = jnp.tanh(jax.nn.relu(v @ w1.T + b1) @ w2.T + b2)[:, 0]
    return logits, value


def _four(plane):
    """bool [B]: four in a row on float32 [B, 6, 7] planes (convolutions with the 4 line shapes)."""
    kernels = np.zeros((4, 1, 4, 4), np.float32)
    kernels[0, 0, 0, :] = 1  # horizontal
    kernels[1, 0, :, 0] = 1  # vertical
    kernels[2, 0] = np.eye(4)  # diagonal
    kernels[3, 0] = np.fliplr(np.eye(4))  # anti-diagonal
    counts = jax.lax.conv_general_dilated(plane[:, None], jnp.asarray(kernels), (1, 1), "VALID",
                                          dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return (counts >= 4).any(axis=(1, 2, 3))


def jax_step(embedding, action):
    """Plays `action` [B] in every game; returns (embedding, reward for the mover, discount)."""
    planes, heights, done = embedding
    batch = jnp.arange(planes.shape[0])
    row = heights[batch, action]
    mover = planes[:, 0].at[batch, jnp.minimum(row, ROWS - 1), action].set(1.0)
    won = _four(mover) & ~done
    heights = heights.at[batch, action].add(1)
    full = (heights >= ROWS).all(axis=1)
    new_planes = jnp.stack([planes[:, 1], mover], axis=1)
    reward = jnp.where(won, 1.0, 0.0)
    new_done = done | won | full
    discount = jnp.where(new_done, 0.0, -1.0)
    return (new_planes, heights, new_done), reward, discount


def build_mctx_search(params, simulations: int):
    def recurrent_fn(params, rng, action, embedding):
        new_embedding, reward, discount = jax_step(embedding, action)
        planes, heights, done = new_embedding
        logits, value = jax_forward(params, planes, heights < ROWS)
        value = jnp.where(done, 0.0, value)
        output = mctx.RecurrentFnOutput(reward=reward, discount=discount, prior_logits=logits,
                                        value=value)
        return output, new_embedding

    @jax.jit
    def search(params, rng, planes, heights):
        done = jnp.zeros(planes.shape[0], dtype=bool)
        legal = heights < ROWS
        logits, value = jax_forward(params, planes, legal)
        root = mctx.RootFnOutput(prior_logits=logits, value=value,
                                 embedding=(planes, heights, done))
        output = mctx.gumbel_muzero_policy(params, rng, root, recurrent_fn, simulations,
                                           invalid_actions=~legal)
        return output.action

    return search


def heights_of(mask: np.ndarray) -> np.ndarray:
    cells = boards.encode(mask, mask)[:, 0]  # [B, 6, 7], 1 where a stone is
    return cells.sum(axis=1).astype(np.int32)


def theirs(params, position, mask, steps: int, simulations: int) -> dict:
    search = build_mctx_search(params, simulations)
    planes = jnp.asarray(boards.encode(position, mask))
    heights = jnp.asarray(heights_of(mask))
    rng = jax.random.PRNGKey(0)
    compile_started = time.perf_counter()
    search(params, rng, planes, heights).block_until_ready()
    compile_s = time.perf_counter() - compile_started
    searched, started = 0, time.perf_counter()
    count = len(position)
    for step in range(steps):
        actions = np.asarray(search(params, jax.random.PRNGKey(step + 1), planes, heights))
        searched += count
        position, mask, won = boards.play(position, mask, actions.astype(np.int64))
        keep = ~won & boards.legal(mask).any(axis=1)
        position, mask, count = position[keep], mask[keep], int(keep.sum())
        planes = jnp.asarray(boards.encode(position, mask))
        heights = jnp.asarray(heights_of(mask))
    seconds = time.perf_counter() - started
    return {"positions": searched, "seconds": seconds, "compile_s": compile_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default="models/connect4-pv")
    parser.add_argument("--games", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--simulations", type=int, default=800)
    parser.add_argument("--leaves-per-search", type=int, default=8)
    parser.add_argument("--opening-plies", type=int, default=8)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where our network runs (bf16 autocast on CUDA, as the loop runs "
                             "it); mctx runs on JAX's default backend, printed beside the table")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.games, args.steps, args.simulations = 2, 1, 32
    torch.set_num_threads(args.torch_threads)
    model = load_checkpoint(args.checkpoint).model
    position, mask = openings(args.games, args.opening_plies, 0)
    rows = {"ours (batched PUCT, torch)": ours(model, position, mask, args.steps,
                                               args.simulations, args.leaves_per_search,
                                               args.device)}
    model = model.cpu()
    print(json.dumps({"ours": rows["ours (batched PUCT, torch)"]}), flush=True)
    skipped = None
    if mctx is None:
        skipped = "jax / mctx not installed (make bench installs them)"
    else:
        params = jax_params(model)
        planes = boards.encode(position, mask)
        legal = boards.legal(mask)
        torch_policy, torch_value = learner.evaluator(model, "cpu")(planes, legal)
        with jax.default_matmul_precision("float32"):  # GPUs default to TF32 / bf16 passes
            logits, value = jax_forward(params, jnp.asarray(planes), jnp.asarray(legal))
        jax_policy = np.asarray(jax.nn.softmax(logits, axis=-1))
        difference = float(max(np.abs(jax_policy - torch_policy).max(),
                               np.abs(np.asarray(value) - torch_value).max()))
        print(f"JAX port against torch on the {args.games} positions: max |difference| "
              f"{difference:.2e}")
        if difference > 1e-3:
            raise SystemExit("the JAX port does not match the torch network")
        rows["mctx.gumbel_muzero_policy (JAX, jit)"] = theirs(params, position, mask,
                                                              args.steps, args.simulations)
        print(json.dumps({"mctx": rows["mctx.gumbel_muzero_policy (JAX, jit)"]}), flush=True)
    load = os.getloadavg()
    print(f"\nself-play at {args.simulations} simulations, {args.games} concurrent games, "
          f"{args.steps} steps, network {args.checkpoint}, torch threads {args.torch_threads}, "
          f"ours on {args.device}, mctx on {jax.default_backend() if jax else '-'}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    base = rows["ours (batched PUCT, torch)"]
    base_rate = base["positions"] / base["seconds"]
    print(f"{'search':<40} {'positions':>9} {'seconds':>8} {'positions/s':>12} {'ours/this':>10}")
    for name, row in rows.items():
        rate = row["positions"] / row["seconds"]
        row["positions_per_s"] = round(rate, 3)
        print(f"{name:<40} {row['positions']:>9} {row['seconds']:>8.2f} {rate:>12.2f} "
              f"{base_rate / rate:>9.2f}x")
    if skipped:
        print(f"mctx.gumbel_muzero_policy: skipped ({skipped})")
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skipped}))


if __name__ == "__main__":
    main()
