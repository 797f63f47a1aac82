"""The neural service's dynamic batcher through one gRPC hop: latency at batch 1 and throughput
with 256 requests in flight, for the Connect Four policy/value network, on the CPU and (where
torch sees one) on a GPU.

    .venv/bin/python bench/batcher.py [--seconds 10] [--concurrency 256] [--devices cpu cuda]
        [--runtimes onnxruntime torch] [--cuda-runtimes torch cuda-graphs] [--max-wait-ms 2 0]
        [--json]

For each device and runtime (on the CPU onnxruntime, the default, and torch; on a GPU eager
torch and "cuda-graphs", torch replayed from CUDA graphs, `NEURAL_CUDA_GRAPHS`) and each
batcher wait (`NEURAL_MAX_WAIT_MS`: 2 ms, and 0, the default, which runs whatever is queued as
soon as the worker is free) it starts `mcts-mesh serve neural` on a free port with
`NEURAL_DEVICE` / `NEURAL_PV_RUNTIME` / `NEURAL_CUDA_GRAPHS` / `NEURAL_MAX_WAIT_MS` set, then over
one kept-alive grpc.aio channel:
1. **batch 1**: one `EvaluatePositions` call of one position at a time, closed loop: p50 / p99
   latency (ms);
2. **256 in flight**: `--concurrency` callers, each one position per call, closed loop: positions
   per second, p50 / p99 latency, and the mean batch the batcher formed (rows run / forward passes,
   from the service's `mesh_neural_batch_size` histogram on its metrics port).
Beside each service row, the same network's forward pass timed in this process without gRPC or
batcher (batch 1, and batch = the mean batch the service formed), run right after it: the ratio
is what the hop and the batcher cost. Positions are Pons' Test_L2_R1 (real mid-game boards).

Rows for a device torch cannot use are printed as "not measured" with the reason; CI never has a
GPU, so the CUDA rows are measured only where one is lent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import served
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2 as npb
from mesh.neural.v1 import neural_service_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "connect4-pons" / "Test_L2_R1"
MODEL = "connect4-pv"


def _moves(count: int) -> list[str]:
    lines = [line.split()[0] for line in DATA.read_text().splitlines() if line.strip()]
    return [lines[i % len(lines)] for i in range(count)]


def start_neural(work: Path, device: str, runtime: str, max_wait_ms: float
                 ) -> tuple[subprocess.Popen, str, int]:
    """`mcts-mesh serve neural` on free ports; returns the process, its gRPC target and its
    metrics port. Raises RuntimeError with the service's log when it does not start."""
    env = {"NEURAL_PORT": "0", "NEURAL_METRICS_PORT": "0", "NEURAL_DEVICE": device,
           "NEURAL_PV_RUNTIME": "torch" if runtime == "cuda-graphs" else runtime,
           "NEURAL_CUDA_GRAPHS": str(runtime == "cuda-graphs").lower(),
           "NEURAL_MAX_WAIT_MS": str(max_wait_ms),
           "NEURAL_MODELS_DIR": str(ROOT / "models")}
    process, ports = served.start_service("neural", env, work, cwd=ROOT,
                                          label=f"neural-{device}-{runtime}-{max_wait_ms:g}")
    return process, f"127.0.0.1:{ports['grpc']}", int(ports["metrics"])


