"""The run store's contract, on SQLite here and on a real PostgreSQL in
tests/integration/orchestrator/runs/test_run_store_postgresql.py (which runs these same tests with
its own `store`, `open_store` and `clock` fixtures): the state machine and its events, leases moved
by an injected clock, idempotent creates, pages, ownership, batches and retention."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from libs.errors import FailedPrecondition, InvalidArgument, NotFound
from services.orchestrator.runs import writes
from services.orchestrator.runs.model import STATE_CHANGED, LeaseLost, RunState
from services.orchestrator.runs.store import RunStore

writes_create_batch = writes.create_batch

Q, R, S, F, C = (RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED,
                 RunState.CANCELLED)


def _changes(events) -> list[tuple]:
    return [(e.previous_state, e.state, e.attempt) for e in events if e.kind == STATE_CHANGED]


async def test_a_run_goes_queued_running_succeeded_with_gapless_events(store: RunStore, clock):
    run = await store.create_run("key-a", "solve", b"request", None)
    assert (run.state, run.attempts, run.owner, run.request) == (Q, 0, "key-a", b"request")
    assert run.name.startswith("runs/") and run.start_time is None and run.end_time is None
    clock.advance(1)
    leased = await store.lease("worker-1", 30)
    assert leased.name == run.name and (leased.state, leased.attempts) == (R, 1)
    assert (leased.start_time, leased.lease_owner, leased.lease_expires) == \
        (clock.now, "worker-1", clock.now + 30)
    assert await store.lease("worker-2", 30) is None  # the only run is held
    assert await store.append_events(run.name, "worker-1", [("solve_progress", b"e1"),
                                                            ("solve_progress", b"e2")]) == [2, 3]
    assert await store.finish(run.name, "worker-1", S, b"response", None) is True
    done = await store.get_run(run.name, "key-a")
    assert (done.state, done.response, done.error, done.end_time) == (S, b"response", None,
                                                                      clock.now)
    assert done.last_event_sequence == 4 and done.lease_owner is None
    events = await store.events_after(run.name, 0)
    assert [e.sequence for e in events] == [1, 2, 3, 4]
    assert [e.payload for e in events[1:3]] == [b"e1", b"e2"]
    assert _changes(events) == [(Q, R, 1), (R, S, 1)]
    assert [e.sequence for e in await store.events_after(run.name, 2)] == [3, 4]
    assert [e.sequence for e in await store.events_after(run.name, 0, limit=2)] == [1, 2]
    # Exactly once: a second end is refused, and a finished run cannot be cancelled.
    assert await store.finish(run.name, "worker-1", F, None, b"status") is False
    with pytest.raises(FailedPrecondition):
        await store.cancel_run(run.name, "key-a")


async def test_a_failed_run_keeps_its_status_in_the_run_and_its_event(store: RunStore):
    run = await store.create_run("k", "answer", b"q", None)
    await store.lease("w", 30)
    assert await store.finish(run.name, "w", F, None, b"rpc-status") is True
    failed = await store.get_run(run.name, None)
    assert (failed.state, failed.error, failed.response) == (F, b"rpc-status", None)
    last = (await store.events_after(run.name, 0))[-1]
    assert (last.state, last.payload) == (F, b"rpc-status")


async def test_an_expired_lease_is_taken_again_and_the_old_worker_is_shut_out(store, clock):
    run = await store.create_run("k", "solve", b"r", None)
    await store.lease("w1", 10)
    await store.checkpoint(run.name, "w1", b"round-1")
    clock.advance(9)
    assert await store.renew(run.name, "w1", 10) is True  # now expires at +19
    clock.advance(9)
    assert await store.lease("w2", 10) is None  # renewed: not expired yet
    clock.advance(2)
    again = await store.lease("w2", 10)
    assert (again.name, again.attempts, again.lease_owner) == (run.name, 2, "w2")
    assert again.checkpoint == b"round-1"  # the new attempt resumes from the checkpoint
    assert await store.renew(run.name, "w1", 10) is False
    with pytest.raises(LeaseLost):
        await store.checkpoint(run.name, "w1", b"stale")
    with pytest.raises(LeaseLost):
        await store.append_events(run.name, "w1", [("solve_progress", b"stale")])
    assert await store.finish(run.name, "w1", S, b"stale", None) is False
    assert await store.finish(run.name, "w2", S, b"fresh", None) is True
    final = await store.get_run(run.name, "k")
    assert (final.state, final.response, final.attempts) == (S, b"fresh", 2)
    assert await store.load_checkpoint(run.name) == b"round-1"
    assert _changes(await store.events_after(run.name, 0)) == [(Q, R, 1), (R, R, 2), (R, S, 2)]


async def test_lease_takes_the_oldest_queued_run_first(store: RunStore, clock):
    names = []
    for index in range(3):
        names.append((await store.create_run("k", "solve", bytes([index]), None)).name)
        clock.advance(1)
    leased = [(await store.lease(f"w{i}", 30)).name for i in range(3)]
    assert leased == names
    assert await store.lease("w9", 30) is None


async def test_cancelling_a_queued_run_ends_it_at_once(store: RunStore):
    run = await store.create_run("k", "solve", b"r", None)
    cancelled = await store.cancel_run(run.name, "k")
    assert (cancelled.state, cancelled.end_time is not None) == (C, True)
    assert await store.lease("w", 30) is None
    assert _changes(await store.events_after(run.name, 0)) == [(Q, C, 0)]
    with pytest.raises(FailedPrecondition):
        await store.cancel_run(run.name, "k")


async def test_cancelling_a_running_run_stops_its_worker_at_the_next_renewal(store: RunStore):
    run = await store.create_run("k", "solve", b"r", None)
    await store.lease("w", 30)
    requested = await store.cancel_run(run.name, "k")
    assert (requested.state, requested.cancel_requested) == (R, True)
    assert (await store.cancel_run(run.name, "k")).cancel_requested is True  # unchanged
    assert await store.renew(run.name, "w", 30) is False
    assert await store.finish(run.name, "w", C, None, None) is True
    assert (await store.get_run(run.name, "k")).state is C


async def test_a_cancel_of_a_run_whose_worker_died_ends_it(store: RunStore, clock):
    first = await store.create_run("k", "solve", b"1", None)
    second = await store.create_run("k", "solve", b"2", None)
    await store.lease("w", 10)
    await store.lease("w", 10)
    await store.cancel_run(second.name, "k")  # requested while its lease holds
    clock.advance(11)
    assert (await store.cancel_run(first.name, "k")).state is C  # lease expired: at once
    # The expired run whose cancel was requested is cancelled, not leased again.
    assert await store.lease("w2", 10) is None
    assert (await store.get_run(second.name, "k")).state is C


async def test_create_run_is_idempotent_on_the_owners_request_id(store: RunStore):
    request_id = str(uuid.uuid4())
    first = await store.create_run("k", "solve", b"r", request_id)
    again = await store.create_run("k", "solve", b"other", request_id)
    assert again.name == first.name and again.request == b"r"
    other_key = await store.create_run("k2", "solve", b"r", request_id)
    assert other_key.name != first.name
    with pytest.raises(InvalidArgument) as error:
        await store.create_run("k", "solve", b"r", "not-a-uuid")
    assert error.value.field == "request_id"
    with pytest.raises(InvalidArgument) as error:
        await store.create_run("k", "poem", b"r", None)
    assert error.value.field == "kind"


async def test_concurrent_creates_with_one_request_id_make_one_run(store: RunStore):
    request_id = str(uuid.uuid4())
    runs = await asyncio.gather(*(store.create_run("k", "solve", b"r", request_id)
                                  for _ in range(8)))
    assert len({run.name for run in runs}) == 1
    page, _ = await store.list_runs("k", None, None, 100, "")
    assert len(page) == 1


async def test_pages_are_newest_first_and_tokens_are_bound_to_their_list(store: RunStore, clock):
    made = []
    for _ in range(7):
        made.append((await store.create_run("k", "solve", b"r", None)).name)
        clock.advance(1)
    seen, token, pages = [], "", 0
    while True:
        page, token = await store.list_runs("k", None, None, 3, token)
        seen += [run.name for run in page]
        pages += 1
        if not token:
            break
    assert seen == made[::-1] and pages == 3
    _, token = await store.list_runs("k", None, None, 3, "")
    for owner, state in (("k", Q), ("k2", None), (None, None)):
        with pytest.raises(InvalidArgument) as error:
            await store.list_runs(owner, state, None, 3, token)
        assert error.value.field == "page_token"
    for bad in ("garbage!", "eyJhZnRlciI6IngifQ", token[:-3]):
        with pytest.raises(InvalidArgument) as error:
            await store.list_runs("k", None, None, 3, bad)
        assert error.value.field == "page_token"
    with pytest.raises(InvalidArgument) as error:
        await store.list_runs("k", None, None, -1, "")
    assert error.value.field == "page_size"
    assert len((await store.list_runs("k", None, None, 0, ""))[0]) == 7  # 0: the default


async def test_lists_filter_by_state_and_batch(store: RunStore):
    alone = await store.create_run("k", "solve", b"r", None)
    batch = await store.create_batch("k", [("solve", b"a"), ("answer", b"b"), ("solve", b"c")],
                                     None, "three")
    await store.lease("w", 30)  # the oldest: the run created alone
    running, _ = await store.list_runs("k", R, None, 50, "")
    assert [run.name for run in running] == [alone.name]
    in_batch, _ = await store.list_runs("k", None, batch.name, 2, "")
    assert [(run.request, run.batch_index, run.batch) for run in in_batch] == \
        [(b"a", 0, batch.name), (b"b", 1, batch.name)]
    queued, _ = await store.list_runs("k", Q, batch.name, 50, "")
    assert len(queued) == 3
    with pytest.raises(InvalidArgument) as error:
        await store.list_runs("k", None, "batches/nope", 50, "")
    assert error.value.field == "filter"


async def test_another_keys_runs_and_batches_are_not_found(store: RunStore):
    run = await store.create_run("owner", "solve", b"r", None)
    batch = await store.create_batch("owner", [("solve", b"a")], None)
    for call in (store.get_run(run.name, "intruder"), store.cancel_run(run.name, "intruder"),
                 store.delete_run(run.name, "intruder"), store.get_batch(batch.name, "intruder"),
                 store.cancel_batch(batch.name, "intruder")):
        with pytest.raises(NotFound):
            await call
    assert (await store.list_runs("intruder", None, None, 50, ""))[0] == []
    assert (await store.list_batches("intruder", 50, ""))[0] == []
    assert (await store.get_run(run.name, None)).owner == "owner"  # an administrative caller
    assert len((await store.list_runs(None, None, None, 50, ""))[0]) == 2


async def test_names_are_checked_and_unknown_ones_not_found(store: RunStore):
    for bad in ("run/1", "runs/", "runs/not-a-uuid", "batches/" + str(uuid.uuid4())):
        with pytest.raises(InvalidArgument) as error:
            await store.get_run(bad, None)
        assert error.value.field == "name"
    with pytest.raises(NotFound):
        await store.get_run(f"runs/{uuid.uuid4()}", None)
    with pytest.raises(NotFound):
        await store.get_batch(f"batches/{uuid.uuid4()}", None)


async def test_a_batch_counts_its_runs_derives_its_state_and_numbers_its_events(store, clock):
    batch = await store.create_batch("k", [("solve", b"a"), ("solve", b"b")], None, "two")
    assert (batch.run_count, batch.state, batch.display_name) == (2, Q, "two")
    assert batch.counts[Q] == 2 and set(batch.counts) == set(RunState)
    first = await store.lease("w", 30)
    second = await store.lease("w", 30)
    assert (await store.get_batch(batch.name, "k")).state is R
    await store.finish(first.name, "w", S, b"ok", None)
    middle = await store.get_batch(batch.name, "k")
    assert (middle.state, middle.counts[S], middle.counts[R], middle.end_time) == (R, 1, 1, None)
    clock.advance(5)
    await store.finish(second.name, "w", F, None, b"err")
    done = await store.get_batch(batch.name, "k")
    assert (done.state, done.counts[S], done.counts[F], done.end_time) == (S, 1, 1, clock.now)
    events = await store.batch_events_after(batch.name, 0)
    assert [e.sequence for e in events] == [1, 2, 3, 4]
    assert [(e.run, e.state) for e in events] == [(first.name, R), (second.name, R),
                                                  (first.name, S), (second.name, F)]
    assert [e.sequence for e in await store.batch_events_after(batch.name, 3)] == [4]
    assert done.last_event_sequence == 4
    assert await store.counts_by_state(batch.name) == {Q: 0, R: 0, S: 1, F: 1, C: 0}
    with pytest.raises(FailedPrecondition):
        await store.cancel_batch(batch.name, "k")


async def held_writer(store: RunStore) -> tuple[asyncio.Future, threading.Event]:
    """Keeps the store's writer thread busy until `release` is set: the writes queued meanwhile
    wait (uncommitted) behind the held one, then commit together. Returns (the held write,
    release) once it holds."""
    entered, release = threading.Event(), threading.Event()

    def held(connection):
        entered.set()
        release.wait(10)

    busy = asyncio.ensure_future(store._database.write(writes.transaction, held))
    await asyncio.to_thread(entered.wait, 10)
    return busy, release


async def test_writes_committed_together_number_their_batch_events_and_end_the_batch(store):
    """Writes queued while the writer is busy commit in one transaction (group commit), which
    writes their batch events once, after its last write: still gapless, in the writes' order,
    and the batch ends with the group that ends its last run."""
    batch = await store.create_batch("k", [("solve", b"a"), ("solve", b"b"), ("solve", b"c")],
                                     None)
    leased = [await store.lease(f"w{i}", 30) for i in range(3)]
    busy, release = await held_writer(store)
    ends = [asyncio.ensure_future(store.finish(run.name, f"w{i}", S, b"ok", None,
                                               [("solve_progress", b"p")]))
            for i, run in enumerate(leased)]
    await asyncio.sleep(0)  # the three finishes queued behind the held write
    release.set()
    await busy
    assert await asyncio.gather(*ends) == [True, True, True]
    done = await store.get_batch(batch.name, "k")
    assert (done.state, done.counts[S], done.last_event_sequence) == (S, 3, 6)
    assert done.end_time is not None
    events = await store.batch_events_after(batch.name, 0)
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5, 6]
    assert [(e.run, e.state) for e in events[3:]] == [(run.name, S) for run in leased]


async def test_cancelling_a_batch_cancels_what_has_not_ended(store: RunStore):
    batch = await store.create_batch("k", [("solve", b"a"), ("solve", b"b"), ("solve", b"c")],
                                     None)
    first = await store.lease("w", 30)
    second = await store.lease("w", 30)
    await store.finish(first.name, "w", S, b"ok", None)
    cancelled = await store.cancel_batch(batch.name, "k")
    assert cancelled.cancel_requested and cancelled.counts[C] == 1 and cancelled.counts[R] == 1
    assert await store.renew(second.name, "w", 30) is False
    await store.finish(second.name, "w", C, None, None)
    final = await store.get_batch(batch.name, "k")
    assert (final.state, final.counts[S], final.counts[C]) == (C, 1, 2)


async def test_create_batch_is_idempotent_and_checks_its_limits_before_writing(store: RunStore):
    request_id = str(uuid.uuid4())
    batch = await store.create_batch("k", [("solve", b"a")], request_id, "x")
    assert (await store.create_batch("k", [("solve", b"b")], request_id)).name == batch.name
    cases = [([("solve", b"r")] * 2001, "items", "batch_max_items = 2000"),
             ([("solve", b"r" * 40_000)] * 2, "items", "batch_max_bytes = 65536"),
             ([], "items", "at least one"),
             ([("solve", b"r"), ("solve", b"r"), ("poem", b"r")], "items[2].kind", "poem")]
    for items, field, words in cases:
        with pytest.raises(InvalidArgument) as error:
            await store.create_batch("k", items, None)
        assert error.value.field == field and words in error.value.description
    with pytest.raises(InvalidArgument) as error:
        await store.create_batch("k", [("solve", b"r")], None, "n" * 513)
    assert error.value.field == "batch.display_name"
    assert len((await store.list_batches("k", 50, ""))[0]) == 1
    assert (await store.counts_by_state())[Q] == 1


async def test_create_batch_writes_all_its_runs_or_none(store: RunStore, monkeypatch):
    # The transaction fails after every run was inserted (1,500: two bulk inserts): none stays.
    inserted = []

    def failing(connection, *args):
        inserted.append(writes_create_batch(connection, *args))
        raise OSError("the disk is full")

    monkeypatch.setattr(writes, "create_batch", failing)
    with pytest.raises(OSError):
        await store.create_batch("k", [("solve", b"r")] * 1500, None)
    assert len(inserted) == 1
    assert (await store.list_batches("k", 50, ""))[0] == []
    assert sum((await store.counts_by_state()).values()) == 0
    monkeypatch.setattr(writes, "create_batch", writes_create_batch)
    batch = await store.create_batch("k", [("solve", b"r")] * 1500, None)
    assert (await store.counts_by_state(batch.name))[Q] == 1500


async def test_delete_removes_an_ended_run_and_refuses_the_others(store: RunStore):
    run = await store.create_run("k", "solve", b"r", None)
    with pytest.raises(FailedPrecondition):
        await store.delete_run(run.name, "k")
    await store.lease("w", 30)
    with pytest.raises(FailedPrecondition):
        await store.delete_run(run.name, "k")
    await store.finish(run.name, "w", S, b"ok", None)
    await store.delete_run(run.name, "k")
    with pytest.raises(NotFound):
        await store.get_run(run.name, "k")
    assert await store.events_after(run.name, 0) == []
    batch = await store.create_batch("k", [("solve", b"a")], None)
    member = await store.lease("w", 30)
    await store.finish(member.name, "w", S, b"ok", None)
    with pytest.raises(FailedPrecondition):
        await store.delete_run(member.name, "k")
    assert (await store.get_batch(batch.name, "k")).run_count == 1


async def test_retention_purges_what_ended_long_enough_ago(store: RunStore, clock):
    old = await store.create_run("k", "solve", b"old", None)
    await store.cancel_run(old.name, "k")
    batch = await store.create_batch("k", [("solve", b"a"), ("solve", b"b")], None)
    member = await store.lease("w", 1000)
    await store.cancel_run((await store.lease("w", 1000)).name, "k")  # requested only
    clock.advance(100)
    recent = await store.create_run("k", "solve", b"recent", None)
    await store.cancel_run(recent.name, "k")
    waiting = await store.create_run("k", "solve", b"waiting", None)
    await store.finish(member.name, "w", S, b"ok", None)  # the batch's runs: one left RUNNING
    assert await store.purge_finished(50) == 1  # the old run; the batch has not ended
    with pytest.raises(NotFound):
        await store.get_run(old.name, "k")
    assert await store.events_after(old.name, 0) == []
    (await store.get_batch(batch.name, "k"))  # still there, with both runs
    assert (await store.get_run(recent.name, "k")).state is C
    assert (await store.get_run(waiting.name, "k")).state is Q
    runs, _ = await store.list_runs("k", None, batch.name, 50, "")
    cancelled_member = next(run for run in runs if run.name != member.name)
    await store.finish(cancelled_member.name, "w", C, None, None)
    clock.advance(100)
    assert await store.purge_finished(50) == 3  # the batch's two runs and the recent run
    with pytest.raises(NotFound):
        await store.get_batch(batch.name, "k")
    assert await store.batch_events_after(batch.name, 0) == []
    assert (await store.get_run(waiting.name, "k")).state is Q


async def test_a_watcher_wakes_when_an_event_is_written(store: RunStore):
    run = await store.create_run("k", "solve", b"r", None)
    assert await store.wait_for_events(run.name, 0, timeout_s=0.01) == []
    waiter = asyncio.create_task(store.wait_for_events(run.name, 0, timeout_s=60))
    await asyncio.sleep(0)  # let it read (nothing yet) and wait
    await store.lease("w", 30)
    events = await asyncio.wait_for(waiter, 30)
    assert [(e.sequence, e.state) for e in events] == [(1, R)]


async def test_concurrent_leasers_never_get_the_same_run(open_store):
    stores = [await open_store() for _ in range(3)]
    total = 60
    await stores[0].create_batch("k", [("solve", bytes([i])) for i in range(total)], None)

    async def drain(store: RunStore, worker: str) -> list[str]:
        taken = []
        while (run := await store.lease(worker, 300)) is not None:
            taken.append(run.name)
        return taken

    results = await asyncio.gather(*(drain(store, f"w{i}-{j}") for i, store in enumerate(stores)
                                     for j in range(2)))
    taken = [name for names in results for name in names]
    assert len(taken) == total and len(set(taken)) == total
    runs, _ = await stores[0].list_runs(None, None, None, 1000, "")
    assert {run.attempts for run in runs} == {1}


async def test_each_attempt_records_its_trace_and_only_its_holder_writes(store: RunStore, clock):
    run = await store.create_run("k", "solve", b"r", None)
    await store.lease("w1", 10)
    await store.record_trace(run.name, "w1", "a" * 32)
    clock.advance(11)
    await store.lease("w2", 10)
    await store.record_trace(run.name, "w2", "b" * 32)
    with pytest.raises(LeaseLost):
        await store.record_trace(run.name, "w1", "c" * 32)
    assert (await store.get_run(run.name, "k")).trace_ids == ("a" * 32, "b" * 32)
    with pytest.raises(ValueError):
        await store.append_events(run.name, "w2", [(STATE_CHANGED, b"forged")])
    assert await store.append_events(run.name, None, [("note", b"by the edge")]) == [3]
    assert await store.append_events(run.name, "w2", []) == []


async def test_a_run_created_into_a_batch_takes_the_next_index(store: RunStore):
    batch = await store.create_batch("k", [("solve", b"a")], None)
    member = await store.lease("w", 30)
    await store.finish(member.name, "w", S, b"ok", None)
    assert (await store.get_batch(batch.name, "k")).end_time is not None
    joined = await store.create_run("k", "answer", b"b", None, batch=batch.name)
    assert (joined.batch, joined.batch_index) == (batch.name, 1)
    reopened = await store.get_batch(batch.name, "k")
    assert (reopened.run_count, reopened.end_time, reopened.state) == (2, None, R)
    with pytest.raises(NotFound):
        await store.create_run("other", "solve", b"c", None, batch=batch.name)
