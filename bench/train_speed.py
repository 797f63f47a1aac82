"""Training steps per second of every trainer preset, on the CPU and (where torch sees one) a GPU.

- trm / hrm presets: `training.reasoning.trainer.train_reasoning` for `--seconds` of
  training (its `time_limit_s`), steps done / training seconds, once per `--data-workers` value
  (0: puzzles generated inside the step, in the training process; N: in N worker processes
  ahead of the step). Beside it, from the run's metrics: the step's own milliseconds (waiting
  for puzzles excluded), the milliseconds per step spent waiting for (or, with 0 workers,
  generating) puzzles, the fresh puzzles a step takes (its halted slots), and the generator's
  cost per puzzle timed alone in this process. The paper presets are large (5-27M parameters):
  on a CPU they may complete only a few steps in the budget.
- connect4-az: `training.az.learner.train_steps` (AdamW, CE + MSE) on self-play-shaped
  positions at the loop's batch size, for the default network (48 channels, 4 blocks) and a tiny
  one.
Every row of a device runs in this process, one after the other, the worker counts alternating
within a preset; the CPU rows give the baseline the GPU rows are divided by, and each preset's
first `--data-workers` value the baseline of its other rows. The machine is shared: the load
average is printed beside the table.

    .venv/bin/python bench/train_speed.py [--seconds 20] [--presets trm-mlp-cpu-sudoku6 ...]
        [--data-workers 0 1] [--rounds 2] [--skip-az] [--generation-only] [--devices cpu cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from services.neural.models.presets import PRESETS
from training.az import learner
from training.az.replay import Examples
from training.reasoning.data import PuzzleChunks
from training.reasoning.loop import METRICS_FILE
from training.reasoning.trainer import ReasoningConfig, task_for_preset, train_reasoning

AZ_NETWORKS = {"connect4-az (48x4)": {"channels": 48, "blocks": 4, "value_hidden": 64},
               "connect4-az (16x1)": {"channels": 16, "blocks": 1, "value_hidden": 16}}


def _generated(preset: str) -> bool:
    try:
        task_for_preset(preset)
    except ValueError:
        return False
    return True


def generation_ms(preset: str, chunks: int = 2, chunk_size: int = 16) -> float:
    """Milliseconds to generate and augment one training puzzle of the preset's task, here."""
    source = PuzzleChunks(task_for_preset(preset), 0, frozenset(), chunk_size)
    started = time.perf_counter()
    for index in range(chunks):
        source.chunk(index)
    return (time.perf_counter() - started) * 1000.0 / (chunks * chunk_size)


