"""WatchBatch over a real SQLite run store: the stream ends as soon as the batch's last run has
ended, not a poll period later (the servicer's poll period here is an hour)."""

from __future__ import annotations

import asyncio

from mesh.orchestrator.v1 import run_service_pb2 as pb

from services.orchestrator.api.runs import RunServicer
from services.orchestrator.runs.model import RunState
from services.orchestrator.runs.store import RunStore


async def test_a_batch_watch_ends_with_its_last_runs_end(store: RunStore):
    batch = await store.create_batch("", [("solve", b"one"), ("solve", b"two")], None)
    servicer = RunServicer(store, None, None, watch_poll_s=3600)
    events: list[pb.RunEvent] = []

    async def watch() -> None:
        async for event in servicer.WatchBatch(pb.WatchBatchRequest(name=batch.name), None):
            events.append(event)

    watching = asyncio.create_task(watch())
    for _ in range(2):
        run = await store.lease("w", 60)
        assert await store.finish(run.name, "w", RunState.SUCCEEDED, b"ok", None)
    async with asyncio.timeout(30):  # an hour with the poll period's end check
        await watching
    states = [e.state_changed.state for e in events]
    assert states.count(pb.Run.STATE_SUCCEEDED) == 2 and len(states) == 4
