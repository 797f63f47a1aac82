"""Removing runs from the run store: deleting one ended run (DeleteRun) and the retention's purge
of everything that ended long enough ago, as functions of a Connection inside one write
transaction (`writes.transaction`, as every write)."""

from __future__ import annotations

from sqlalchemy import Connection, delete, select

from libs.errors import FailedPrecondition
from services.orchestrator.runs import paging, reads
from services.orchestrator.runs.model import RunState
from services.orchestrator.runs.schema import batch_events, batches, run_events, runs


def delete_run(connection: Connection, name: str, owner: str | None) -> None:
    """Deletes an ended run that is not part of a batch, with its events; FailedPrecondition
    otherwise."""
    row = reads.run_row(connection, paging.parse_name(name, "runs"), owner, lock=True)
    if not RunState(row.state).finished:
        raise FailedPrecondition(f"{name} is {row.state}: cancel it first")
    if row.batch_id is not None:
        raise FailedPrecondition(f"{name} belongs to batches/{row.batch_id}: a batch's runs stay "
                                 "with it until the retention purges both")
    connection.execute(delete(run_events).where(run_events.c.run_id == row.run_id))
    connection.execute(delete(runs).where(runs.c.run_id == row.run_id))


def purge_finished(connection: Connection, cutoff: float) -> int:
    """Deletes runs (and their events) that ended before `cutoff`, and batches whose last run
    ended before it with all their runs; a batch's runs go only with their batch. Returns the
    number of runs deleted."""
    alone = connection.execute(select(runs.c.run_id).where(
        runs.c.batch_id.is_(None), runs.c.end_time < cutoff)).scalars().all()
    old = connection.execute(select(batches.c.batch_id).where(
        batches.c.end_time < cutoff)).scalars().all()
    in_batches = connection.execute(select(runs.c.run_id).where(
        runs.c.batch_id.in_(old))).scalars().all() if old else []
    run_ids = [*alone, *in_batches]
    for start in range(0, len(run_ids), 500):
        chunk = run_ids[start:start + 500]
        connection.execute(delete(run_events).where(run_events.c.run_id.in_(chunk)))
        connection.execute(delete(runs).where(runs.c.run_id.in_(chunk)))
    for start in range(0, len(old), 500):
        chunk = old[start:start + 500]
        connection.execute(delete(batch_events).where(batch_events.c.batch_id.in_(chunk)))
        connection.execute(delete(batches).where(batches.c.batch_id.in_(chunk)))
    return len(run_ids)
