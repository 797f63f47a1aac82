"""Durable runs through gRPC on a real PostgreSQL run store (the Debian package's server, started
in a temporary folder; skipped, saying why, where it cannot start): a run watched to its end,
cancelling a running run, and two orchestrator replicas sharing one queue, every run of a batch
ending once."""

from __future__ import annotations

import pytest
from mesh.orchestrator.v1 import run_service_pb2 as pb
from runs.postgres_server import PostgresServer
from runs_mesh import start_backends, start_orchestrator, three_rounds, until

State = pb.Run.State


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


@pytest.fixture
async def replicas(postgres):
    """A factory of orchestrators on one fresh PostgreSQL database and one set of backends."""
    url = postgres.create_database()
    backends, search = await start_backends()
    started = []

    async def start(**fields):
        orchestrator = await start_orchestrator(backends.port, run_store_url=url,
                                                run_lease_s=0.6, **fields)
        orchestrator.search = search
        started.append(orchestrator)
        return orchestrator

    try:
        yield start
    finally:
        search.hold.set()
        for orchestrator in started:
            await orchestrator.close()
        await backends.stop(0)


async def watch(orchestrator, name) -> list[pb.RunEvent]:
    call = orchestrator.runs.WatchRun(pb.WatchRunRequest(name=name), timeout=30)
    return [event async for event in call]


async def test_a_run_on_postgresql_is_watched_to_its_end(replicas):
    orchestrator = await replicas()
    run = await orchestrator.runs.CreateRun(pb.CreateRunRequest(run=pb.Run(solve=three_rounds())))
    events = await watch(orchestrator, run.name)
    assert events[-1].state_changed.state == State.STATE_SUCCEEDED
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    done = await orchestrator.runs.GetRun(pb.GetRunRequest(name=run.name))
    assert done.solve_response.iterations == 3


async def test_cancelling_a_running_run_on_postgresql(replicas):
    orchestrator = await replicas()
    orchestrator.search.hold.clear()
    run = await orchestrator.runs.CreateRun(pb.CreateRunRequest(run=pb.Run(solve=three_rounds())))
    await until(lambda: orchestrator.search.waiting == 1)
    await orchestrator.runs.CancelRun(pb.CancelRunRequest(name=run.name))
    events = await watch(orchestrator, run.name)
    assert events[-1].state_changed.state == State.STATE_CANCELLED
    await until(lambda: orchestrator.search.cancelled == 1)


async def test_two_replicas_share_the_queue_and_end_each_run_once(replicas):
    first = await replicas(run_workers=2)
    second = await replicas(run_workers=2)
    items = [pb.BatchItem(solve=three_rounds(moves)) for moves in
             ("4", "44", "443", "3", "33", "332", "5", "55")]
    batch = await first.runs.CreateBatch(pb.CreateBatchRequest(items=items))
    events = [e async for e in second.runs.WatchBatch(pb.WatchBatchRequest(name=batch.name),
                                                      timeout=60)]
    ends = [e.run for e in events if e.state_changed.state == State.STATE_SUCCEEDED]
    assert sorted(ends) == sorted(set(ends)) and len(ends) == len(items)
    runs = await first.runs.ListRuns(pb.ListRunsRequest(filter=f'batch = "{batch.name}"'))
    assert all(r.state == State.STATE_SUCCEEDED and r.attempts == 1 for r in runs.runs)
    took = [first.runs_wiring.workers.ended, second.runs_wiring.workers.ended]
    await until(lambda: sum(sum(ended.values()) for ended in took) == len(items))
