"""Durable runs through gRPC on a real orchestrator with its SQLite run store, workers and access
control, against fake mcts and neural services on loopback: create, watch to the end, list,
cancel (queued and running: the search in progress is cancelled), delete, batches, idempotent
request_id, ownership between keys, up-front validation naming the field, and the same answer as
the synchronous call."""

from __future__ import annotations

import uuid

import grpc
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as orchestrator_pb
from mesh.orchestrator.v1 import run_service_pb2 as pb
from runs_mesh import start_backends, start_orchestrator, three_rounds, until

from services.orchestrator.access.keys import FileKeyStore, Grants

State = pb.Run.State


@pytest.fixture
async def mesh(tmp_path):
    """The fake backends, the orchestrator (keys required; run leases of 0.6 s) and keys:
    alice (solve, query), bob (solve), root (admin), reader (query)."""
    keys = FileKeyStore(tmp_path / "keys.json")
    made = {name: await keys.create(name, grants=Grants(scopes=scopes)) for name, scopes in (
        ("alice", ("solve", "query")), ("bob", ("solve",)), ("root", ("admin",)),
        ("reader", ("query",)))}
    backends, search = await start_backends()
    orchestrator = await start_orchestrator(
        backends.port, run_store_url=f"sqlite:///{tmp_path}/runs.db", run_lease_s=0.6,
        run_workers=2, require_api_key=True, api_keys_file=str(tmp_path / "keys.json"))
    orchestrator.search = search
    orchestrator.keys = {name: (("x-api-key", key),) for name, key in made.items()}
    try:
        yield orchestrator
    finally:
        search.hold.set()
        await orchestrator.close()
        await backends.stop(0)


async def create(mesh, key="alice", request=None, request_id=""):
    return await mesh.runs.CreateRun(
        pb.CreateRunRequest(run=pb.Run(solve=request or three_rounds()), request_id=request_id),
        metadata=mesh.keys[key])


async def watch(mesh, name, key="alice", after=0) -> list[pb.RunEvent]:
    call = mesh.runs.WatchRun(pb.WatchRunRequest(name=name, after_sequence=after),
                              metadata=mesh.keys[key], timeout=30)
    return [event async for event in call]


async def test_a_run_watched_to_its_end_answers_as_the_synchronous_call(mesh):
    run = await create(mesh)
    assert run.state == State.STATE_QUEUED and run.name.startswith("runs/")
    events = await watch(mesh, run.name)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    states = [e.state_changed.state for e in events if e.HasField("state_changed")]
    assert states == [State.STATE_RUNNING, State.STATE_SUCCEEDED]
    progress = [e.solve_progress for e in events if e.HasField("solve_progress")]
    assert [p.iteration_started.simulations for p in progress
            if p.HasField("iteration_started")] == [100, 200, 400]
    final = await mesh.runs.GetRun(pb.GetRunRequest(name=run.name), metadata=mesh.keys["alice"])
    assert final.state == State.STATE_SUCCEEDED and final.attempts == 1
    assert progress[-1].response == final.solve_response
    synchronous = await mesh.solves.SolveProblem(three_rounds(), metadata=mesh.keys["alice"])
    assert final.solve_response.connect_four == synchronous.connect_four
    assert [(v.agent, v.proposal, v.iteration) for v in final.solve_response.votes] == \
        [(v.agent, v.proposal, v.iteration) for v in synchronous.votes]
    resumed = await watch(mesh, run.name, after=events[2].sequence)  # reconnecting client
    assert [e.sequence for e in resumed] == [e.sequence for e in events[3:]]
    assert await watch(mesh, run.name, after=events[-1].sequence) == []


async def test_cancelling_a_running_run_stops_its_search(mesh):
    mesh.search.hold.clear()
    run = await create(mesh)
    await until(lambda: mesh.search.waiting == 1)
    cancelled = await mesh.runs.CancelRun(pb.CancelRunRequest(name=run.name),
                                          metadata=mesh.keys["alice"])
    assert cancelled.cancel_requested
    events = await watch(mesh, run.name)
    assert events[-1].state_changed.state == State.STATE_CANCELLED
    await until(lambda: mesh.search.cancelled == 1)  # the search nobody waits for stopped
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.runs.CancelRun(pb.CancelRunRequest(name=run.name),
                                  metadata=mesh.keys["alice"])
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_queued_runs_cancel_at_once_and_ended_runs_delete(mesh):
    mesh.search.hold.clear()
    runs = [await create(mesh) for _ in range(3)]  # two workers: the third waits
    await until(lambda: mesh.search.waiting == 2)
    queued = await mesh.runs.ListRuns(pb.ListRunsRequest(filter="state = QUEUED"),
                                      metadata=mesh.keys["alice"])
    assert [r.name for r in queued.runs] == [runs[2].name]
    cancelled = await mesh.runs.CancelRun(pb.CancelRunRequest(name=runs[2].name),
                                          metadata=mesh.keys["alice"])
    assert cancelled.state == State.STATE_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.runs.DeleteRun(pb.DeleteRunRequest(name=runs[0].name),
                                  metadata=mesh.keys["alice"])
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await mesh.runs.DeleteRun(pb.DeleteRunRequest(name=runs[2].name), metadata=mesh.keys["alice"])
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.runs.GetRun(pb.GetRunRequest(name=runs[2].name), metadata=mesh.keys["alice"])
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_request_id_makes_creation_idempotent(mesh):
    request_id = str(uuid.uuid4())
    first = await create(mesh, request_id=request_id)
    again = await create(mesh, request_id=request_id)
    assert again.name == first.name
    other_key = await create(mesh, key="bob", request_id=request_id)
    assert other_key.name != first.name