def reasoning_rate(preset: str, device: str, seconds: float, batch_size: int,
                   workers: int) -> dict[str, float]:
    """steps/s and the per-step means from the run's metrics (first step left out of the means:
    it fills every slot of the batch)."""
    with tempfile.TemporaryDirectory() as folder:
        report = train_reasoning(ReasoningConfig(
            PRESETS[preset].architecture, preset, folder, steps=10**9, batch_size=batch_size,
            eval_every=10**9, eval_puzzles=8, time_limit_s=seconds, device=device, progress=False,
            data_workers=workers))
        records = [json.loads(line) for line in
                   (Path(folder) / METRICS_FILE).read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"][1:] or \
        [r for r in records if r["kind"] == "train"]
    wait = float(np.mean([r["data_wait_s"] for r in steps]))
    return {"steps_per_s": report["steps"] / report["train_seconds"],
            "step_ms": (float(np.mean([r["step_time_s"] for r in steps])) - wait) * 1000.0,
            "data_wait_ms": wait * 1000.0,
            "fresh_per_step": float(np.mean([r["halted"] for r in steps])),
            "steps": report["steps"]}


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
    parser.add_argument("--presets", nargs="*", default=[p for p in sorted(PRESETS)
                                                          if _generated(p)],
                        help="default: every preset with a generated task (not the 30x30 ones)")
    parser.add_argument("--batch-size", type=int, default=64, help="trm/hrm")
    parser.add_argument("--data-workers", type=int, nargs="+", default=[0, 1],
                        help="trm/hrm: puzzle generator processes, one row each")
    parser.add_argument("--skip-az", action="store_true", help="no connect4-az rows")
    parser.add_argument("--generation-only", action="store_true",
                        help="only time the puzzle generator of each trm/hrm preset's task")
    parser.add_argument("--rounds", type=int, default=1,
                        help="trm/hrm: repeat the worker counts, alternating")
    parser.add_argument("--az-batch-size", type=int, default=256)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], default=["cpu", "cuda"],
                        help="cuda rows run only where torch sees a GPU")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.presets, args.data_workers = 1.0, ["trm-mlp-cpu-sudoku6"], [0]
        args.az_batch_size = 16
    torch.set_num_threads(args.torch_threads)
    devices = [d for d in args.devices if d == "cpu" or torch.cuda.is_available()]
    if args.generation_only:
        load = os.getloadavg()
        print(f"generation and augmentation, one process; load average {load[0]:.2f} "
              f"{load[1]:.2f} {load[2]:.2f}")
        for name in (p for p in args.presets if p in PRESETS):
            print(f"{name:<22} {task_for_preset(name)}: "
                  f"{generation_ms(name, chunks=4):8.2f} ms/puzzle", flush=True)
        return
    az_rows, rows = [], []
    for name in [] if args.skip_az else AZ_NETWORKS:
        rates = {device: az_rate(AZ_NETWORKS[name], device, args.seconds, args.az_batch_size)
                 for device in devices}
        az_rows.append({"preset": name, "batch": args.az_batch_size,
                        **{f"{d}_steps_per_s": round(r, 3) for d, r in rates.items()}})
        print(json.dumps(az_rows[-1]), flush=True)
    for name in (p for p in args.presets if p in PRESETS):
        generation = generation_ms(name)
        for device in devices:
            for round_index in range(args.rounds):
                order = args.data_workers if round_index % 2 == 0 else args.data_workers[::-1]
                for workers in order:
                    rate = reasoning_rate(name, device, args.seconds, args.batch_size, workers)
                    rows.append({"preset": name, "device": device, "batch": args.batch_size,
                                 "workers": workers, "round": round_index,
                                 "generation_ms_per_puzzle": round(generation, 2),
                                 **{k: round(v, 3) for k, v in rate.items()}})
                    print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    print(f"\ntraining steps/s, {args.seconds:.0f} s per row, torch threads "
          f"{args.torch_threads}; devices: {', '.join(devices)}"
          f"{'' if 'cuda' in devices else ' (no GPU seen by torch: CPU rows only)'}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if az_rows:
        header = f"{'preset':<26} {'batch':>5}" + "".join(f" {d + ' steps/s':>13}"
                                                           for d in devices)
        both = devices == ["cpu", "cuda"]
        print(header + (f" {'cuda/cpu':>9}" if both else ""))
        for row in az_rows:
            line = f"{row['preset']:<26} {row['batch']:>5}" + "".join(
                f" {row[d + '_steps_per_s']:>13.2f}" for d in devices)
            if both:
                line += f" {row['cuda_steps_per_s'] / row['cpu_steps_per_s']:>8.1f}x"
            print(line)
    if rows:
        print(f"\n{'preset':<22} {'device':>6} {'batch':>5} {'workers':>7} {'steps/s':>8} "
              f"{'vs first':>8} {'step ms':>8} {'wait ms':>8} {'fresh':>6} {'gen ms/puzzle':>13}")
        for row in rows:
            first = next(r for r in rows if r["preset"] == row["preset"]
                         and r["device"] == row["device"] and r["round"] == row["round"]
                         and r["workers"] == args.data_workers[0])
            print(f"{row['preset']:<22} {row['device']:>6} {row['batch']:>5} "
                  f"{row['workers']:>7} {row['steps_per_s']:>8.2f} "
                  f"{row['steps_per_s'] / first['steps_per_s']:>7.2f}x {row['step_ms']:>8.1f} "
                  f"{row['data_wait_ms']:>8.1f} {row['fresh_per_step']:>6.1f} "
                  f"{row['generation_ms_per_puzzle']:>13.2f}")
    if args.json:
        print(json.dumps(az_rows + rows))

if __name__ == "__main__":
    main()
