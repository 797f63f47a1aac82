"""The run store's own cost, in process, without a mesh: CPU and wall time of the operations a
run's life makes, and how many runs per second the workers get through the store when executing a
run costs nothing but its events.

1. Per operation (`--ops` times each, after 20 unrecorded): `create_leased_run` (CreateRun with
   an idle worker), `run_and_events` (a watch's start), `finish` with ten progress events (a
   short run's end), `events_after` (a watch's read), and `finish_and_lease` of a batch's run
   (a worker draining a queue). CPU time is this process's (the store's threads included), so it
   holds up on a busy machine better than wall time.
2. Batch overhead: `--workers` RunWorkers (32) over a batch of `--runs` (600) runs whose executor
   reports nine progress events and three checkpoints, sleeps 5 ms and succeeds: runs per second
   and CPU milliseconds per run.

SQLite in a temporary folder, then PostgreSQL (a temporary server from the Debian package, as the
tests start it; skipped, saying why, when none can start).

    .venv/bin/python bench/runs_store.py
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "integration" / "orchestrator" / "runs"))
from postgres_server import PostgresServer  # noqa: E402

from services.orchestrator.runs.execution import Outcome  # noqa: E402
from services.orchestrator.runs.model import RunState  # noqa: E402
from services.orchestrator.runs.store import RunStore  # noqa: E402
from services.orchestrator.runs.worker import RunWorkers  # noqa: E402

EVENTS = [("solve_progress", b"x" * 200)] * 10
OPERATIONS = ("create_leased_run", "run_and_events", "finish", "events_after", "finish_and_lease")


class Timer:
    """Wall and CPU milliseconds per operation, summed per name."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    async def time(self, name: str, call, record: bool):
        wall, cpu = time.perf_counter(), time.process_time()
        result = await call
        if record:
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu
        return result


async def operations(store: RunStore, ops: int) -> dict[str, tuple[float, float]]:
    timer = Timer()
    for rep in range(ops + 20):
        record = rep >= 20
        created, _ = await timer.time("create_leased_run", store.create_leased_run(
            "", "solve", b"request", None, "w1", 30), record)
        await timer.time("run_and_events", store.run_and_events(created.name, None, 0), record)
        await timer.time("finish", store.finish(created.name, "w1", RunState.SUCCEEDED,
                                                b"response", None, EVENTS), record)
        await timer.time("events_after", store.events_after(created.name, 1), record)
    await store.create_batch("", [("solve", b"request")] * (ops + 21), None)
    run = await store.lease("w2", 30)
    for rep in range(ops + 20):
        _, run = await timer.time("finish_and_lease", store.finish_and_lease(
            run.name, "w2", RunState.SUCCEEDED, b"response", None, EVENTS, 30), rep >= 20)
    return {name: (timer.wall[name] / ops * 1e3, timer.cpu[name] / ops * 1e3)
            for name in timer.wall}


class Instant:
    """An executor whose runs report their events and end after 5 ms."""

    async def execute(self, run, progress) -> Outcome:
        for index in range(9):
            progress.event("solve_progress", b"x" * 150)
            if index % 3 == 2:
                progress.checkpoint(lambda: b"c" * 2000)
        await asyncio.sleep(0.005)
        return Outcome(RunState.SUCCEEDED, response=b"r" * 300)

    def failure(self, error: BaseException) -> bytes:
        return b""

    def exhausted(self, attempts: int) -> bytes:
        return b""


async def batch(store: RunStore, runs: int, workers: int) -> tuple[float, float]:
    """(runs/s, CPU ms per run) of a batch through `workers` workers."""
    pool = RunWorkers(store, Instant(), workers=workers, lease_s=30)
    pool.start()
    try:
        created = await store.create_batch("", [("solve", b"request")] * runs, None)
        wall, cpu = time.perf_counter(), time.process_time()
        pool.wake(runs)
        while (await store.get_batch(created.name, None)).end_time is None:
            await asyncio.sleep(0.05)
        return runs / (time.perf_counter() - wall), (time.process_time() - cpu) / runs * 1e3
    finally:
        await pool.stop()


async def measure(url: str, args: argparse.Namespace) -> dict[str, object]:
    store = await RunStore.open(url)
    try:
        return {"ops": await operations(store, args.ops),
                "batch": await batch(store, args.runs, args.workers)}
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.ops, args.runs, args.workers = 20, 40, 8
    rows: dict[str, dict | str] = {}
    rows["sqlite"] = asyncio.run(measure(f"sqlite:///{tempfile.mkdtemp()}/runs.db", args))
    postgres = PostgresServer()
    reason = postgres.start()
    try:
        rows["postgresql"] = f"skipped: {reason}" if reason else \
            asyncio.run(measure(postgres.create_database(), args))
    finally:
        postgres.remove()
    print(f"\n| store | {' | '.join(OPERATIONS)} | batch runs/s ({args.workers} workers) |")
    print("|---" * (len(OPERATIONS) + 2) + "|")
    for store, row in rows.items():
        if isinstance(row, str):
            print(f"| {store} | {row} |")
            continue
        cells = [f"{row['ops'][name][1]:.2f} ({row['ops'][name][0]:.2f})" for name in OPERATIONS]
        rate, cpu = row["batch"]
        print(f"| {store} | {' | '.join(cells)} | {rate:.0f} ({cpu:.2f} ms CPU/run) |")
    print("\nCells: CPU ms per operation (wall ms in brackets).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
