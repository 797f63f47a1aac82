"""What a durable run costs over the synchronous call, and how fast a batch goes against the
synchronous path's saturation, on one mesh, per run store (SQLite, then PostgreSQL).

1. Added cost: the README's Connect Four example (the moves 4, 4, 5, 3), `--reps` times,
   interleaved (the order alternates each rep): `SolveProblem`, against `CreateRun` then
   `WatchRun` until the run's terminal state change (the last progress event before it carries
   the response). p50 of each and their difference; targets +2 ms (SQLite), +3 ms (PostgreSQL).
   Also the p50 times from CreateRun's start to its answer and to the watch's first event.
2. Throughput: `SolveProblem` at `--concurrency` (32) in a closed loop for `--sync-seconds` over
   early Connect Four positions at `--simulations` (2,000; bench/load.py's c4-early workload:
   Pons' Test_L1 files when ../shared/data has them, else seeded random openings), before and
   after a batch of `--batch` (2,000) of the same positions created with `CreateBatch` and
   watched to its end with `WatchBatch`. Runs/s of the batch over the mean of the two
   synchronous rates; target >= 0.90. The orchestrator runs `--run-workers` runs at once.

3. CPU per call (`--cpu-calls`, 100): the orchestrator process's CPU seconds (user + system,
   /proc) over blocks of calls, per call (and this client's own for the first two):
   `SolveProblem` of the README example, `CreateRun` then `WatchRun` of it to its end, `GetRun`,
   and `WatchRun` of an ended run from its first event (every event again); and per item of the
   throughput phase, for the synchronous calls and for the batch. On a machine whose cores the
   mesh saturates, a call's added CPU is its added latency; unlike wall time, it barely moves
   with the machine's other load.

It starts its own mesh (`mcts_mesh.launcher.start_mesh`, free ports), first on a SQLite store in a
temporary folder, then restarts the orchestrator on a temporary PostgreSQL server (the Debian
package's, as the tests start it; the row says why when none can start).

    .venv/bin/python bench/runs.py                 # the full measurement (about 15 minutes)
    .venv/bin/python bench/runs.py --quick         # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from mesh.orchestrator.v1 import (
    orchestrator_service_pb2_grpc,
    run_service_pb2,
    run_service_pb2_grpc,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration" / "orchestrator" / "runs"))
from load import DATA_DIR, early_positions  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

README_MOVES = "4453"
ENDED = {run_service_pb2.Run.STATE_SUCCEEDED, run_service_pb2.Run.STATE_FAILED,
         run_service_pb2.Run.STATE_CANCELLED}
TARGET_ADDED_MS = {"sqlite": 2.0, "postgresql": 3.0}
TARGET_RATIO = 0.90
CLIENT_CPU_KINDS = ("SolveProblem", "CreateRun+WatchRun")
"""Calls whose CPU in this (Python grpc.aio) client process is printed too."""


def positions(count: int, seed: int = 7) -> list[str]:
    """`count` early positions: Pons' (fewer than 10 moves) when the data is there, repeated as
    needed; else random legal openings of 2..9 moves."""
    if (DATA_DIR / "connect4-pons").exists():
        found = early_positions()
        return [found[i % len(found)] for i in range(count)]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        heights, moves = [0] * 7, ""
        for _ in range(rng.randint(2, 9)):
            column = rng.choice([c for c in range(7) if heights[c] < 6])
            heights[column] += 1
            moves += str(column + 1)
        out.append(moves)
    return out


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def solve(moves: str, simulations: int | None = None) -> orchestrator_pb.SolveProblemRequest:
    extra = {} if simulations is None else {"simulations": simulations}
    return orchestrator_pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves=moves), **extra)


class Client:
    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.solves = orchestrator_service_pb2_grpc.OrchestratorServiceStub(self.channel)
        self.runs = run_service_pb2_grpc.RunServiceStub(self.channel)
        self.saturation_calls = 0
        """SolveProblem calls completed by `saturation` so far."""

    async def synchronous(self, request) -> float:
        started = time.perf_counter()
        await self.solves.SolveProblem(request, timeout=120)
        return time.perf_counter() - started

    async def durable(self, request) -> float:
        """Seconds from CreateRun to the run's terminal event on WatchRun (the seconds to
        CreateRun's answer and to the watch's first event go to `self.phases`)."""
        started = time.perf_counter()
        run = await self.runs.CreateRun(run_service_pb2.CreateRunRequest(
            run=run_service_pb2.Run(solve=request)), timeout=120)
        created, first = time.perf_counter(), None
        async for event in self.runs.WatchRun(run_service_pb2.WatchRunRequest(name=run.name),
                                              timeout=300):
            first = first or time.perf_counter()
            if event.state_changed.state in ENDED:
                if event.state_changed.state != run_service_pb2.Run.STATE_SUCCEEDED:
                    raise RuntimeError(f"{run.name} ended {event.state_changed}")
                break
        self.phases = (created - started, first - started)
        return time.perf_counter() - started


async def cpu_per_call(client: Client, pid: int, calls: int) -> dict[str, float]:
    """The orchestrator's CPU ms per call (see the module docstring, 3.), the median of three
    blocks of `calls` calls of each kind, the kinds interleaved."""
    request = solve(README_MOVES)
    ended = await client.runs.CreateRun(run_service_pb2.CreateRunRequest(
        run=run_service_pb2.Run(solve=request)), timeout=120)
    await client.durable(request)

    async def watch_ended() -> None:
        async for _ in client.runs.WatchRun(run_service_pb2.WatchRunRequest(name=ended.name),
                                            timeout=120):
            pass

    kinds = {"SolveProblem": lambda: client.synchronous(request),
             "CreateRun+WatchRun": lambda: client.durable(request),
             "GetRun": lambda: client.runs.GetRun(
                 run_service_pb2.GetRunRequest(name=ended.name), timeout=120),
             "WatchRun (ended run)": watch_ended}
    await watch_ended()  # the run has ended: every later watch streams all its events
    blocks: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for _ in range(3):
        for kind, call in kinds.items():
            before, client_before = process_cpu_s(pid), time.process_time()
            for _ in range(calls):
                await call()
            blocks[kind].append(((process_cpu_s(pid) - before) / calls * 1e3,
                                 (time.process_time() - client_before) / calls * 1e3))
    out = {kind: statistics.median(v[0] for v in values) for kind, values in blocks.items()}
    out.update({f"{kind} (the client's)": statistics.median(v[1] for v in values)
                for kind, values in blocks.items() if kind in CLIENT_CPU_KINDS})
    return out


async def added_cost(client: Client, reps: int, warmup: int) -> dict[str, float]:
    request = solve(README_MOVES)
    sync_s: list[float] = []
    run_s: list[float] = []
    phases: list[tuple[float, float]] = []
    for rep in range(warmup + reps):
        order = (client.synchronous, client.durable) if rep % 2 else \
            (client.durable, client.synchronous)
        times = {call.__name__: await call(request) for call in order}
        if rep >= warmup:
            sync_s.append(times["synchronous"])
            run_s.append(times["durable"])
            phases.append(client.phases)
    sync_ms, run_ms = statistics.median(sync_s) * 1e3, statistics.median(run_s) * 1e3
    return {"sync_p50_ms": sync_ms, "run_p50_ms": run_ms, "added_p50_ms": run_ms - sync_ms,
            "create_p50_ms": statistics.median(p[0] for p in phases) * 1e3,
            "first_event_p50_ms": statistics.median(p[1] for p in phases) * 1e3, "reps": reps}


async def saturation(client: Client, requests: list, concurrency: int, seconds: float) -> float:
    """Completed SolveProblem calls per second, `concurrency` callers back to back."""
    done = 0
    stop_at = time.perf_counter() + seconds
    cursor = iter(range(10**9))

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await client.solves.SolveProblem(requests[next(cursor) % len(requests)], timeout=120)
            done += 1
            client.saturation_calls += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return done / (time.perf_counter() - started)


async def batch_rate(client: Client, requests: list) -> tuple[float, dict[str, int]]:
    """Runs/s of one batch of `requests`, from CreateBatch to the end of WatchBatch."""
    started = time.perf_counter()
    batch = await client.runs.CreateBatch(run_service_pb2.CreateBatchRequest(
        items=[run_service_pb2.BatchItem(solve=r) for r in requests]), timeout=120)
    async for _ in client.runs.WatchBatch(run_service_pb2.WatchBatchRequest(name=batch.name),
                                          timeout=7200):
        pass
    elapsed = time.perf_counter() - started
    ended = await client.runs.GetBatch(run_service_pb2.GetBatchRequest(name=batch.name))
    counts = ended.state_counts
    return len(requests) / elapsed, {"succeeded": counts.succeeded, "failed": counts.failed}


async def measure(target: str, pid: int, args: argparse.Namespace) -> dict[str, object]:
    """One store's row: added cost, throughput, and the orchestrator's (`pid`) CPU per call."""
    client = Client(target)
    try:
        row: dict[str, object] = await added_cost(client, args.reps, args.warmup)
        row["cpu_ms"] = await cpu_per_call(client, pid, args.cpu_calls)
        requests = [solve(m, args.simulations) for m in positions(args.batch)]
        cpu = [process_cpu_s(pid)]
        calls = [client.saturation_calls]
        before = await saturation(client, requests, args.concurrency, args.sync_seconds)
        cpu.append(process_cpu_s(pid))
        rate, counts = await batch_rate(client, requests)
        cpu.append(process_cpu_s(pid))
        after = await saturation(client, requests, args.concurrency, args.sync_seconds)
        cpu.append(process_cpu_s(pid))
        calls = client.saturation_calls - calls[0]
        sync_rate = (before + after) / 2
        sync_cpu = (cpu[1] - cpu[0] + cpu[3] - cpu[2]) / max(calls, 1) * 1e3
        row["cpu_ms"].update({"SolveProblem at c": sync_cpu,
                              "batch run": (cpu[2] - cpu[1]) / len(requests) * 1e3})
        row.update(sync_rps=sync_rate, sync_rps_before=before, sync_rps_after=after,
                   batch_rps=rate, batch=args.batch, ratio=rate / sync_rate if sync_rate else 0,
                   **counts)
        return row
    finally:
        await client.channel.close()


def restart_orchestrator(mesh, store_url: str) -> None:
    from mcts_mesh.startup import wait_until_ready

    process = mesh.processes["orchestrator"]
    process.send_signal(signal.SIGTERM)
    process.wait(60)
    mesh.envs["orchestrator"]["ORCHESTRATOR_RUN_STORE_URL"] = store_url
    mesh.launch("orchestrator", append_log=True)
    wait_until_ready(mesh, ["orchestrator"], 300.0)


def print_table(rows: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"\nDurable runs against the synchronous call ({time.strftime('%Y-%m-%d %H:%M')} UTC, "
          f"load average {os.getloadavg()[0]:.1f}; run workers {args.run_workers})\n")
    print("| store | sync p50 ms | create+watch p50 ms (CreateRun answered; first event) | "
          f"added p50 ms (target) | sync req/s (c={args.concurrency}) | batch runs/s | "
          f"batch / sync (target >= {TARGET_RATIO}) |")
    print("|---|---|---|---|---|---|---|")
    for store, row in rows.items():
        if "skipped" in row:
            print(f"| {store} | skipped: {row['skipped']} | | | | | |")
            continue
        print(f"| {store} | {row['sync_p50_ms']:.1f} | {row['run_p50_ms']:.1f} "
              f"({row['create_p50_ms']:.1f}; {row['first_event_p50_ms']:.1f}) | "
              f"{row['added_p50_ms']:+.1f} (<= +{TARGET_ADDED_MS[store]:g}) | "
              f"{row['sync_rps']:.1f} ({row['sync_rps_before']:.1f}, "
              f"{row['sync_rps_after']:.1f}) | {row['batch_rps']:.1f} ({row['batch']} runs, "
              f"{row['succeeded']} succeeded) | {row['ratio']:.2f} |")
    measured = {store: row["cpu_ms"] for store, row in rows.items() if "cpu_ms" in row}
    if not measured:
        return
    kinds = list(next(iter(measured.values())))
    print(f"\nCPU ms per call: the orchestrator's, and this client's where named (median of 3 "
          f"blocks of {args.cpu_calls}; per item at c={args.concurrency} and per batch run)\n")
    print("| store | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for store, cpu in measured.items():
        print(f"| {store} | " + " | ".join(f"{cpu[kind]:.2f}" for kind in kinds) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sync-seconds", type=float, default=30.0)
    parser.add_argument("--run-workers", type=int, default=32)
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgresql"],
                        choices=["sqlite", "postgresql"])
    parser.add_argument("--cpu-calls", type=int, default=100,
                        help="calls per block of the CPU-per-call phase")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.warmup, args.batch, args.sync_seconds = 4, 1, 8, 1.0
        args.concurrency, args.simulations, args.run_workers = 4, 200, 4
        args.cpu_calls = 3
    from mcts_mesh.launcher import start_mesh

    work = Path(tempfile.mkdtemp(prefix="bench-runs-"))
    print(f"# starting a mesh (logs in {work / 'logs'})", file=sys.stderr, flush=True)
    mesh = start_mesh(port_base=0, rest_port=None, log_dir=work / "logs", env={
        "RETRIEVAL_DATA_DIR": str(work / "retrieval"), "LLM_FALLBACK_ORDER": '["offline"]',
        "ORCHESTRATOR_RUN_STORE_URL": f"sqlite:///{work}/runs.db",
        "ORCHESTRATOR_RUN_WORKERS": str(args.run_workers)})
    postgres = None
    rows: dict[str, dict] = {}
    try:
        for store in args.stores:
            if store == "postgresql":
                postgres = PostgresServer()
                reason = postgres.start()
                if reason is not None:
                    rows[store] = {"skipped": reason}
                    continue
                restart_orchestrator(mesh, postgres.create_database())
            print(f"# measuring on {store}", file=sys.stderr, flush=True)
            rows[store] = asyncio.run(measure(mesh.target, mesh.processes["orchestrator"].pid,
                                              args))
    finally:
        mesh.stop()
        if postgres is not None:
            postgres.remove()
    print_table(rows, args)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


def _exit_on_sigterm(signum, _frame) -> None:
    """SIGTERM unwinds like Ctrl-C, so `main`'s finally stops the mesh it started."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
