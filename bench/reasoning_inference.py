"""TRM / HRM inference through `solve_batch` (the neural service's Solve core) at batch 1 and at a
large batch: milliseconds per puzzle of the segment loop against the loop as it was before its
per-segment host synchronisations were removed, in the same process, interleaved.

The baseline (`run_segments_before`) is the earlier `reasoning_segments.run_segments`, kept here
unchanged for the comparison: under `torch.no_grad`, it read `bool(stopped.all())` after every
segment (a device-to-host copy that drains a GPU's queue), `int(max_segments.min()/max())` from
the device, and tracked halting for "paper" rows too. The candidate is the current
`run_segments`. Both run the shipped checkpoint on the same held-out puzzles; the bench first
checks that every answer, segment count and halting probability is identical.

On a CPU a synchronisation costs nothing, so the CPU rows show the loop's other overheads; the
GPU rows (printed where torch sees a GPU) are what the change is for. On a GPU a third variant,
"graphs", runs the current loop with each segment replayed from a CUDA graph
(`services.neural.cuda_graphs.GraphedSegments`, what the service does with
`NEURAL_CUDA_GRAPHS=true`); its answers are checked against the eager loop's too.

    .venv/bin/python bench/reasoning_inference.py [--checkpoint models/trm-sudoku6-b16]
        [--batches 1 1000] [--segments 8] [--rounds 5] [--modes paper act] [--torch-threads 1]
        [--devices cpu cuda] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from unittest import mock

import numpy as np
import torch
from torch import nn

from services.neural import reasoning_solver
from services.neural.checkpoint import load_checkpoint
from services.neural.cuda_graphs import GraphedSegments
from services.neural.models.precision import autocast
from services.neural.reasoning_segments import SegmentRun, halting_decision
from training.reasoning.data import MazeTask, SudokuTask, held_out_set


@torch.no_grad()
def run_segments_before(model: nn.Module, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor,
                        max_segments: torch.Tensor | int, act: torch.Tensor | bool,
                        stop_early: bool = True, step: None = None) -> SegmentRun:
    """The segment loop before this change (the baseline); see the module docstring. `step`
    (always None here) is the argument `solve_batch` now passes."""
    batch = inputs.shape[0]
    device = inputs.device
    max_segments = torch.as_tensor(max_segments, dtype=torch.int64, device=device).expand(batch)
    act = torch.as_tensor(act, dtype=torch.bool, device=device).expand(batch)
    if int(max_segments.min()) < 1:
        raise ValueError(f"max_segments must be >= 1, got {max_segments.tolist()}")
    carry = model.initial_carry(batch)
    predictions, q_halts, halts = [], [], []
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    used = max_segments.clone()
    for segment in range(1, int(max_segments.max()) + 1):
        with autocast(device):
            carry, output = model(carry, inputs, puzzle_identifiers)
        halt = halting_decision(output)
        predictions.append(output.logits.argmax(-1))
        q_halts.append(output.q_halt_logits.float())
        halts.append(halt)
        halting = ~stopped & act & halt
        used = torch.where(halting, torch.full_like(used, segment), used)
        stopped |= halting | (max_segments <= segment)
        if stop_early and bool(stopped.all()):
            break
    return SegmentRun(predictions=torch.stack(predictions), q_halt_logits=torch.stack(q_halts),
                      halts=torch.stack(halts), segments_used=used)


def solve(module: nn.Module, inputs: np.ndarray, segments: int, act: bool, variant: str,
          graphs: GraphedSegments | None = None):
    """`solve_batch` as the variant runs it: "before" (the old loop), "after" (the current loop,
    eager), "graphs" (the current loop over `graphs`)."""
    size = len(inputs)
    arguments = (module, inputs, np.full(size, segments, dtype=np.int64),
                 np.full(size, act, dtype=np.bool_))
    if variant == "graphs":
        return reasoning_solver.solve_batch(*arguments, step=graphs)
    if variant == "after":
        return reasoning_solver.solve_batch(*arguments)
    with mock.patch.object(reasoning_solver, "run_segments", run_segments_before):
        return reasoning_solver.solve_batch(*arguments)


def same_answers(first, second) -> bool:
    (p1, h1, u1), (p2, h2, u2) = first, second
    if not np.array_equal(u1, u2):
        return False
    return all(np.array_equal(p1[row, :used], p2[row, :used])
               and np.array_equal(h1[row, :used], h2[row, :used])
               for row, used in enumerate(u1))


def timed_ms_per_puzzle(module, inputs, segments, act, variant, device, graphs) -> float:
    started = time.perf_counter()
    solve(module, inputs, segments, act, variant, graphs)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1000.0 / len(inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default="models/trm-sudoku6-b16")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 1000])
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", nargs="+", choices=["paper", "act"], default=["paper", "act"])
    parser.add_argument("--batch1-calls", type=int, default=20,
                        help="puzzles timed one at a time per round at batch 1")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], default=["cpu", "cuda"],
                        help="cuda rows run only where torch sees a GPU")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.rounds, args.modes, args.batch1_calls = [1, 8], 1, ["act"], 2
    torch.set_num_threads(args.torch_threads)
    checkpoint = load_checkpoint(args.checkpoint)
    puzzles = _puzzles(checkpoint.metadata, max(args.batches))
    devices = [torch.device(d) for d in args.devices
               if d == "cpu" or torch.cuda.is_available()]
    rows = []
    for device in devices:
        module = checkpoint.model.to(device).eval()
        variants = ["before", "after"]
        graphs = None
        if device.type == "cuda":
            variants.append("graphs")
            graphs = GraphedSegments(module, max_batch=1 << (max(args.batches) - 1).bit_length())
        for batch in args.batches:
            for mode in args.modes:
                act = mode == "act"
                inputs = puzzles[:batch]
                reference = solve(module, inputs, args.segments, act, "after")
                for variant in variants:
                    if not same_answers(solve(module, inputs, args.segments, act, variant,
                                              graphs), reference):
                        raise SystemExit(f"answers of {variant} differ at batch {batch}, "
                                         f"mode {mode}")
                times: dict[str, list[float]] = {name: [] for name in variants}
                for round_index in range(args.rounds):
                    order = variants if round_index % 2 == 0 else variants[::-1]
                    for name in order:
                        if batch == 1:
                            calls = [timed_ms_per_puzzle(module, puzzles[i:i + 1],
                                                         args.segments, act, name, device,
                                                         graphs)
                                     for i in range(args.batch1_calls)]
                            times[name].append(statistics.median(calls))
                        else:
                            times[name].append(timed_ms_per_puzzle(
                                module, inputs, args.segments, act, name, device, graphs))
                medians = {name: statistics.median(values) for name, values in times.items()}
                row = {"device": device.type, "batch": batch, "mode": mode,
                       "before_ms_per_puzzle": round(medians["before"], 4),
                       "after_ms_per_puzzle": round(medians["after"], 4),
                       "speedup": round(medians["before"] / medians["after"], 3)}
                if "graphs" in medians:
                    row["graphs_ms_per_puzzle"] = round(medians["graphs"], 4)
                    row["graphs_speedup_over_after"] = round(medians["after"]
                                                             / medians["graphs"], 3)
                rows.append(row)
                print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    print(f"\n{args.checkpoint}, {args.segments} segments at most, medians of {args.rounds} "
          f"interleaved rounds, torch threads {args.torch_threads}; answers identical; load "
          f"average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
          f"{'' if torch.cuda.is_available() else '; no GPU seen by torch: CPU rows only'}")
    print(f"{'device':>6} {'batch':>6} {'mode':>6} {'before ms/puzzle':>17} "
          f"{'after ms/puzzle':>16} {'before/after':>13} {'graphs ms/puzzle':>17} "
          f"{'after/graphs':>13}")
    for row in rows:
        graphed = row.get("graphs_ms_per_puzzle")
        tail = (f" {graphed:>17.3f} {row['graphs_speedup_over_after']:>12.2f}x"
                if graphed is not None else f" {'-':>17} {'-':>13}")
        print(f"{row['device']:>6} {row['batch']:>6} {row['mode']:>6} "
              f"{row['before_ms_per_puzzle']:>17.3f} {row['after_ms_per_puzzle']:>16.3f} "
              f"{row['speedup']:>12.2f}x{tail}")
    if args.json:
        print(json.dumps(rows))


def _puzzles(metadata: dict, count: int) -> np.ndarray:
    """int32 [count, L]: held-out puzzles of the checkpoint's training task (the trainer's
    held-out seed, so none was trained on)."""
    kinds = {"SudokuTask": SudokuTask, "MazeTask": MazeTask}
    task = kinds[metadata["task_kind"]](**metadata["task"])
    return held_out_set(task, count, metadata["settings"]["seed"] + 1).inputs.numpy()


if __name__ == "__main__":
    main()
