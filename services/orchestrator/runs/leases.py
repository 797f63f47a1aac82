"""A worker's lease of the next run, as functions of a Connection inside one write transaction
(see `writes` for the state machine they share).

The oldest QUEUED run is taken in one statement, `UPDATE runs ... WHERE id = (SELECT id ...
ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING ...` (PostgreSQL skips the rows other
transactions hold, so concurrent leasers never get the same run; SQLite has one writer), then its
STATE_CHANGED event. A run whose lease expired (its worker was killed) is looked for first, when
asked, and taken by a locking read then an update: it may have been asked to cancel, and is then
cancelled instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import Connection, Row

from services.orchestrator.runs import reads, statements, writes
from services.orchestrator.runs.model import STATE_CHANGED, RunRecord, RunState


def lease(connection: Connection, now: float, worker_id: str, lease_s: float,
          expired: bool = True) -> RunRecord | None:
    """Leases the oldest run whose lease expired (looked for only when `expired`), else the
    oldest QUEUED one: RUNNING, attempts + 1, lease to `worker_id` until now + lease_s; the
    record carries its checkpoint. None when no run waits."""
    if expired:
        while (row := connection.execute(statements.EXPIRED_CANDIDATE,
                                         {"p_now": now}).first()) is not None:
            if not row.cancel_requested:
                return _take(connection, row, now, worker_id, lease_s)
            writes.change_state(connection, row, now, RunState.CANCELLED, lease_owner=None,
                                lease_expires=None)
    row = connection.execute(statements.LEASE_QUEUED, {
        "v_now": now, "v_lease_owner": worker_id, "v_lease_expires": now + lease_s}).first()
    if row is None:
        return None
    writes.insert_events(connection, row.run_id, now, [
        (STATE_CHANGED, b"", RunState.QUEUED, RunState.RUNNING, row.attempts)],
        row.last_event_sequence)
    if row.batch_id is not None:
        writes.batch_event(connection, (row.batch_id, row.run_id, now, b"",
                                        RunState.QUEUED.value, RunState.RUNNING, row.attempts))
    return reads.run_record(row, _checkpoint(connection, row.run_id, row.attempts - 1))


def _take(connection: Connection, row: Row, now: float, worker_id: str,
          lease_s: float) -> RunRecord:
    """Leases the run of `row` (locked) to `worker_id`: its record, with its checkpoint."""
    values = {"attempts": row.attempts + 1, "start_time": row.start_time or now,
              "lease_owner": worker_id, "lease_expires": now + lease_s}
    last = writes.change_state(connection, row, now, RunState.RUNNING,
                               attempt=row.attempts + 1, **values)
    checkpoint = _checkpoint(connection, row.run_id, row.attempts)
    return dataclasses.replace(reads.run_record(row, checkpoint),
                               state=RunState.RUNNING, update_time=now,
                               last_event_sequence=last, error=None, **values)


def _checkpoint(connection: Connection, run_id: str, earlier_attempts: int) -> bytes | None:
    """The run's checkpoint after `earlier_attempts` attempts (only a worker that held the run
    stores one: before the first attempt there is none to read)."""
    if earlier_attempts == 0:
        return None
    return connection.execute(statements.RUN_CHECKPOINT, {"p_run_id": run_id}).scalar_one()


def finish_and_lease(connection: Connection, now: float, name: str, worker_id: str,
                     state: RunState, response: bytes | None, error: bytes | None,
                     events: Sequence[tuple[str, bytes]], lease_s: float,
                     expired: bool = True,
                     trace_id: str | None = None) -> tuple[bool, RunRecord | None]:
    """writes.finish; then, when it ended the run, the worker's next run as `lease` takes it:
    (finished, leased record or None)."""
    if not writes.finish(connection, now, name, worker_id, state, response, error, events,
                         trace_id):
        return False, None
    return True, lease(connection, now, worker_id, lease_s, expired)
