"""Durable runs under kill -9: nothing lost, nothing ended twice, nothing searched twice.

1. **Restarts** (SQLite, the default store): a mesh as `mcts-mesh up` keeps it (the launcher's
   `Supervisor` restarts a service that exits), a batch of `--batch` (2,000) early Connect Four
   positions at `--simulations` (2,000), and the orchestrator killed with SIGKILL `--kills` (5)
   times while the batch runs (each time a further sixth of it has ended). The restarted process
   takes the killed one's runs over once their leases (`--lease-s`) expire.
2. **Replicas** (PostgreSQL): the same mesh's orchestrator on a temporary PostgreSQL server, a
   second orchestrator replica on the same store, a batch of `--replica-batch` (300); once both
   replicas hold runs, one is killed (SIGKILL, not restarted). The other must end every run the
   killed one held within its lease time plus 5 s.

Each batch is then audited in the store, run by run: it ended (SUCCEEDED), with exactly one end
(one terminal state change) and one response; no round's tally persisted twice (a resumed attempt
continues after its checkpoint's round instead of searching that round again); attempts counted.

    .venv/bin/python bench/runs_faults.py                  # both scenarios (several minutes)
    .venv/bin/python bench/runs_faults.py --batch 300 --scenarios restarts   # a shorter one
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from mesh.orchestrator.v1 import run_service_pb2, run_service_pb2_grpc

from services.orchestrator.runs.model import STATE_CHANGED, RunState
from services.orchestrator.runs.store import RunStore

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration" / "orchestrator" / "runs"))
sys.path.insert(0, str(REPO / "tests" / "fault"))
from faultkit import spawn_service, stop_process  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

# bench/runs.py, beside this file (imported by name at run time: ruff's import sorting would
# otherwise class `runs` differently where a runs/ training folder exists).
RUNS_BENCH = importlib.import_module("runs")
positions, restart_orchestrator, solve = (RUNS_BENCH.positions, RUNS_BENCH.restart_orchestrator,
                                          RUNS_BENCH.solve)

TAKEOVER_MARGIN_S = 5.0


def mesh_env(work: Path, store_url: str, args: argparse.Namespace) -> dict[str, str]:
    return {"RETRIEVAL_DATA_DIR": str(work / "retrieval"), "LLM_FALLBACK_ORDER": '["offline"]',
            "ORCHESTRATOR_RUN_STORE_URL": store_url,
            "ORCHESTRATOR_RUN_WORKERS": str(args.run_workers),
            "ORCHESTRATOR_RUN_LEASE_S": str(args.lease_s)}


async def submit(target: str, count: int, simulations: int) -> str:
    """Creates the batch of `count` early positions; its name."""
    items = [run_service_pb2.BatchItem(solve=solve(moves, simulations))
             for moves in positions(count)]
    async with grpc.aio.insecure_channel(target) as channel:
        batch = await run_service_pb2_grpc.RunServiceStub(channel).CreateBatch(
            run_service_pb2.CreateBatchRequest(items=items), timeout=120)
    return batch.name


async def ended(store: RunStore, batch: str) -> int:
    counts = await store.counts_by_state(batch)
    return sum(n for state, n in counts.items() if state.finished)


async def wait_until(predicate, timeout_s: float, what: str, period_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        await asyncio.sleep(period_s)


def rounds_repeated(events) -> bool:
    """True when a round's tally was persisted twice (a resumed attempt searched it again)."""
    tallies = []
    for event in events:
        if event.kind == STATE_CHANGED:
            continue
        message = orchestrator_pb.StreamSolveProblemResponse.FromString(event.payload)
        if message.HasField("tally"):
            tallies.append(message.iteration)
    return tallies != sorted(set(tallies))


