"""The store's shortcuts for a run's hot path (fewer transactions, same guarantees): a run
created already leased, the last events written with the finish, a worker's next lease in the
finish's transaction (a handed-off run's too), events with a checkpoint in one write, a trace id
with the progress or the finish, a watch's first read, and a run handed to its worker while its
creation commits."""

from __future__ import annotations

import asyncio

import pytest
from test_run_attempts import LEASE_S, Flaky, Scripted, payloads
from test_run_store import held_writer

from libs.errors import NotFound, Unavailable
from services.orchestrator.runs import writes
from services.orchestrator.runs.attempt import Attempt, AttemptEnd
from services.orchestrator.runs.model import STATE_CHANGED, LeaseLost, RunState
from services.orchestrator.runs.store import RunStore
from services.orchestrator.runs.worker import RunWorkers

Q, R, S, F = RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED


async def test_a_run_created_leased_is_queued_as_created_and_running_for_its_worker(
        store: RunStore, clock):
    created, leased = await store.create_leased_run("key-a", "solve", b"request", None, "w", 30)
    assert (created.state, created.attempts) == (Q, 0)
    assert leased is not None and leased.name == created.name
    assert (leased.state, leased.attempts, leased.lease_owner, leased.lease_expires) == \
        (R, 1, "w", clock.now + 30)
    assert await store.lease("other", 30) is None  # nobody else gets it
    events = await store.events_after(created.name, 0)
    assert [(e.kind, e.previous_state, e.state, e.attempt) for e in events] == \
        [(STATE_CHANGED, Q, R, 1)]


async def test_a_request_id_used_again_returns_the_run_without_leasing_it(store: RunStore):
    request_id = "3f2c3a5e-8d7b-4f2a-9c1d-0e6b5a4f3c21"
    first = await store.create_run("key-a", "solve", b"request", request_id)
    again, leased = await store.create_leased_run("key-a", "solve", b"request", request_id,
                                                  "w", 30)
    assert again.name == first.name and leased is None
    assert (await store.get_run(first.name, None)).state is Q


async def test_finish_writes_the_last_events_before_the_state_change_or_nothing(
        store: RunStore):
    _, run = await store.create_leased_run("", "solve", b"request", None, "w", 30)
    last = [("solve_progress", b"p1"), ("solve_progress", b"p2")]
    assert await store.finish(run.name, "thief", S, b"response", None, last) is False
    assert [e.sequence for e in await store.events_after(run.name, 0)] == [1]
    assert await store.finish(run.name, "w", S, b"response", None, last) is True
    events = await store.events_after(run.name, 0)
    assert [(e.sequence, e.kind, e.payload) for e in events[1:]] == [
        (2, "solve_progress", b"p1"), (3, "solve_progress", b"p2"), (4, STATE_CHANGED, b"")]
    assert (await store.get_run(run.name, None)).last_event_sequence == 4


async def test_finish_and_lease_ends_one_run_and_leases_the_next(store: RunStore):
    first = await store.create_run("", "solve", b"one", None)
    second = await store.create_run("", "solve", b"two", None)
    leased = await store.lease("w", 30)
    assert leased.name == first.name
    ended, following = await store.finish_and_lease(first.name, "w", S, b"ok", None, [], 30)
    assert ended is True and following is not None and following.name == second.name
    assert (following.state, following.lease_owner) == (R, "w")
    ended, following = await store.finish_and_lease(second.name, "w", F, None, b"err", [], 30)
    assert ended is True and following is None
    stale, following = await store.finish_and_lease(second.name, "w", S, b"ok", None, [], 30)
    assert stale is False and following is None  # ended once


async def test_events_and_a_checkpoint_are_one_write(store: RunStore):
    _, run = await store.create_leased_run("", "solve", b"request", None, "w", 30)
    sequences = await store.append_events(run.name, "w", [("solve_progress", b"e")], b"state")
    assert sequences == [2] and await store.load_checkpoint(run.name) == b"state"
    assert await store.append_events(run.name, "w", [], b"newer") == []
    assert await store.load_checkpoint(run.name) == b"newer"


