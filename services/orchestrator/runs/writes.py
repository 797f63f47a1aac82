"""The run store's state machine: creating runs and batches, lease renewals, checkpoints, events,
ends, cancellation, as functions of a Connection inside one write transaction (a worker's lease of
the next run: `leases`; deletion and retention: `removal`).

Every state change writes its STATE_CHANGED event in the same transaction (per-run sequence, and
per-batch sequence for a batch's runs), so a watcher never sees a state without its event. Rows
are locked run first, then batch, everywhere, so that concurrent writers cannot deadlock; under
`transaction` a write's batch events are written last, all of a batch's in one statement, so that
the batch's row (which every run of the batch updates) stays locked only until the commit; under
`batch_events_last` a group of writes committed together (`group_commit`) writes them once, after
its last write.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

from sqlalchemy import Connection, Row, insert, select, update

from libs.errors import FailedPrecondition, InvalidArgument
from services.orchestrator.runs import paging, reads, recent, statements
from services.orchestrator.runs.model import (
    KINDS,
    STATE_CHANGED,
    EventRecord,
    LeaseLost,
    RunRecord,
    RunState,
)
from services.orchestrator.runs.schema import batches, runs

# (kind, payload, previous_state, state, attempt) of an event to append.
Event = tuple[str, bytes, RunState | None, RunState | None, int]
# (batch_id, run_id, time, payload, previous_state, state) of a batch event to write.
BatchEvent = tuple[str, str, float, bytes, str, RunState, int]
BATCH_EVENTS = "run_store_batch_events"
"""Key of Connection.info under which `transaction` queues the batch events of a write."""


def transaction(connection: Connection, fn, *args):
    """(fn(connection, *args), the run events it wrote) with its batch events written after it
    (see the module docstring): how RunStore runs every write function. Inside
    `batch_events_last` (a group of writes in one transaction) the group writes them, after its
    last write."""
    if BATCH_EVENTS in connection.info:
        return recent.collecting(connection, fn, *args)
    with batch_events_last(connection):
        return recent.collecting(connection, fn, *args)


@contextlib.contextmanager
def batch_events_last(connection: Connection) -> Iterator[None]:
    """Queues the batch events of the writes made inside it and writes them on its exit (none
    when it exits by an error): each batch's row is updated once, last, by the whole group."""
    queued: list[BatchEvent] = []
    connection.info[BATCH_EVENTS] = queued
    try:
        yield
        _write_batch_events(connection, queued)
    finally:
        connection.info.pop(BATCH_EVENTS, None)


def _write_batch_events(connection: Connection, events: Sequence[BatchEvent]) -> None:
    """Appends the events to their batches (in batch id order: rows locked in one order), and
    ends each batch whose last unfinished run just ended."""
    for batch_id in sorted({event[0] for event in events}):
        mine = [event for event in events if event[0] == batch_id]
        batch = {"p_batch_id": batch_id}
        last = connection.execute(statements.ADD_BATCH_EVENTS,
                                  {**batch, "v_events": len(mine)}).scalar_one()
        first = last - len(mine) + 1
        connection.execute(statements.INSERT_BATCH_EVENT, [
            {"batch_id": batch_id, "sequence": first + i, "run_id": run_id, "time": now,
             "kind": STATE_CHANGED, "payload": payload, "previous_state": previous,
             "state": state.value, "attempt": attempt}
            for i, (_, run_id, now, payload, previous, state, attempt) in enumerate(mine)])
        if any(event[5].finished for event in mine) and connection.execute(
                statements.BATCH_UNFINISHED_RUN, batch).first() is None:
            connection.execute(statements.END_BATCH, {**batch, "v_end_time": mine[-1][2]})


def check_kind(kind: str, field: str = "kind") -> None:
    if kind not in KINDS:
        raise InvalidArgument(field, f"{kind!r} is not one of {', '.join(KINDS)}")


def create_run(connection: Connection, now: float, owner: str, kind: str, request: bytes,
               request_id: str | None, batch: str | None) -> RunRecord:
    """A new QUEUED run, or the run (owner, request_id) already created."""
    return create_leased_run(connection, now, owner, kind, request, request_id, batch)[0]


