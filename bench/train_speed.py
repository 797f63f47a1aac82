"""Training steps per second of every trainer preset, on the CPU and (where torch sees one) a GPU.

- trm / hrm presets: `services.neural.training.reasoning.train_reasoning` for `--seconds` of
  training (its `time_limit_s`; puzzles generated in the training loop, as the trainer does
  today), steps done / training seconds. The paper presets are large (5-27M parameters): on a CPU
  they may complete only a few steps in the budget.
- connect4-az: `mcts_mesh.training.az.learner.train_steps` (AdamW, CE + MSE) on self-play-shaped
  positions at the loop's batch size, for the default network (48 channels, 4 blocks) and a tiny
  one.
Every row of a device runs in this process, one after the other; the CPU rows give the baseline
the GPU rows are divided by. The machine is shared: the load average is printed beside the table.

    .venv/bin/python bench/train_speed.py [--seconds 20] [--presets trm-mlp-cpu-sudoku6 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch

from mcts_mesh.training.az import learner
from mcts_mesh.training.az.replay import Examples
from services.neural.models.presets import PRESETS
from services.neural.training.reasoning import train_reasoning

AZ_NETWORKS = {"connect4-az (48x4)": {"channels": 48, "blocks": 4, "value_hidden": 64},
               "connect4-az (16x1)": {"channels": 16, "blocks": 1, "value_hidden": 16}}


def reasoning_rate(preset: str, device: str, seconds: float, batch_size: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        report = train_reasoning(PRESETS[preset].architecture, preset, folder, steps=10**9,
                                 batch_size=batch_size, eval_every=10**9, eval_puzzles=8,
                                 time_limit_s=seconds, device=device, progress=False)
    return report["steps"] / report["train_seconds"]


def az_rate(network: dict[str, int], device: str, seconds: float, batch_size: int) -> float:
    rng = np.random.default_rng(0)
    rows = 20_000
    planes = (rng.random((rows, 2, 6, 7)) < 0.3).astype(np.float32)
    legal = np.ones((rows, 7), dtype=np.bool_)
    policy = rng.dirichlet(np.ones(7), size=rows).astype(np.float32)
    value = rng.choice([-1.0, 0.0, 1.0], size=rows).astype(np.float32)
    data = Examples(planes, legal, policy, value)
    model = learner.new_model(network, 0, device)
    learner.train_steps(model, data, 3, batch_size, 1e-3, 1e-4, device, rng)  # warm-up
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        learner.train_steps(model, data, 20, batch_size, 1e-3, 1e-4, device, rng)
        steps += 20
    if device == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="per row")
    parser.add_argument("--presets", nargs="*", default=sorted(PRESETS))
    parser.add_argument("--batch-size", type=int, default=64, help="trm/hrm")
    parser.add_argument("--az-batch-size", type=int, default=256)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for name in list(AZ_NETWORKS) + list(args.presets):
        rates = {}
        for device in devices:
            if name in AZ_NETWORKS:
                rates[device] = az_rate(AZ_NETWORKS[name], device, args.seconds,
                                        args.az_batch_size)
            else:
                rates[device] = reasoning_rate(name, device, args.seconds, args.batch_size)
        batch = args.az_batch_size if name in AZ_NETWORKS else args.batch_size
        rows.append({"preset": name, "batch": batch, **{f"{d}_steps_per_s": round(r, 3)
                                                        for d, r in rates.items()}})
        print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    print(f"\ntraining steps/s, {args.seconds:.0f} s per row, torch threads "
          f"{args.torch_threads}; devices: {', '.join(devices)}"
          f"{'' if 'cuda' in devices else ' (no GPU seen by torch: CPU rows only)'}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    header = f"{'preset':<26} {'batch':>5} {'cpu steps/s':>12}"
    if "cuda" in devices:
        header += f" {'cuda steps/s':>13} {'cuda/cpu':>9}"
    print(header)
    for row in rows:
        line = f"{row['preset']:<26} {row['batch']:>5} {row['cpu_steps_per_s']:>12.2f}"
        if "cuda" in devices:
            line += (f" {row['cuda_steps_per_s']:>13.2f} "
                     f"{row['cuda_steps_per_s'] / row['cpu_steps_per_s']:>8.1f}x")
        print(line)
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
