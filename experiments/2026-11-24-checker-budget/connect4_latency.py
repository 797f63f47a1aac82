"""Latency and throughput of Connect Four requests through the orchestrator, old checker budget
against the new one, in the same run.

Starts the mcts and neural services and two orchestrators over them as child processes
(`mcts-mesh serve`, free loopback ports): "2M nodes" gives the exact checker a flat 2,000,000-node
budget at every depth (the behaviour before the budget schedule), "schedule" runs the default
settings (no solve below 8 moves played, a node budget growing 8x per move from there, 500 ms at
most). Then, for each concurrency, it sends SolveProblem requests (default agents: checker, mcts,
neural; `--simulations` MCTS simulations) for early positions of Pons' files (fewer than
`--max-moves` moves played) to each orchestrator in turn over one kept-alive gRPC channel and
prints p50 / p99 latency and requests per second, with the ratio schedule / 2M nodes.

    .venv/bin/python experiments/2026-11-24-checker-budget/connect4_latency.py [--seconds 10] \\
        [--concurrency 1 32]
        [--simulations 2000] [--max-moves 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))  # bench/procstat.py, the benches' /proc reader
from procstat import cpu_seconds  # noqa: E402

from libs.connect4.pons import read_pons  # noqa: E402

FILES = ["Test_L1_R1", "Test_L1_R2", "Test_L1_R3"]
CONFIGS = {
    "2M nodes": {"ORCHESTRATOR_CHECKER_MIN_MOVES": "0",
                 "ORCHESTRATOR_CHECKER_BASE_NODES": "2000000",
                 "ORCHESTRATOR_CHECKER_TIME_BUDGET_MS": "1000000"},
    "schedule": {},
}


def pons_dir() -> Path:
    for base in (REPO.parent, REPO.parent.parent):
        candidate = base / "shared" / "data" / "connect4-pons"
        if candidate.is_dir():
            return candidate
    raise SystemExit("Pons' files not found beside the repository")


def start(name: str, env: dict[str, str], run_dir: Path, log_dir: Path) -> tuple:
    """Starts `mcts-mesh serve NAME` on a free port; returns (process, port) once it serves."""
    port_file = run_dir / f"{name}-{len(list(run_dir.iterdir()))}.json"
    log = (log_dir / f"{port_file.stem}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "mcts_mesh.cli", "serve", name, "--port-file", str(port_file)],
        env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited; see {log.name}")
        if port_file.exists() and port_file.stat().st_size > 0:
            return process, int(json.loads(port_file.read_text())["grpc"])
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{name} did not start in 300 s")


async def drive(target: str, positions: list[str], simulations: int, concurrency: int,
                seconds: float, on_start=lambda: None) -> dict:
    """`concurrency` callers, each sending the next position as soon as its last one answered,
    for `seconds`; latencies of the requests that finished in that window."""
    latencies: list[float] = []
    errors = 0
    cursor = 0
    async with grpc.aio.insecure_channel(target) as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)

        async def caller(stop_at: float) -> None:
            nonlocal cursor, errors
            while time.perf_counter() < stop_at:
                moves = positions[cursor % len(positions)]
                cursor += 1
                request = pb.SolveProblemRequest(
                    connect_four=common_pb2.ConnectFourPosition(moves=moves),
                    simulations=simulations, seed=cursor)
                started = time.perf_counter()
                try:
                    await stub.SolveProblem(request, timeout=30)
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)

        warm_until = time.perf_counter() + min(2.0, seconds / 4)
        await asyncio.gather(*(caller(warm_until) for _ in range(concurrency)))
        latencies.clear()
        errors = 0
        on_start()
        started = time.perf_counter()
        await asyncio.gather(*(caller(started + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1e3
    return {"requests": len(latencies), "errors": errors,
            "p50_ms": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
            "p99_ms": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
            "requests_per_s": len(latencies) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--max-moves", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    positions = [moves for name in FILES for moves, _ in read_pons(pons_dir() / name)
                 if len(moves) < args.max_moves]
    run_dir = Path(tempfile.mkdtemp(prefix="c4-latency-run-"))
    log_dir = Path(tempfile.mkdtemp(prefix="c4-latency-logs-"))
    processes = []
    try:
        mcts, mcts_port = start("mcts", {"MCTS_PORT": "0"}, run_dir, log_dir)
        neural, neural_port = start("neural", {"NEURAL_PORT": "0"}, run_dir, log_dir)
        processes += [mcts, neural]
        targets = {}
        pids = {}
        for label, extra in CONFIGS.items():
            env = {"ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "-1",
                   "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{mcts_port}",
                   "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{neural_port}", **extra}
            process, port = start("orchestrator", env, run_dir, log_dir)
            processes.append(process)
            targets[label] = f"127.0.0.1:{port}"
            pids[label] = process.pid
        print(f"{len(positions)} positions with fewer than {args.max_moves} moves (Pons "
              f"{', '.join(FILES)}), {args.simulations} simulations, {args.seconds:.0f} s per row")
        print(f"{'checker':<10} {'concurrency':>11} {'requests':>9} {'errors':>6} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'req/s':>8} {'x req/s':>8}   CPU ms/request: orchestrator, "
              "mcts, neural")
        rows = []
        for concurrency in args.concurrency:
            base = None
            for label, target in targets.items():
                watched = {"orchestrator": pids[label], "mcts": mcts.pid, "neural": neural.pid}
                before: dict[str, float] = {}

                def mark(watched=watched, before=before) -> None:
                    before.update({name: cpu_seconds(pid) for name, pid in watched.items()})

                row = {"checker": label, "concurrency": concurrency, **asyncio.run(drive(
                    target, positions, args.simulations, concurrency, args.seconds, mark))}
                # The requests still in flight at the end add a little: an upper bound.
                row["cpu_ms_per_request"] = {
                    name: (cpu_seconds(pid) - before[name]) * 1e3 / max(1, row["requests"])
                    for name, pid in watched.items()}
                base = base or row
                ratio = row["requests_per_s"] / base["requests_per_s"]
                rows.append(row)
                print(f"{label:<10} {concurrency:>11} {row['requests']:>9} {row['errors']:>6} "
                      f"{row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} "
                      f"{row['requests_per_s']:>8.1f} {ratio:>8.2f}   "
                      + ", ".join(f"{v:.1f}" for v in row["cpu_ms_per_request"].values()),
                      flush=True)
        if args.json:
            print(json.dumps({"rows": rows}))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