async def audit(store: RunStore, batch: str) -> dict[str, int]:
    """Every run of the batch checked in the store (see the module docstring)."""
    found = {"runs": 0, "succeeded": 0, "not_one_end": 0, "not_one_response": 0,
             "round_repeated": 0, "resumed": 0, "max_attempts": 0}
    token = ""
    while True:
        runs, token = await store.list_runs(None, None, batch, 1000, token)
        for run in runs:
            events = await store.events_after(run.name, 0, 100_000)
            ends = [e for e in events if e.kind == STATE_CHANGED and e.state.finished]
            responses = [e for e in events if e.kind != STATE_CHANGED and
                         orchestrator_pb.StreamSolveProblemResponse.FromString(e.payload)
                         .HasField("response")]
            found["runs"] += 1
            found["succeeded"] += run.state is RunState.SUCCEEDED
            found["not_one_end"] += len(ends) != 1
            found["not_one_response"] += len(responses) != 1
            found["round_repeated"] += rounds_repeated(events)
            found["resumed"] += run.attempts > 1
            found["max_attempts"] = max(found["max_attempts"], run.attempts)
        if not token:
            return found


class Supervising:
    """The launcher's Supervisor stepped on a thread, as `mcts-mesh up` does."""

    def __init__(self, mesh) -> None:
        from mcts_mesh.launcher import RestartPolicy, Supervisor

        self.supervisor = Supervisor(mesh, RestartPolicy(max_restarts=10))
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.2):
                self.supervisor.step()
        except BaseException as error:  # noqa: BLE001 - reported by the scenario
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


async def restarts(mesh, store_url: str, args: argparse.Namespace) -> dict[str, object]:
    """Scenario 1 (see the module docstring): the audit, kills and restarts."""
    store = await RunStore.open(store_url)
    supervising = Supervising(mesh)
    try:
        started = time.monotonic()
        batch = await submit(mesh.target, args.batch, args.simulations)
        for kill in range(1, args.kills + 1):
            mark = args.batch * kill // (args.kills + 1)

            async def passed(mark=mark) -> bool:
                return await ended(store, batch) >= mark
            await wait_until(passed, args.timeout_s, f"{mark} runs ended")
            process = mesh.processes["orchestrator"]
            process.send_signal(signal.SIGKILL)
            print(f"# kill {kill}: orchestrator pid {process.pid} at {mark} runs ended",
                  file=sys.stderr, flush=True)
            await wait_until(functools.partial(_restarted, supervising, process),
                             args.timeout_s, "the orchestrator's restart")

        async def done() -> bool:
            return await ended(store, batch) >= args.batch
        await wait_until(done, args.timeout_s, "the batch's end", 1.0)
        elapsed = time.monotonic() - started
        row = await audit(store, batch)
        row.update(kills=args.kills, restarts=supervising.supervisor.restarts["orchestrator"],
                   seconds=round(elapsed, 1))
        return row
    finally:
        supervising.stop()
        await store.close()


async def _restarted(supervising: Supervising, killed) -> bool:
    if supervising.error is not None:
        raise supervising.error
    process = supervising.supervisor.mesh.processes["orchestrator"]
    if process is killed or process.poll() is not None:
        return False
    return supervising.supervisor.mesh.port_file("orchestrator").exists()


def worker_prefix(pid: int) -> str:
    """The lease owners of a process's workers start with this (runs/worker.py)."""
    return f"{socket.gethostname()}:{pid}:"


async def held_by(store: RunStore, batch: str, pid: int) -> set[str]:
    runs, token, held = [], "", set()
    while True:
        runs, token = await store.list_runs(None, RunState.RUNNING, batch, 1000, token)
        held |= {r.name for r in runs if (r.lease_owner or "").startswith(worker_prefix(pid))}
        if not token:
            return held


