"""The run store's hot-path statements, built once with bound parameters.

A run's life executes the same dozen statements (create, lease, events, end, a watch's reads).
Built per call, each cost SQLAlchemy its construction (argument coercion) and a fresh cache key
before the compiled form was found in the engine's cache; built once here, a statement's cache key
is memoized on the object, so an execution goes straight to the compiled SQL. Values are always
bound parameters (`p_*` in WHERE clauses, `v_*` in SET clauses; never literals), so one compiled
form serves every call. Statements whose shape varies with their arguments (an UPDATE's columns)
are built once per shape (`run_update`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from sqlalchemy import Integer, Text, bindparam, func, insert, select, update

from services.orchestrator.runs.model import RunState
from services.orchestrator.runs.schema import batch_events, batches, run_events, runs

RUN_COLUMNS = [column for column in runs.c if column.name != "checkpoint"]
UNFINISHED = [RunState.QUEUED.value, RunState.RUNNING.value]

RUN_BY_ID = select(*RUN_COLUMNS).where(runs.c.run_id == bindparam("p_run_id"))
"""The run's row without its checkpoint (p_run_id)."""
RUN_BY_ID_LOCKED = RUN_BY_ID.with_for_update()
RUN_CHECKPOINT = select(runs.c.checkpoint).where(runs.c.run_id == bindparam("p_run_id"))
RUN_BY_REQUEST_ID = select(*RUN_COLUMNS).where(runs.c.owner == bindparam("p_owner"),
                                               runs.c.request_id == bindparam("p_request_id"))

EXPIRED_CANDIDATE = select(*RUN_COLUMNS).where(
    runs.c.state == RunState.RUNNING.value, runs.c.lease_expires < bindparam("p_now")
).order_by(runs.c.id).limit(1).with_for_update(skip_locked=True)
"""The oldest RUNNING run whose lease expired before p_now (rows others hold skipped)."""
_QUEUED = runs.alias("queued")  # not correlated with the UPDATE's own rows
LEASE_QUEUED = update(runs).where(
    runs.c.id == select(_QUEUED.c.id).where(_QUEUED.c.state == RunState.QUEUED.value)
    .order_by(_QUEUED.c.id).limit(1).with_for_update(skip_locked=True).scalar_subquery()
).values(
    state=RunState.RUNNING.value, attempts=runs.c.attempts + 1,
    start_time=func.coalesce(runs.c.start_time, bindparam("v_now")),
    lease_owner=bindparam("v_lease_owner"), lease_expires=bindparam("v_lease_expires"),
    update_time=bindparam("v_now"), error=None,
    last_event_sequence=runs.c.last_event_sequence + 1,
).returning(*RUN_COLUMNS)
"""Leases the oldest QUEUED run (rows others hold skipped) to v_lease_owner until
v_lease_expires at v_now, advancing its event sequence by its STATE_CHANGED event: its row as
updated, or none."""

EVENTS_AFTER = select(run_events).where(
    run_events.c.run_id == bindparam("p_run_id"),
    run_events.c.sequence > bindparam("p_after")
).order_by(run_events.c.sequence).limit(bindparam("p_limit", type_=Integer))
BATCH_EVENTS_AFTER = select(batch_events).where(
    batch_events.c.batch_id == bindparam("p_batch_id"),
    batch_events.c.sequence > bindparam("p_after")
).order_by(batch_events.c.sequence).limit(bindparam("p_limit", type_=Integer))

INSERT_RUN = insert(runs)
INSERT_EVENTS = insert(run_events)
INSERT_BATCH_EVENT = insert(batch_events)

ADD_BATCH_EVENTS = update(batches).where(batches.c.batch_id == bindparam("p_batch_id")).values(
    last_event_sequence=batches.c.last_event_sequence + bindparam("v_events")
).returning(batches.c.last_event_sequence)
"""Takes v_events batch sequence numbers: returns the last."""
BATCH_UNFINISHED_RUN = select(runs.c.id).where(
    runs.c.batch_id == bindparam("p_batch_id"), runs.c.state.in_(UNFINISHED)).limit(1)
END_BATCH = update(batches).where(batches.c.batch_id == bindparam("p_batch_id")).values(
    end_time=bindparam("v_end_time"))


@functools.cache
def run_update(columns: frozenset[str], events: bool) -> object:
    """UPDATE runs SET each of `columns` = :v_<column> WHERE run_id = :p_run_id; with `events`,
    also last_event_sequence += :v_events, RETURNING the new last_event_sequence."""
    values: dict[str, object] = {name: bindparam(f"v_{name}") for name in columns}
    statement = update(runs).where(runs.c.run_id == bindparam("p_run_id"))
    if not events:
        return statement.values(**values)
    values["last_event_sequence"] = runs.c.last_event_sequence + bindparam("v_events")
    return statement.values(**values).returning(runs.c.last_event_sequence)


@functools.cache
def held_run_update(columns: frozenset[str], trace: bool = False) -> object:
    """UPDATE runs SET each of `columns` = :v_<column>, last_event_sequence += :v_events WHERE
    run_id = :p_run_id AND it is RUNNING with its lease held by :p_worker_id, RETURNING the new
    last_event_sequence, attempts and batch_id: a worker's write to the run it holds in one
    statement (no row when it no longer holds it). With `trace`, the trace id :v_trace_id is
    also added to trace_ids (space-separated)."""
    values: dict[str, object] = {name: bindparam(f"v_{name}") for name in columns}
    values["last_event_sequence"] = runs.c.last_event_sequence + bindparam("v_events")
    if trace:
        values["trace_ids"] = func.trim(
            runs.c.trace_ids + " " + bindparam("v_trace_id", type_=Text))
    return update(runs).where(
        runs.c.run_id == bindparam("p_run_id"), runs.c.state == RunState.RUNNING.value,
        runs.c.lease_owner == bindparam("p_worker_id")
    ).values(**values).returning(runs.c.last_event_sequence, runs.c.attempts, runs.c.batch_id)


class HeldRun(NamedTuple):
    """A run as `held_run_update` returned it, with its id."""

    run_id: str
    last_event_sequence: int
    attempts: int
    batch_id: str | None


def run_update_params(run_id: str, values: dict[str, object],
                      events: int | None = None) -> dict[str, object]:
    """The parameters of `run_update(frozenset(values), events is not None)`."""
    params = {f"v_{name}": value for name, value in values.items()}
    params["p_run_id"] = run_id
    if events is not None:
        params["v_events"] = events
    return params
