"""A watcher of this process gets the events this process committed from memory, exactly the
stored ones, without reading the store; memory answers only without a gap, else the store does."""

from __future__ import annotations

import asyncio

from services.orchestrator.runs.model import EventRecord, RunState
from services.orchestrator.runs.recent import RecentEvents


def event(sequence: int, run: str = "runs/a") -> EventRecord:
    return EventRecord(sequence=sequence, run=run, time=0.0, kind="solve_progress")


def test_memory_answers_only_the_events_that_follow_without_a_gap():
    recent = RecentEvents()
    recent.publish([event(1)])  # nobody watches: not kept
    with recent.watching("runs/a"):
        assert recent.after("runs/a", 0, 10) is None
        recent.publish([event(3), event(4), event(5, "runs/b")])
        assert recent.after("runs/a", 1, 10) is None  # 2 is not in memory: read the store
        assert [e.sequence for e in recent.after("runs/a", 2, 10)] == [3, 4]
        assert [e.sequence for e in recent.after("runs/a", 2, 1)] == [3]
        assert recent.after("runs/a", 4, 10) is None
    assert recent.after("runs/a", 2, 10) is None  # forgotten with its last watcher


async def test_a_waiting_watcher_gets_the_committed_events_without_a_read(store):
    created, leased = await store.create_leased_run("alice", "solve", b"r", None, "w1", 30)
    reads = 0
    read = store._database.read

    async def counted(*args):
        nonlocal reads
        reads += 1
        return await read(*args)

    changed = store.changes()
    _, first = await store.run_and_events(created.name, "alice", 0)
    store._database.read = counted
    waiting = asyncio.ensure_future(store.wait_for_events(created.name, first[-1].sequence, 10,
                                                          changed=changed))
    await asyncio.sleep(0)  # the watcher waits
    assert await store.finish(created.name, "w1", RunState.SUCCEEDED, b"answer", None,
                              [("solve_progress", b"one"), ("solve_progress", b"two")])
    events = await waiting
    assert reads == 0
    store._database.read = read
    assert events == await store.events_after(created.name, first[-1].sequence)
    assert [(e.kind, e.payload) for e in events[:2]] == [("solve_progress", b"one"),
                                                        ("solve_progress", b"two")]
    assert events[-1].state is RunState.SUCCEEDED