def create_leased_run(connection: Connection, now: float, owner: str, kind: str,
                      request: bytes, request_id: str | None, batch: str | None,
                      lease_to: tuple[str, float] | None = None,
                      ) -> tuple[RunRecord, RunRecord | None]:
    """(the run as created, QUEUED, or the run (owner, request_id) already created; the new
    run leased to `lease_to` (worker_id, lease_s) as `leases.lease` would lease it, or None
    without `lease_to` or for an existing run). A run created into a `batch` is never leased
    here (the batch's workers lease its runs in order)."""
    check_kind(kind)
    request_id = paging.check_request_id(request_id)
    if request_id is not None:
        existing = connection.execute(statements.RUN_BY_REQUEST_ID, {
            "p_owner": owner, "p_request_id": request_id}).first()
        if existing is not None:
            return reads.run_record(existing), None
    if batch is None and lease_to is not None:
        return _create_leased(connection, now, owner, kind, request, request_id, *lease_to)
    batch_id, index = None, 0
    if batch is not None:
        batch_id = paging.parse_name(batch, "batches", "batch")
        row = reads.batch_row(connection, batch_id, owner, lock=True)
        index = row.run_count
        connection.execute(update(batches).where(batches.c.batch_id == batch_id)
                           .values(run_count=index + 1, end_time=None))
    values = _new_run(paging.new_id(), owner, kind, request, now, batch_id, index, request_id)
    connection.execute(statements.INSERT_RUN, values)
    return _record(values), None


def _create_leased(connection: Connection, now: float, owner: str, kind: str, request: bytes,
                   request_id: str | None, worker_id: str,
                   lease_s: float) -> tuple[RunRecord, RunRecord]:
    """A run outside batches inserted already leased (RUNNING, attempt 1) with its state
    change event: two statements, no read (the records are built from the values written)."""
    draft = LeasedRunDraft.new(now, owner, kind, request, request_id, worker_id, lease_s)
    insert_leased_run(connection, draft)
    return draft.created, draft.leased


@dataclasses.dataclass(frozen=True)
class LeasedRunDraft:
    """A run outside batches as `insert_leased_run` will insert it, already leased: its column
    values and both records (as created, QUEUED; as leased, RUNNING, attempt 1), known before
    the write, so that its worker can start executing while the creation commits."""

    values: dict
    created: RunRecord
    leased: RunRecord

    @classmethod
    def new(cls, now: float, owner: str, kind: str, request: bytes, request_id: str | None,
            worker_id: str, lease_s: float) -> LeasedRunDraft:
        """A draft with a new run id; InvalidArgument("kind" | "request_id")."""
        check_kind(kind)
        values = _new_run(paging.new_id(), owner, kind, request, now, None, 0,
                          paging.check_request_id(request_id))
        created = _record(values)
        values.update(state=RunState.RUNNING.value, attempts=1, start_time=now,
                      lease_owner=worker_id, lease_expires=now + lease_s, last_event_sequence=1)
        return cls(values, created, _record(values))


def insert_leased_run(connection: Connection, draft: LeasedRunDraft) -> RunRecord:
    """Inserts the drafted run with its QUEUED -> RUNNING state change: the record as created."""
    values = draft.values
    connection.execute(statements.INSERT_RUN, values)
    connection.execute(statements.INSERT_EVENTS, {
        "run_id": values["run_id"], "sequence": 1, "time": values["create_time"],
        "kind": STATE_CHANGED, "payload": b"", "previous_state": RunState.QUEUED.value,
        "state": RunState.RUNNING.value, "attempt": 1})
    return draft.created


def _record(values: dict) -> RunRecord:
    """The record of a run from the column values it was inserted with."""
    return RunRecord(
        name=f"runs/{values['run_id']}", owner=values["owner"], kind=values["kind"],
        request=values["request"], state=RunState(values["state"]),
        attempts=values["attempts"], create_time=values["create_time"],
        update_time=values["update_time"], start_time=values.get("start_time"),
        batch=f"batches/{values['batch_id']}" if values["batch_id"] else None,
        batch_index=values["batch_index"], request_id=values["request_id"],
        last_event_sequence=values["last_event_sequence"],
        lease_owner=values.get("lease_owner"), lease_expires=values.get("lease_expires"))