async def test_a_watch_starts_with_the_run_and_its_events_in_one_read(store: RunStore):
    _, run = await store.create_leased_run("key-a", "solve", b"request", None, "w", 30)
    record, events = await store.run_and_events(run.name, "key-a", 0)
    assert record.state is R and [e.sequence for e in events] == [1]
    record, events = await store.run_and_events(run.name, None, 1)
    assert events == []


async def _idle_worker(workers):
    for _ in range(500):
        if (handoff := workers.handoff()) is not None:
            return handoff
        await asyncio.sleep(0.01)
    raise AssertionError("no worker went idle")


async def _ended(store: RunStore, name: str):
    for _ in range(500):
        if (run := await store.get_run(name, None)).state.finished:
            return run
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} did not end")


async def test_a_handed_off_run_is_executed_by_its_worker_without_a_lease_or_a_poll(
        store: RunStore):
    # poll_s of an hour: only the handoff (or give(None)) can make the idle worker act.
    workers = RunWorkers(store, Scripted(), workers=1, lease_s=LEASE_S, poll_s=3600)
    workers.start()
    try:
        handoff = await _idle_worker(workers)
        created, leased = await store.create_leased_run("alice", "solve", b"r", None,
                                                        handoff.worker_id, handoff.lease_s)
        handoff.give(leased)
        run = await _ended(store, created.name)
        assert (run.state, run.attempts, run.response) == (S, 1, b"answer")
        assert await payloads(store, run.name) == [("solve_progress", b"round 1"),
                                                   ("solve_progress", b"round 2")]
        queued = await store.create_run("alice", "solve", b"r", None)
        (await _idle_worker(workers)).give(None)  # nothing handed: the worker leases
        assert (await _ended(store, queued.name)).state is S
        assert workers.ended[AttemptEnd.FINISHED] == 2
    finally:
        await workers.stop()


async def test_a_handed_off_run_executes_while_its_creation_commits_and_writes_after(
        store: RunStore):
    executor = Scripted()
    workers = RunWorkers(store, executor, workers=1, lease_s=LEASE_S, poll_s=3600)
    workers.start()
    try:
        handoff = await _idle_worker(workers)
        busy, release = await held_writer(store)
        leased, creation = store.start_leased_run("alice", "solve", b"r", handoff.worker_id,
                                                  handoff.lease_s)
        handoff.give(leased, creation)
        await asyncio.wait_for(executor.started.wait(), 10)
        assert not creation.done()  # executing before the creation committed
        with pytest.raises(NotFound):
            await store.get_run(leased.name, None)  # nothing of it written yet
        release.set()
        await busy
        created = await creation
        assert (created.name, created.state) == (leased.name, Q)
        run = await _ended(store, leased.name)
        assert (run.state, run.attempts, run.response) == (S, 1, b"answer")
        assert await payloads(store, run.name) == [("solve_progress", b"round 1"),
                                                   ("solve_progress", b"round 2")]
        await _idle_worker(workers)  # the attempt has returned
        assert workers.ended[AttemptEnd.FINISHED] == 1
    finally:
        await workers.stop()


async def test_a_failed_creation_drops_the_execution_and_writes_nothing(store: RunStore,
                                                                        monkeypatch):
    executor = Scripted(release=asyncio.Event())
    workers = RunWorkers(store, executor, workers=1, lease_s=LEASE_S, poll_s=3600)
    workers.start()
    try:
        handoff = await _idle_worker(workers)
        busy, release = await held_writer(store)

        def refused(connection, draft):
            raise Unavailable("run store down")

        monkeypatch.setattr(writes, "insert_leased_run", refused)
        leased, creation = store.start_leased_run("alice", "solve", b"r", handoff.worker_id,
                                                  handoff.lease_s)
        handoff.give(leased, creation)
        await asyncio.wait_for(executor.started.wait(), 10)
        release.set()
        await busy
        with pytest.raises(Unavailable):
            await creation
        monkeypatch.undo()
        await _idle_worker(workers)  # the attempt ended and the worker is idle again
        assert executor.cancelled
        assert workers.ended[AttemptEnd.NOT_CREATED] == 1
        assert workers.ended[AttemptEnd.LOST] == workers.ended[AttemptEnd.FINISHED] == 0
        runs, _ = await store.list_runs(None, None, None, 10, "")
        assert runs == []
    finally:
        await workers.stop()