def batch_counts(metrics_port: int) -> tuple[float, float]:
    """(forward passes, rows run) so far, from the service's `mesh_neural_batch_size`
    histogram."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    passes = rows = 0.0
    for line in text.decode().splitlines():
        if line.startswith("mesh_neural_batch_size_count"):
            passes += float(line.rsplit(" ", 1)[1])
        elif line.startswith("mesh_neural_batch_size_sum"):
            rows += float(line.rsplit(" ", 1)[1])
    return passes, rows


async def _closed_loop(stub, requests: list, concurrency: int, seconds: float
                       ) -> tuple[int, list[float]]:
    latencies: list[float] = []
    end = time.monotonic() + seconds

    async def caller(offset: int) -> None:
        index = offset
        while time.monotonic() < end:
            started = time.perf_counter()
            await stub.EvaluatePositions(requests[index % len(requests)], timeout=30)
            latencies.append((time.perf_counter() - started) * 1e3)
            index += concurrency

    await asyncio.gather(*(caller(i) for i in range(concurrency)))
    return len(latencies), latencies


async def measure_service(target: str, metrics_port: int, concurrency: int,
                          seconds: float) -> dict[str, float]:
    """Batch-1 latency, then throughput with `concurrency` single-position callers."""
    requests = [npb.EvaluatePositionsRequest(
        model=MODEL, positions=[common_pb2.ConnectFourPosition(moves=m)])
        for m in _moves(512)]
    async with grpc.aio.insecure_channel(target) as channel:
        stub = neural_service_pb2_grpc.NeuralServiceStub(channel)
        await _closed_loop(stub, requests, 1, 1.0)  # warm-up
        _, single = await _closed_loop(stub, requests, 1, seconds)
        await _closed_loop(stub, requests, concurrency, 1.0)
        passes_before, rows_before = batch_counts(metrics_port)
        count, loaded = await _closed_loop(stub, requests, concurrency, seconds)
        passes_after, rows_after = batch_counts(metrics_port)
    passes = passes_after - passes_before
    return {
        "batch1_p50_ms": statistics.median(single),
        "batch1_p99_ms": float(np.percentile(single, 99)),
        "loaded_positions_per_s": count / seconds,
        "loaded_p50_ms": statistics.median(loaded),
        "loaded_p99_ms": float(np.percentile(loaded, 99)),
        "mean_batch": (rows_after - rows_before) / passes if passes else 0.0,
    }


def measure_in_process(device: str, runtime: str, batch: int, seconds: float) -> float:
    """Positions per second of the bare forward pass at `batch` (no gRPC, no batcher)."""
    import torch

    from libs.connect4.board import Position, encode, legal_mask
    from services.neural.checkpoint import load_checkpoint
    from services.neural.cuda_graphs import GraphedPolicyValue
    from services.neural.models.connect4_onnx import OnnxPolicyValue
    from services.neural.models.connect4_pv import predict

    torch.set_num_threads(1)
    model = load_checkpoint(ROOT / "models" / MODEL, device=device).model
    boards = [Position.from_moves(m) for m in _moves(batch)]
    planes = np.stack([encode(b) for b in boards]).astype(np.float32)
    legal = np.stack([legal_mask(b) for b in boards])
    if runtime == "onnxruntime" and device == "cpu":
        runner = OnnxPolicyValue(model)

        def run() -> None:
            runner.predict(planes, legal)
    elif runtime == "cuda-graphs":
        graphed = GraphedPolicyValue(model, max_batch=batch)

        def run() -> None:
            graphed.predict(planes, legal)
    else:
        def run() -> None:
            predict(model, planes, legal)
    run()
    passes, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        run()
        passes += 1
    return passes * batch / seconds


def cuda_reason() -> str | None:
    """None when torch sees a GPU, else why the CUDA rows are not measured."""
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"], choices=["cpu", "cuda"])
    parser.add_argument("--runtimes", nargs="+", default=["onnxruntime", "torch"],
                        choices=["onnxruntime", "torch"], help="CPU runtimes")
    parser.add_argument("--cuda-runtimes", nargs="+", default=["torch", "cuda-graphs"],
                        choices=["torch", "cuda-graphs"],
                        help="GPU runtimes: eager torch, or torch replayed from CUDA graphs")
    parser.add_argument("--max-wait-ms", nargs="+", type=float, default=[2.0, 0.0],
                        help="the batcher's NEURAL_MAX_WAIT_MS values to run (0 is the default)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.concurrency, args.runtimes = 1.0, 8, args.runtimes[:1]
        args.cuda_runtimes, args.max_wait_ms = args.cuda_runtimes[:1], [0.0]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-batcher-") as work:
        for device in args.devices:
            reason = cuda_reason() if device == "cuda" else None
            runtimes = args.runtimes if device == "cpu" else args.cuda_runtimes
            for runtime, wait in ((r, w) for r in runtimes for w in args.max_wait_ms):
                row: dict = {"device": device, "runtime": runtime, "max_wait_ms": wait}
                if reason is not None:
                    rows.append(row | {"not_measured": reason})
                    break
                process, target, metrics_port = start_neural(Path(work), device, runtime, wait)
                try:
                    row |= asyncio.run(measure_service(target, metrics_port, args.concurrency,
                                                       args.seconds))
                finally:
                    process.terminate()
                    process.wait(30)
                batch = max(1, round(row["mean_batch"]))
                row["bare_batch1_positions_per_s"] = measure_in_process(device, runtime, 1,
                                                                        args.seconds / 2)
                row["bare_batch_positions_per_s"] = measure_in_process(device, runtime, batch,
                                                                       args.seconds / 2)
                rows.append(row)
    print_rows(rows, args.concurrency)
    if args.json:
        print(json.dumps({"load_average_1m": os.getloadavg()[0], "rows": rows}))


def print_rows(rows: list[dict], concurrency: int) -> None:
    print(f"| device | runtime | max wait ms | batch 1 p50 ms | batch 1 p99 ms | {concurrency} in "
          "flight: positions/s | p50 ms | p99 ms | mean batch | bare pass at that batch, "
          "positions/s | service / bare |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "not_measured" in row:
            print(f"| {row['device']} | {row['runtime']} | | not measured: {row['not_measured']} "
                  "| | | | | | | |")
            continue
        ratio = row["loaded_positions_per_s"] / row["bare_batch_positions_per_s"]
        print(f"| {row['device']} | {row['runtime']} | {row['max_wait_ms']:g} | "
              f"{row['batch1_p50_ms']:.2f} | "
              f"{row['batch1_p99_ms']:.2f} | {row['loaded_positions_per_s']:,.0f} | "
              f"{row['loaded_p50_ms']:.1f} | {row['loaded_p99_ms']:.1f} | "
              f"{row['mean_batch']:.1f} | {row['bare_batch_positions_per_s']:,.0f} | "
              f"{ratio:.2f} |")
    print("\nbare batch-1 pass, positions/s: " + ", ".join(
        f"{r['device']}/{r['runtime']} {r['bare_batch1_positions_per_s']:,.0f}"
        for r in rows if "not_measured" not in r and r["max_wait_ms"] == rows[0]["max_wait_ms"]))


if __name__ == "__main__":
    main()