def _new_run(run_id: str, owner: str, kind: str, request: bytes, now: float,
             batch_id: str | None, index: int, request_id: str | None = None) -> dict:
    return {"run_id": run_id, "owner": owner, "kind": kind, "request": request,
            "request_id": request_id, "state": RunState.QUEUED.value, "attempts": 0,
            "create_time": now, "update_time": now, "batch_id": batch_id, "batch_index": index,
            "cancel_requested": False, "last_event_sequence": 0, "trace_ids": ""}


def create_batch(connection: Connection, now: float, owner: str,
                 items: Sequence[tuple[str, bytes]], request_id: str | None,
                 display_name: str) -> str:
    """The id of a new batch with one QUEUED run per item (all inserted here, in one
    transaction), or of the batch (owner, request_id) already created. Limits are checked by
    the caller."""
    request_id = paging.check_request_id(request_id)
    if request_id is not None:
        existing = connection.execute(select(batches.c.batch_id).where(
            batches.c.owner == owner, batches.c.request_id == request_id)).first()
        if existing is not None:
            return existing.batch_id
    batch_id = paging.new_id()
    connection.execute(insert(batches).values(
        batch_id=batch_id, owner=owner, request_id=request_id, display_name=display_name,
        create_time=now, run_count=len(items), cancel_requested=False, last_event_sequence=0))
    rows = [_new_run(paging.new_id(), owner, kind, request, now, batch_id, index)
            for index, (kind, request) in enumerate(items)]
    for start in range(0, len(rows), 1000):
        connection.execute(insert(runs), rows[start:start + 1000])
    return batch_id


def _append(connection: Connection, run_id: str, now: float, events: Sequence[Event],
            **values: object) -> list[int]:
    """Appends events to the run (its row already locked), setting the other column `values`
    in the same statement: their gapless sequence numbers."""
    values["update_time"] = now
    last = connection.execute(statements.run_update(frozenset(values), True),
                              statements.run_update_params(run_id, values, len(events))
                              ).scalar_one()
    return insert_events(connection, run_id, now, events, last)


def insert_events(connection: Connection, run_id: str, now: float, events: Sequence[Event],
                   last: int) -> list[int]:
    """Inserts the run's events numbered up to `last` (its sequence already advanced): their
    sequence numbers."""
    first = last - len(events) + 1
    connection.execute(statements.INSERT_EVENTS, [
        {"run_id": run_id, "sequence": first + i, "time": now, "kind": kind, "payload": payload,
         "previous_state": previous and previous.value, "state": state and state.value,
         "attempt": attempt}
        for i, (kind, payload, previous, state, attempt) in enumerate(events)])
    for i, (kind, payload, previous, state, attempt) in enumerate(events):
        recent.collect(connection, EventRecord(first + i, f"runs/{run_id}", now, kind, payload,
                                               previous, state, attempt))
    return list(range(first, last + 1))


def change_state(connection: Connection, row: Row, now: float, state: RunState, *,
                  error: bytes | None = None, attempt: int | None = None,
                  before: Sequence[Event] = (), **values: object) -> int:
    """Moves the run of `row` (locked) to `state` with the other column `values`, and writes the
    events `before`, then the STATE_CHANGED event, to the run and, for a batch's run, the
    latter to the batch (ending the batch when this was its last unfinished run). Returns the
    run's last event sequence."""
    attempt = row.attempts if attempt is None else attempt
    values.update(state=state.value, error=error)
    if state.finished:
        values["end_time"] = now
    event: Event = (STATE_CHANGED, error or b"", RunState(row.state), state, attempt)
    last = _append(connection, row.run_id, now, [*before, event], **values)[-1]
    if row.batch_id is not None:
        batch_event(connection, (row.batch_id, row.run_id, now, error or b"", row.state, state,
                                  attempt))
    return last


def batch_event(connection: Connection, event: BatchEvent) -> None:
    """Queues a batch's run's state change for its batch (written at once outside
    `transaction`)."""
    queued = connection.info.get(BATCH_EVENTS)
    if queued is None:
        _write_batch_events(connection, [event])
    else:
        queued.append(event)