async def test_a_trace_id_rides_with_the_progress_or_the_finish(store: RunStore, clock):
    run = await store.create_run("k", "solve", b"r", None)
    await store.lease("w1", 10)
    assert await store.append_events(run.name, "w1", [("solve_progress", b"p")], None,
                                     "a" * 32) == [2]
    clock.advance(11)
    await store.lease("w2", 10)
    with pytest.raises(LeaseLost):
        await store.append_events(run.name, "w1", [], None, "c" * 32)
    assert await store.finish(run.name, "w2", S, b"ok", None, [], "b" * 32) is True
    assert (await store.get_run(run.name, "k")).trace_ids == ("a" * 32, "b" * 32)


async def test_a_short_traced_run_writes_its_trace_progress_and_end_in_one_write(
        store: RunStore):
    await store.create_run("alice", "solve", b"request", None)
    run = await store.lease("w1", LEASE_S)
    spy = Flaky(store, append_events=0, record_trace=0, finish=0)  # a spy
    attempt = Attempt(spy, Scripted(), "w1", LEASE_S, run, "d" * 32, write_interval_s=3600)
    assert await attempt.run() is AttemptEnd.FINISHED
    assert (len(spy.calls["finish"]), spy.calls["append_events"], spy.calls["record_trace"]) \
        == (1, [], [])
    done = await store.get_run(run.name, None)
    assert (done.state, done.trace_ids) == (S, ("d" * 32,))
    assert await payloads(store, run.name) == [("solve_progress", b"round 1"),
                                               ("solve_progress", b"round 2")]


async def test_a_handed_off_runs_finish_leases_the_next_queued_run(store: RunStore):
    executor = Scripted(release=asyncio.Event())
    spy = Flaky(store, lease=0, finish=0, finish_and_lease=0)  # a spy
    workers = RunWorkers(spy, executor, workers=1, lease_s=60, poll_s=3600)
    workers.start()
    try:
        handoff = await _idle_worker(workers)
        leases_before = len(spy.calls["lease"])
        leased, creation = store.start_leased_run("alice", "solve", b"r", handoff.worker_id,
                                                  handoff.lease_s)
        handoff.give(leased, creation)
        await executor.started.wait()
        queued = await store.create_run("alice", "solve", b"r", None)  # no worker idle
        executor.release.set()
        assert (await _ended(store, queued.name)).state is S
        assert (await _ended(store, leased.name)).state is S
        assert len(spy.calls["lease"]) == leases_before  # leased with the first one's finish
        assert (len(spy.calls["finish_and_lease"]), spy.calls["finish"]) == (2, [])
    finally:
        await workers.stop()


async def test_a_lease_takes_only_the_oldest_queued_run_in_one_statement(store: RunStore,
                                                                          clock):
    names = [(await store.create_run("k", "solve", b"r", None)).name for _ in range(3)]
    leased = await store.lease("w", 30)
    assert (leased.name, leased.state, leased.attempts, leased.lease_owner) == \
        (names[0], R, 1, "w")
    assert (leased.start_time, leased.lease_expires, leased.checkpoint) == \
        (clock.now, clock.now + 30, None)
    states = [(await store.get_run(name, None)).state for name in names]
    assert states == [R, Q, Q]  # the others stay queued, for other workers
    assert [(e.previous_state, e.state, e.attempt) for e in
            await store.events_after(names[0], 0)] == [(Q, R, 1)]
    assert (await store.get_run(names[0], None)).last_event_sequence == 1
