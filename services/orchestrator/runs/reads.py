"""The run store's queries: records from rows, ownership checks, pages, events and counts.

Functions of a SQLAlchemy Connection inside a transaction (see database.Database); pure SQL, no
asyncio. An owner of None is an administrative caller (sees every run); otherwise a run or batch of
another owner is NotFound, exactly as an unknown one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, func, select

from libs.errors import NotFound
from services.orchestrator.runs import paging, statements
from services.orchestrator.runs.model import BatchRecord, EventRecord, RunRecord, RunState
from services.orchestrator.runs.schema import batches, runs
from services.orchestrator.runs.statements import RUN_COLUMNS


def run_record(row: Row, checkpoint: bytes | None = None) -> RunRecord:
    """The record of a `runs` row (selected with RUN_COLUMNS)."""
    m = row._mapping
    return RunRecord(
        name=f"runs/{m['run_id']}", owner=m["owner"], kind=m["kind"], request=m["request"],
        state=RunState(m["state"]), attempts=m["attempts"], create_time=m["create_time"],
        update_time=m["update_time"], start_time=m["start_time"], end_time=m["end_time"],
        batch=f"batches/{m['batch_id']}" if m["batch_id"] else None,
        batch_index=m["batch_index"], request_id=m["request_id"], response=m["response"],
        error=m["error"], last_event_sequence=m["last_event_sequence"],
        cancel_requested=bool(m["cancel_requested"]), lease_owner=m["lease_owner"],
        lease_expires=m["lease_expires"],
        trace_ids=tuple(m["trace_ids"].split()) if m["trace_ids"] else (),
        checkpoint=checkpoint)


def run_row(connection: Connection, run_id: str, owner: str | None, *,
            lock: bool = False) -> Row:
    """The run's row (RUN_COLUMNS), locked FOR UPDATE when `lock`; NotFound for an unknown run or
    one of another owner."""
    query = statements.RUN_BY_ID_LOCKED if lock else statements.RUN_BY_ID
    row = connection.execute(query, {"p_run_id": run_id}).first()
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"runs/{run_id} not found")
    return row


def get_run(connection: Connection, name: str, owner: str | None) -> RunRecord:
    return run_record(run_row(connection, paging.parse_name(name, "runs"), owner))


def load_checkpoint(connection: Connection, name: str) -> bytes | None:
    run_id = paging.parse_name(name, "runs")
    row = connection.execute(statements.RUN_CHECKPOINT, {"p_run_id": run_id}).first()
    if row is None:
        raise NotFound(f"{name} not found")
    return row.checkpoint


def list_runs(connection: Connection, owner: str | None, state: RunState | None,
              batch: str | None, size: int, token: str) -> tuple[list[RunRecord], str]:
    """A page of runs, newest first (a batch's in item order), and the next page's token."""
    bound = paging.fingerprint("runs", owner, state and state.name, batch)
    after = paging.decode_token(token, bound)
    size = paging.page_size(size)
    query = select(*RUN_COLUMNS)
    if owner is not None:
        query = query.where(runs.c.owner == owner)
    if state is not None:
        query = query.where(runs.c.state == state.value)
    ascending = batch is not None
    if batch is not None:
        query = query.where(runs.c.batch_id == paging.parse_name(batch, "batches", "filter"))
    if after is not None:
        query = query.where(runs.c.id > after if ascending else runs.c.id < after)
    query = query.order_by(runs.c.id.asc() if ascending else runs.c.id.desc()).limit(size + 1)
    rows = connection.execute(query).all()
    token = paging.encode_token(rows[size - 1].id, bound) if len(rows) > size else ""
    return [run_record(row) for row in rows[:size]], token


def counts_by_state(connection: Connection, batch_id: str | None) -> dict[RunState, int]:
    """Runs by state (every state a key), of one batch or of the whole store."""
    query = select(runs.c.state, func.count()).group_by(runs.c.state)
    if batch_id is not None:
        query = query.where(runs.c.batch_id == batch_id)
    counts = dict.fromkeys(RunState, 0)
    for state, count in connection.execute(query):
        counts[RunState(state)] = count
    return counts


def batch_record(connection: Connection, row: Row) -> BatchRecord:
    m = row._mapping
    return BatchRecord(
        name=f"batches/{m['batch_id']}", owner=m["owner"], display_name=m["display_name"],
        create_time=m["create_time"], run_count=m["run_count"],
        counts=counts_by_state(connection, m["batch_id"]), end_time=m["end_time"],
        cancel_requested=bool(m["cancel_requested"]),
        last_event_sequence=m["last_event_sequence"], request_id=m["request_id"])


def batch_row(connection: Connection, batch_id: str, owner: str | None, *,
              lock: bool = False) -> Row:
    """The batch's row, locked when `lock`; NotFound for an unknown batch or another owner's."""
    query = select(batches).where(batches.c.batch_id == batch_id)
    if lock:
        query = query.with_for_update()
    row = connection.execute(query).first()
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"batches/{batch_id} not found")
    return row


def get_batch(connection: Connection, name: str, owner: str | None) -> BatchRecord:
    return batch_record(connection, batch_row(connection, paging.parse_name(name, "batches"),
                                              owner))


def list_batches(connection: Connection, owner: str | None, size: int,
                 token: str) -> tuple[list[BatchRecord], str]:
    """A page of batches, newest first, and the next page's token."""
    bound = paging.fingerprint("batches", owner)
    after = paging.decode_token(token, bound)
    size = paging.page_size(size)
    query = select(batches)
    if owner is not None:
        query = query.where(batches.c.owner == owner)
    if after is not None:
        query = query.where(batches.c.id < after)
    rows = connection.execute(query.order_by(batches.c.id.desc()).limit(size + 1)).all()
    token = paging.encode_token(rows[size - 1].id, bound) if len(rows) > size else ""
    return [batch_record(connection, row) for row in rows[:size]], token


def _event(row: Row, run: str) -> EventRecord:
    m: Any = row._mapping
    return EventRecord(
        sequence=m["sequence"], run=run, time=m["time"], kind=m["kind"], payload=m["payload"],
        previous_state=RunState(m["previous_state"]) if m["previous_state"] else None,
        state=RunState(m["state"]) if m["state"] else None, attempt=m["attempt"])


def events_after(connection: Connection, name: str, after: int, limit: int) -> list[EventRecord]:
    """The run's events of sequence > `after`, in order, at most `limit`."""
    run_id = paging.parse_name(name, "runs")
    rows = connection.execute(statements.EVENTS_AFTER, {
        "p_run_id": run_id, "p_after": after, "p_limit": limit}).all()
    return [_event(row, name) for row in rows]


def run_and_events(connection: Connection, name: str, owner: str | None, after: int,
                   limit: int) -> tuple[RunRecord, list[EventRecord]]:
    """get_run, then events_after, in one read transaction."""
    return get_run(connection, name, owner), events_after(connection, name, after, limit)


def batch_events_after(connection: Connection, batch: str, after: int,
                       limit: int) -> list[EventRecord]:
    """The batch's events (its runs' state changes) of batch sequence > `after`, in order."""
    batch_id = paging.parse_name(batch, "batches")
    rows = connection.execute(statements.BATCH_EVENTS_AFTER, {
        "p_batch_id": batch_id, "p_after": after, "p_limit": limit}).all()
    return [_event(row, f"runs/{row.run_id}") for row in rows]