def _held(connection: Connection, name: str, worker_id: str) -> Row | None:
    """The run's row, locked, when `worker_id` holds its lease and it is RUNNING; else None."""
    row = reads.run_row(connection, paging.parse_name(name, "runs"), None, lock=True)
    if row.state != RunState.RUNNING.value or row.lease_owner != worker_id:
        return None
    return row


def renew(connection: Connection, now: float, name: str, worker_id: str, lease_s: float) -> bool:
    """Extends the lease to now + lease_s: True; False when the worker lost it or cancellation
    was asked (the lease is kept then, for the worker to finish the run CANCELLED)."""
    row = _held(connection, name, worker_id)
    if row is None or row.cancel_requested:
        return False
    _set(connection, row.run_id, lease_expires=now + lease_s)
    return True


def _set(connection: Connection, run_id: str, **values: object) -> None:
    """UPDATE of the run's columns `values` (a prebuilt statement per set of columns)."""
    connection.execute(statements.run_update(frozenset(values), False),
                       statements.run_update_params(run_id, values))


def checkpoint(connection: Connection, now: float, name: str, worker_id: str,
               state: bytes) -> None:
    """Stores the run's checkpoint; LeaseLost when the worker no longer holds the run."""
    row = _held(connection, name, worker_id)
    if row is None:
        raise LeaseLost(f"{name}: lease lost; stop working on it")
    _set(connection, row.run_id, checkpoint=state, update_time=now)


def record_trace(connection: Connection, name: str, worker_id: str, trace_id: str) -> None:
    """Adds the attempt's trace id to the run; LeaseLost when the worker no longer holds it."""
    if _update_held(connection, name, worker_id, {}, 0, trace_id) is None:
        raise LeaseLost(f"{name}: lease lost; stop working on it")


def append_events(connection: Connection, now: float, name: str, worker_id: str | None,
                  events: Sequence[tuple[str, bytes]], state: bytes | None = None,
                  trace_id: str | None = None) -> list[int]:
    """Appends worker events (kind, payload) to the run: their sequence numbers; then stores
    the checkpoint `state` when given (as `checkpoint`). With a `worker_id`, LeaseLost unless
    it holds the run, and a `trace_id` is added to the run's (as `record_trace`)."""
    if worker_id is not None:
        if not events and state is None and trace_id is None:
            return []
        return _append_held(connection, now, name, worker_id, events, state, trace_id)
    if not events and state is None:
        return []
    row = reads.run_row(connection, paging.parse_name(name, "runs"), None, lock=True)
    if not events:
        _set(connection, row.run_id, checkpoint=state, update_time=now)
        return []
    return _append(connection, row.run_id, now, _worker_events(row, events),
                   **({} if state is None else {"checkpoint": state}))


def _append_held(connection: Connection, now: float, name: str, worker_id: str,
                 events: Sequence[tuple[str, bytes]], state: bytes | None,
                 trace_id: str | None) -> list[int]:
    """append_events for the worker holding the run: one conditional UPDATE ... RETURNING (the
    run RUNNING under its lease), then the events' INSERT."""
    _check_worker_kinds(events)
    values: dict[str, object] = {"update_time": now}
    if state is not None:
        values["checkpoint"] = state
    held = _update_held(connection, name, worker_id, values, len(events), trace_id)
    if held is None:
        raise LeaseLost(f"{name}: lease lost; stop working on it")
    return insert_events(connection, held.run_id, now, [
        (kind, payload, None, None, held.attempts) for kind, payload in events],
        held.last_event_sequence) if events else []


def _update_held(connection: Connection, name: str, worker_id: str, values: dict[str, object],
                 events: int, trace_id: str | None) -> statements.HeldRun | None:
    """statements.held_run_update of the run `name` for `worker_id`, advancing its sequence by
    `events` (and adding `trace_id` to its trace ids): the returned row, with run_id; None when
    the worker no longer holds the run."""
    run_id = paging.parse_name(name, "runs")
    params = {**statements.run_update_params(run_id, values, events), "p_worker_id": worker_id}
    if trace_id is not None:
        params["v_trace_id"] = trace_id.strip()
    held = connection.execute(statements.held_run_update(frozenset(values), trace_id is not None),
                              params).first()
    return None if held is None else statements.HeldRun(run_id, *held)