async def test_a_key_sees_only_its_own_runs_and_an_admin_key_sees_all(mesh):
    mine = await create(mesh, key="alice")
    theirs = await create(mesh, key="bob")
    for call, request in ((mesh.runs.GetRun, pb.GetRunRequest(name=theirs.name)),
                          (mesh.runs.CancelRun, pb.CancelRunRequest(name=theirs.name))):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request, metadata=mesh.keys["alice"])
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await watch(mesh, theirs.name, key="alice")
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await mesh.runs.ListRuns(pb.ListRunsRequest(), metadata=mesh.keys["alice"])
    assert [r.name for r in listed.runs] == [mine.name]
    everything = await mesh.runs.ListRuns(pb.ListRunsRequest(), metadata=mesh.keys["root"])
    assert {r.name for r in everything.runs} == {mine.name, theirs.name}


async def test_create_checks_the_scope_and_the_request_up_front(mesh):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await create(mesh, key="reader")  # a solve needs the solve scope
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    bad = orchestrator_pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves="48"))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await create(mesh, request=bad)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "run.solve.connect_four.moves" in raised.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.runs.CreateBatch(pb.CreateBatchRequest(items=[
            pb.BatchItem(solve=three_rounds()), pb.BatchItem(solve=bad)]),
            metadata=mesh.keys["alice"])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "items[1].solve.connect_four.moves" in raised.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.runs.CreateRun(pb.CreateRunRequest(run=pb.Run()), metadata=mesh.keys["alice"])
    assert "run.request" in raised.value.details()
    listed = await mesh.runs.ListRuns(pb.ListRunsRequest(), metadata=mesh.keys["alice"])
    assert list(listed.runs) == []  # nothing half-made


async def test_a_batch_runs_every_item_and_counts_them(mesh):
    items = [pb.BatchItem(solve=three_rounds(moves)) for moves in ("4", "44", "443", "3")]
    batch = await mesh.runs.CreateBatch(pb.CreateBatchRequest(
        batch=pb.Batch(display_name="four"), items=items, request_id=str(uuid.uuid4())),
        metadata=mesh.keys["alice"])
    assert batch.run_count == 4 and batch.state_counts.queued == 4
    events = [e async for e in mesh.runs.WatchBatch(pb.WatchBatchRequest(name=batch.name),
                                                    metadata=mesh.keys["alice"], timeout=30)]
    assert [e.sequence for e in events] == list(range(1, 9))  # RUNNING and SUCCEEDED of each
    done = await mesh.runs.GetBatch(pb.GetBatchRequest(name=batch.name),
                                    metadata=mesh.keys["alice"])
    assert done.state == State.STATE_SUCCEEDED and done.state_counts.succeeded == 4
    runs = await mesh.runs.ListRuns(pb.ListRunsRequest(filter=f'batch = "{batch.name}"'),
                                    metadata=mesh.keys["alice"])
    assert [r.solve.connect_four.moves for r in runs.runs] == ["4", "44", "443", "3"]
    assert all(r.HasField("solve_response") for r in runs.runs)


async def test_a_cancel_in_the_same_process_stops_the_run_without_waiting_for_a_renewal(tmp_path):
    """With leases of ten minutes (renewed every 200 s), a cancelled run and a cancelled batch
    still end at once: CancelRun/CancelBatch poke this process's attempts, which renew now and
    see the cancellation (the watches' 30 s deadline would pass otherwise)."""
    backends, search = await start_backends()
    mesh = await start_orchestrator(
        backends.port, run_store_url=f"sqlite:///{tmp_path}/runs.db", run_lease_s=600,
        run_workers=2)
    try:
        search.hold.clear()
        run = (await mesh.runs.CreateRun(pb.CreateRunRequest(run=pb.Run(solve=three_rounds())))
               ).name
        await until(lambda: search.waiting == 1)
        await mesh.runs.CancelRun(pb.CancelRunRequest(name=run))
        events = [e async for e in mesh.runs.WatchRun(pb.WatchRunRequest(name=run), timeout=30)]
        assert events[-1].state_changed.state == State.STATE_CANCELLED
        batch = await mesh.runs.CreateBatch(pb.CreateBatchRequest(
            items=[pb.BatchItem(solve=three_rounds()), pb.BatchItem(solve=three_rounds())]))
        await until(lambda: search.waiting == 2)
        await mesh.runs.CancelBatch(pb.CancelBatchRequest(name=batch.name))
        events = [e async for e in mesh.runs.WatchBatch(
            pb.WatchBatchRequest(name=batch.name), timeout=30)]
        ended = await mesh.runs.GetBatch(pb.GetBatchRequest(name=batch.name))
        assert events and ended.end_time.seconds > 0
    finally:
        search.hold.set()
        await mesh.close()
        await backends.stop(0)
