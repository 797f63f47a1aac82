"""Durable runs survive their worker's death and the store's restart.

- kill -9: a real `mcts-mesh serve orchestrator` process executes a three-round run against fake
  mcts and neural services and is killed with SIGKILL while its second round's search is under
  way (the first round's checkpoint stored). A second orchestrator process on the same SQLite run
  store takes the run over when the lease expires, resumes it from the checkpoint (no search of
  the first round again: the searches it asks for are the second and third rounds', with their
  seeds, adding to the checkpointed root statistics), and finishes it exactly once.
- a replica killed: two orchestrator processes on one PostgreSQL store each hold two runs; one
  is killed with SIGKILL, and the other takes its runs over once their leases expire and ends
  all four exactly once.
- the store restarted: PostgreSQL stopped under a running orchestrator: creating a run is
  UNAVAILABLE while the synchronous SolveProblem still answers; the run in flight and the
  workers wait, and once PostgreSQL is back the run ends SUCCEEDED and new runs are executed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import grpc
import pytest
from faultkit import spawn_service, stop_process
from mesh.orchestrator.v1 import run_service_pb2 as pb
from mesh.orchestrator.v1 import run_service_pb2_grpc

from services.orchestrator.runs.model import RunState
from services.orchestrator.runs.store import RunStore

sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "orchestrator"))
from runs.postgres_server import PostgresServer  # noqa: E402
from runs_mesh import start_backends, start_orchestrator, three_rounds, until  # noqa: E402

pytestmark = [pytest.mark.fault]

State = pb.Run.State
LEASE_S = 2.0


def orchestrator_env(backend_port: int, store_url: str) -> dict[str, str]:
    return {"ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "-1",
            "ORCHESTRATOR_METRICS_PORT": "-1", "ORCHESTRATOR_REQUIRE_API_KEY": "false",
            "ORCHESTRATOR_MCTS_TARGET": f"127.0.0.1:{backend_port}",
            "ORCHESTRATOR_NEURAL_TARGET": f"127.0.0.1:{backend_port}",
            "ORCHESTRATOR_RUN_STORE_URL": store_url, "ORCHESTRATOR_RUN_LEASE_S": str(LEASE_S),
            "ORCHESTRATOR_RUN_WORKERS": "2"}


async def test_a_run_killed_mid_round_is_resumed_from_its_checkpoint_and_ends_once(tmp_path):
    backends, search = await start_backends()
    url = f"sqlite:///{tmp_path}/runs.db"
    env = orchestrator_env(backends.port, url)
    search.pause_after = 1  # the second round's search waits
    first, port = await asyncio.to_thread(spawn_service, "orchestrator", env, tmp_path)
    second = None
    store = await RunStore.open(url)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            run = await run_service_pb2_grpc.RunServiceStub(channel).CreateRun(
                pb.CreateRunRequest(run=pb.Run(solve=three_rounds())), timeout=30)
        await until(lambda: search.waiting == 1)
        await until(lambda: store.load_checkpoint(run.name))
        os.kill(first.pid, signal.SIGKILL)
        assert await asyncio.to_thread(first.wait, 30) == -signal.SIGKILL
        killed_at = len(search.requests)
        search.hold.set()
        second, port = await asyncio.to_thread(spawn_service, "orchestrator", env, tmp_path)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = run_service_pb2_grpc.RunServiceStub(channel)
            events = [e async for e in stub.WatchRun(pb.WatchRunRequest(name=run.name),
                                                     timeout=120)]
            done = await stub.GetRun(pb.GetRunRequest(name=run.name), timeout=30)
        assert done.state == State.STATE_SUCCEEDED and done.attempts == 2
        resumed = [(r.seed, r.simulations) for r in search.requests[killed_at:]]
        assert resumed == [(6, 100), (7, 200)]  # rounds 2 and 3 only, on top of round 1's
        ends = [e for e in events if e.state_changed.state == State.STATE_SUCCEEDED]
        assert len(ends) == 1
        started = [e.solve_progress.iteration for e in events
                   if e.solve_progress.HasField("iteration_started")]
        assert started.count(1) == 1 and started[-2:] == [2, 3]
        assert done.solve_response.iterations == 3
        assert [v.iteration for v in done.solve_response.votes] == [1, 1, 2, 3]
    finally:
        search.hold.set()
        await store.close()
        for process in (first, second):
            if process is not None:
                await asyncio.to_thread(stop_process, process)
        await backends.stop(0)


async def test_a_replica_killed_its_runs_end_once_on_the_other(postgres, tmp_path):
    backends, search = await start_backends()
    url = postgres.create_database()
    env = orchestrator_env(backends.port, url)
    search.hold.clear()  # every search waits: each replica's two workers hold a run each
    replicas = [await asyncio.to_thread(spawn_service, "orchestrator", env, tmp_path)
                for _ in range(2)]
    store = await RunStore.open(url)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{replicas[0][1]}") as channel:
            stub = run_service_pb2_grpc.RunServiceStub(channel)
            names = [(await stub.CreateRun(pb.CreateRunRequest(run=pb.Run(solve=three_rounds())),
                                           timeout=30)).name for _ in range(4)]
        await until(lambda: search.waiting == 4)
        killed = replicas[0][0]
        held = {record.name for record in (await store.list_runs(None, None, None, 10, ""))[0]
                if record.lease_owner.split(":")[1] == str(killed.pid)}
        assert len(held) == 2
        os.kill(killed.pid, signal.SIGKILL)
        assert await asyncio.to_thread(killed.wait, 30) == -signal.SIGKILL
        search.hold.set()

        async def all_ended() -> bool:
            return all([(await store.get_run(name, None)).state.finished for name in names])
        await until(all_ended, timeout_s=120)
        for name in names:
            run = await store.get_run(name, None)
            assert run.state is RunState.SUCCEEDED
            assert run.attempts == (2 if name in held else 1)
            ends = [e for e in await store.events_after(name, 0)
                    if e.state is not None and e.state.finished]
            assert len(ends) == 1
    finally:
        search.hold.set()
        await store.close()
        for process, _ in replicas:
            await asyncio.to_thread(stop_process, process)
        await backends.stop(0)


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer()
    reason = server.start()
    try:
        if reason is not None:
            pytest.skip(f"no PostgreSQL server: {reason}")
        yield server
    finally:
        server.remove()


async def test_the_store_restarted_under_a_running_orchestrator(postgres):
    backends, search = await start_backends()
    orchestrator = await start_orchestrator(backends.port, run_store_url=postgres.create_database(),
                                            run_lease_s=LEASE_S)
    orchestrator.search = search
    try:
        search.hold.clear()
        in_flight = await orchestrator.runs.CreateRun(
            pb.CreateRunRequest(run=pb.Run(solve=three_rounds())))
        await until(lambda: search.waiting == 1)
        await asyncio.to_thread(postgres.stop)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await orchestrator.runs.CreateRun(
                pb.CreateRunRequest(run=pb.Run(solve=three_rounds())), timeout=30)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        search.hold.set()
        answered = await orchestrator.solves.SolveProblem(three_rounds(), timeout=30)
        assert answered.iterations == 3  # the synchronous path does not need the store
        await asyncio.to_thread(postgres.restart)
        later = await until(lambda: _created(orchestrator))
        for name in (in_flight.name, later.name):
            events = [e async for e in orchestrator.runs.WatchRun(
                pb.WatchRunRequest(name=name), timeout=60)]
            assert events[-1].state_changed.state == State.STATE_SUCCEEDED
    finally:
        search.hold.set()
        await orchestrator.close()
        await backends.stop(0)


async def _created(orchestrator) -> pb.Run | None:
    """A new run, or None while the store still refuses (it is coming back)."""
    try:
        return await orchestrator.runs.CreateRun(
            pb.CreateRunRequest(run=pb.Run(solve=three_rounds("3"))), timeout=10)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return None