def _worker_events(row: Row, events: Sequence[tuple[str, bytes]]) -> list[Event]:
    _check_worker_kinds(events)
    return [(kind, payload, None, None, row.attempts) for kind, payload in events]


def _check_worker_kinds(events: Sequence[tuple[str, bytes]]) -> None:
    for kind, _ in events:
        if kind == STATE_CHANGED:
            raise ValueError(f"{STATE_CHANGED} events are the store's own")


def finish(connection: Connection, now: float, name: str, worker_id: str, state: RunState,
           response: bytes | None, error: bytes | None,
           events: Sequence[tuple[str, bytes]] = (), trace_id: str | None = None) -> bool:
    """Appends the worker's last `events` (as append_events), then ends the run in `state`
    (SUCCEEDED with its response, FAILED with its error, CANCELLED), adding `trace_id` to its
    trace ids when given: True; False, changing nothing, when the worker no longer holds it (so
    no run ends twice)."""
    if not state.finished:
        raise ValueError(f"finish needs an end state, not {state.name}")
    _check_worker_kinds(events)
    # One conditional UPDATE ... RETURNING instead of a locking read then an update.
    values = {"state": state.value, "error": error, "response": response, "lease_owner": None,
              "lease_expires": None, "end_time": now, "update_time": now}
    held = _update_held(connection, name, worker_id, values, len(events) + 1, trace_id)
    if held is None:
        return False
    run_id = held.run_id
    running = RunState.RUNNING
    ended: list[Event] = [(kind, payload, None, None, held.attempts) for kind, payload in events]
    ended.append((STATE_CHANGED, error or b"", running, state, held.attempts))
    insert_events(connection, run_id, now, ended, held.last_event_sequence)
    if held.batch_id is not None:
        batch_event(connection, (held.batch_id, run_id, now, error or b"", running.value,
                                  state, held.attempts))
    return True


def cancel_run(connection: Connection, now: float, name: str, owner: str | None) -> RunRecord:
    """QUEUED (or RUNNING with an expired lease: its worker is gone) -> CANCELLED at once; RUNNING
    -> cancel_requested, its worker stops at its next renewal. FailedPrecondition when ended."""
    row = reads.run_row(connection, paging.parse_name(name, "runs"), owner, lock=True)
    _cancel(connection, now, row)
    return reads.run_record(reads.run_row(connection, row.run_id, None))


def _cancel(connection: Connection, now: float, row: Row) -> None:
    state = RunState(row.state)
    if state.finished:
        raise FailedPrecondition(f"runs/{row.run_id} has already ended ({state.name})")
    abandoned = state is RunState.RUNNING and (row.lease_expires or 0) < now
    if state is RunState.QUEUED or abandoned:
        change_state(connection, row, now, RunState.CANCELLED, lease_owner=None,
                      lease_expires=None)
    elif not row.cancel_requested:
        connection.execute(update(runs).where(runs.c.run_id == row.run_id)
                           .values(cancel_requested=True, update_time=now))


def cancel_batch(connection: Connection, now: float, name: str, owner: str | None) -> None:
    """Cancels every unfinished run of the batch as cancel_run does; FailedPrecondition when all
    have ended."""
    batch_id = paging.parse_name(name, "batches")
    reads.batch_row(connection, batch_id, owner)  # NotFound first
    rows = connection.execute(
        select(*reads.RUN_COLUMNS).where(
            runs.c.batch_id == batch_id,
            runs.c.state.in_([RunState.QUEUED.value, RunState.RUNNING.value]))
        .order_by(runs.c.id).with_for_update()).all()
    if not rows:
        raise FailedPrecondition(f"{name}: every run has already ended")
    for row in rows:
        _cancel(connection, now, row)
    connection.execute(update(batches).where(batches.c.batch_id == batch_id)
                       .values(cancel_requested=True))
