"""The neural service's Solve RPC against the trainer's held-out evaluation, on a real checkpoint.

Regenerates the held-out puzzles the trainer evaluated a checkpoint on (its task and seed are in
the checkpoint's metadata), runs `evaluate()` on them in both halting modes, then serves the
checkpoint from an in-process grpc.aio neural server on port 0 and sends every puzzle as a Solve
call (`--concurrency` in flight), and prints both rates side by side with the Solve latency
(server-side, batching wait included) and the forward passes the dynamic batcher ran.

    .venv/bin/python bench/solve_service.py CHECKPOINT_DIR [--puzzles N] [--segments S]
        [--concurrency C] [--max-wait-ms MS] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import grpc
from mesh.neural.v1 import neural_service_pb2 as pb
from mesh.neural.v1 import neural_service_pb2_grpc

from libs.server import start_server
from services.neural.checkpoint import load_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.main import build_servicers
from services.neural.reasoning_solver import ReasoningSolver
from services.neural.reasoning_task import task_from_metadata
from services.neural.settings import NeuralSettings
from training.reasoning.data import MazeTask, SudokuTask, held_out_set
from training.reasoning.evaluation import evaluate

NAME = "bench-model"
MODES = {"paper": pb.HALTING_MODE_PAPER, "act": pb.HALTING_MODE_ACT}


def _training_task(metadata: dict) -> SudokuTask | MazeTask:
    kinds = {"SudokuTask": SudokuTask, "MazeTask": MazeTask}
    return kinds[metadata["task_kind"]](**metadata["task"])


async def _serve_and_solve(models_dir: Path, puzzles: list[str], segments: int, mode: str,
                           concurrency: int, max_wait_ms: float) -> dict:
    settings = NeuralSettings(port=0, models_dir=models_dir, device="cpu",
                              max_wait_ms=max_wait_ms)
    evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                  settings.max_wait_ms)
    solver = ReasoningSolver(lambda: evaluator.registry, settings.max_batch,
                             settings.max_wait_ms)
    servicers, ready = await build_servicers(settings, evaluator, solver)
    server = await start_server("neural", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = neural_service_pb2_grpc.NeuralServiceStub(channel)
    gate = asyncio.Semaphore(concurrency)

    async def one(grid: str):
        async with gate:
            return await stub.Solve(pb.SolveRequest(model=NAME, grid=grid,
                                                    halting_mode=MODES[mode],
                                                    max_segments=segments), timeout=600)

    try:
        started = time.perf_counter()
        replies = await asyncio.gather(*(one(p) for p in puzzles))
        wall = time.perf_counter() - started
        batcher = solver.batcher(NAME)
        return {"replies": replies, "wall_s": wall, "forward_passes": batcher.forward_passes,
                "rows_run": batcher.rows_run}
    finally:
        await channel.close()
        await server.stop(0)
        await evaluator.close()
        await solver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--puzzles", type=int, default=None,
                        help="first N held-out puzzles (default: all the trainer evaluated)")
    parser.add_argument("--segments", type=int, default=None,
                        help="default: the trainer's evaluation segments")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.puzzles, args.concurrency = args.puzzles or 4, 4

    with tempfile.TemporaryDirectory() as folder:
        models_dir = Path(folder)
        # A copy, so a trainer rewriting the checkpoint meanwhile cannot mix two versions.
        shutil.copytree(args.checkpoint, models_dir / NAME)
        checkpoint = load_checkpoint(models_dir / NAME)
        metadata = checkpoint.metadata
        settings = metadata["settings"]
        held_out = held_out_set(_training_task(metadata), settings["eval_puzzles"],
                                settings["seed"] + 1)
        if args.puzzles is not None:
            held_out = held_out.slice(0, args.puzzles)
        segments = (args.segments or settings.get("eval_segments")
                    or settings.get("halt_max_steps") or checkpoint.model.config.halt_max_steps)
        task = task_from_metadata(metadata)
        puzzles = [task.decode(row) for row in held_out.inputs.numpy()]
        solutions = [task.decode(row) for row in held_out.labels.numpy()]
        rows = []
        for mode in MODES:
            started = time.perf_counter()
            expected = evaluate(checkpoint.model, held_out, segments, mode)
            evaluate_s = time.perf_counter() - started
            served = asyncio.run(_serve_and_solve(models_dir, puzzles, segments, mode,
                                                  args.concurrency, args.max_wait_ms))
            replies = served["replies"]
            latencies = sorted(r.latency_ms for r in replies)
            exact = sum(r.grid == s for r, s in zip(replies, solutions, strict=True))
            rows.append({
                "mode": mode, "puzzles": len(puzzles), "segments": segments,
                "evaluate_exact": expected.exact_accuracy,
                "solve_exact": exact / len(puzzles),
                "evaluate_mean_segments": expected.mean_segments,
                "solve_mean_segments": statistics.fmean(r.segments_used for r in replies),
                "evaluate_s": evaluate_s, "solve_wall_s": served["wall_s"],
                "latency_p50_ms": latencies[len(latencies) // 2],
                "latency_p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
                "forward_passes": served["forward_passes"], "rows_run": served["rows_run"],
            })
    if args.json:
        print(json.dumps({"checkpoint": str(args.checkpoint), "version": checkpoint.version,
                          "step": metadata.get("step"), "rows": rows}, indent=2))
        return
    print(f"checkpoint {args.checkpoint} version {checkpoint.version} step {metadata.get('step')}")
    print("mode   puzzles  seg  evaluate exact  Solve exact  eval seg  Solve seg  "
          "p50 ms  p95 ms  passes  eval s  Solve s")
    for row in rows:
        print(f"{row['mode']:<5}  {row['puzzles']:>7}  {row['segments']:>3}  "
              f"{row['evaluate_exact']:>14.4f}  {row['solve_exact']:>11.4f}  "
              f"{row['evaluate_mean_segments']:>8.3f}  {row['solve_mean_segments']:>9.3f}  "
              f"{row['latency_p50_ms']:>6.1f}  {row['latency_p95_ms']:>6.1f}  "
              f"{row['forward_passes']:>6}  {row['evaluate_s']:>6.1f}  {row['solve_wall_s']:>7.1f}")


if __name__ == "__main__":
    main()