async def replicas(mesh, store_url: str, work: Path, args: argparse.Namespace) -> dict:
    """Scenario 2 (see the module docstring): the takeover time and the audit."""
    env = {**mesh.envs["orchestrator"], "ORCHESTRATOR_PORT": "0",
           "ORCHESTRATOR_REST_PORT": "-1", "ORCHESTRATOR_METRICS_PORT": "-1"}
    second, _ = await asyncio.to_thread(spawn_service, "orchestrator", env, work)
    store = await RunStore.open(store_url)
    try:
        batch = await submit(mesh.target, args.replica_batch, args.simulations)
        first = mesh.processes["orchestrator"]
        held: set[str] = set()

        async def both_hold() -> bool:
            nonlocal held
            held = await held_by(store, batch, first.pid)
            if held and await held_by(store, batch, second.pid):
                return True
            if await ended(store, batch) >= args.replica_batch:
                raise RuntimeError("the batch ended before both replicas held runs at once; "
                                   "a larger --replica-batch or more --simulations")
            return False
        await wait_until(both_hold, args.timeout_s, "runs held by both replicas", 0.05)
        first.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()

        async def taken_over() -> bool:
            runs = [await store.get_run(name, None) for name in held]
            return all(run.state.finished for run in runs)
        await wait_until(taken_over, args.timeout_s, "the killed replica's runs", 0.1)
        takeover_s = time.monotonic() - killed_at

        async def done() -> bool:
            return await ended(store, batch) >= args.replica_batch
        await wait_until(done, args.timeout_s, "the batch's end", 1.0)
        row: dict[str, object] = await audit(store, batch)
        row.update(killed_held=len(held), takeover_s=round(takeover_s, 2),
                   limit_s=args.lease_s + TAKEOVER_MARGIN_S)
        return row
    finally:
        await store.close()
        stop_process(second)


def print_table(rows: dict[str, dict], args: argparse.Namespace) -> None:
    print(f"\nDurable runs under kill -9 ({time.strftime('%Y-%m-%d %H:%M')} UTC, load average "
          f"{os.getloadavg()[0]:.1f}; leases of {args.lease_s:g} s, {args.run_workers} run "
          f"workers, {args.simulations} simulations)\n")
    print("| scenario | runs | succeeded | not one end | not one response | round searched "
          "twice | resumed runs (most attempts) | faults |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        if "error" in row:
            print(f"| {name} | {row['error']} | | | | | | |")
            continue
        faults = (f"{row['kills']} kills, {row['restarts']} restarts, {row['seconds']} s"
                  if name == "restarts" else
                  f"1 replica of 2 killed holding {row['killed_held']} runs: all ended "
                  f"{row['takeover_s']} s later (limit {row['limit_s']:g} s)")
        print(f"| {name} | {row['runs']} | {row['succeeded']} | {row['not_one_end']} | "
              f"{row['not_one_response']} | {row['round_repeated']} | {row['resumed']} "
              f"({row['max_attempts']}) | {faults} |")


async def _scenario(coroutine) -> dict:
    try:
        return await coroutine
    except (TimeoutError, RuntimeError, grpc.RpcError) as error:
        return {"error": f"failed: {type(error).__name__}: {error}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--replica-batch", type=int, default=300)
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--run-workers", type=int, default=32)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--scenarios", nargs="+", default=["restarts", "replicas"],
                        choices=["restarts", "replicas"])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.replica_batch, args.kills, args.simulations = 60, 300, 2, 200
        args.run_workers, args.lease_s, args.timeout_s = 8, 3.0, 600.0
    from mcts_mesh.launcher import start_mesh

    work = Path(tempfile.mkdtemp(prefix="bench-runs-faults-"))
    print(f"# starting a mesh (logs in {work / 'logs'})", file=sys.stderr, flush=True)
    sqlite_url = f"sqlite:///{work}/runs.db"
    mesh = start_mesh(port_base=0, rest_port=None, log_dir=work / "logs",
                      env=mesh_env(work, sqlite_url, args))
    postgres = None
    rows: dict[str, dict] = {}
    try:
        if "restarts" in args.scenarios:
            rows["restarts"] = asyncio.run(_scenario(restarts(mesh, sqlite_url, args)))
            print(f"# restarts: {rows['restarts']}", file=sys.stderr, flush=True)
        if "replicas" in args.scenarios:
            postgres = PostgresServer()
            reason = postgres.start()
            if reason is not None:
                rows["replicas"] = {"error": f"skipped: {reason}"}
            else:
                url = postgres.create_database()
                restart_orchestrator(mesh, url)
                rows["replicas"] = asyncio.run(_scenario(replicas(mesh, url, work, args)))
    finally:
        mesh.stop()
        if postgres is not None:
            postgres.remove()
        print_table(rows, args)
    return 0


def _exit_on_sigterm(signum, _frame) -> None:
    """SIGTERM unwinds like Ctrl-C, so `main`'s finally stops the mesh it started."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main())
