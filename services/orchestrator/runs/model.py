"""The run store's records: runs, batches and their events, as plain frozen dataclasses.

Requests, responses, checkpoints and worker events are held as serialized bytes with a kind string;
only the gRPC edge (services/orchestrator/api) turns them into and from proto messages
(mesh.orchestrator.v1.Run, Batch, RunEvent). Times are seconds since the Unix epoch (floats, UTC),
read from the store's clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from libs.errors import FailedPrecondition


class RunState(enum.Enum):
    """A run's lifecycle (mesh.orchestrator.v1.Run.State without its STATE_ prefix).

    QUEUED -> RUNNING -> SUCCEEDED | FAILED; QUEUED | RUNNING -> CANCELLED. A RUNNING run whose
    lease expired stays RUNNING until a worker leases it again (attempts + 1)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        """True for the end states: SUCCEEDED, FAILED, CANCELLED."""
        return self in FINISHED_STATES


FINISHED_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
KINDS = ("solve", "answer")
"""Kinds of work a run holds: a SolveProblemRequest ("solve"), an AnswerQueryRequest ("answer")."""
STATE_CHANGED = "state_changed"
"""EventRecord.kind of the events the store writes itself, at each state change."""


class StoreError(RuntimeError):
    """The store cannot be opened: a corrupt database, one of a newer schema version, one that is
    not a run store, or a URL of an unsupported kind. The message names the file or URL (password
    masked); nothing was written. Raised by `RunStore.open` only: main() reports it and exits."""


class LeaseLost(FailedPrecondition):
    """The worker no longer holds the run's lease (it expired and another worker took the run, or
    the run ended): it must stop working on the run and write nothing more."""


@dataclass(frozen=True)
class RunRecord:
    """One run as stored.

    `name` is "runs/{uuid}"; `owner` the API key id that created it ("" for calls without a key);
    `kind` one of KINDS and `request` the serialized request of that kind. `response` (serialized
    SolveProblemResponse or AnswerQueryResponse) is set once SUCCEEDED, `error` (a serialized
    google.rpc.Status) once FAILED. Times are epoch seconds (None until they happen). `lease_owner`
    and `lease_expires` are those of the last worker that leased it. `checkpoint` is the newest
    checkpoint's bytes: filled by `RunStore.lease` only (other reads leave it None; see
    `RunStore.load_checkpoint`)."""

    name: str
    owner: str
    kind: str
    request: bytes
    state: RunState
    attempts: int
    create_time: float
    update_time: float
    start_time: float | None = None
    end_time: float | None = None
    batch: str | None = None
    batch_index: int = 0
    request_id: str | None = None
    response: bytes | None = None
    error: bytes | None = None
    last_event_sequence: int = 0
    cancel_requested: bool = False
    lease_owner: str | None = None
    lease_expires: float | None = None
    trace_ids: tuple[str, ...] = ()
    checkpoint: bytes | None = None


@dataclass(frozen=True)
class BatchRecord:
    """One batch as stored, with its runs counted by state (every RunState is a key).

    `name` is "batches/{uuid}"; `end_time` is set when its last run ended."""

    name: str
    owner: str
    display_name: str
    create_time: float
    run_count: int
    counts: Mapping[RunState, int] = field(default_factory=dict)
    end_time: float | None = None
    cancel_requested: bool = False
    last_event_sequence: int = 0
    request_id: str | None = None

    @property
    def state(self) -> RunState:
        """Derived from the runs: QUEUED while every run is queued, RUNNING while any is queued
        or running, then CANCELLED if the batch was cancelled, else SUCCEEDED."""
        queued = self.counts.get(RunState.QUEUED, 0)
        if queued == self.run_count and self.run_count:
            return RunState.QUEUED
        if queued or self.counts.get(RunState.RUNNING, 0):
            return RunState.RUNNING
        return RunState.CANCELLED if self.cancel_requested else RunState.SUCCEEDED


@dataclass(frozen=True)
class EventRecord:
    """One persisted event of a run, or of a batch (from `RunStore.batch_events_after`).

    `sequence` is 1-based and gapless per run (per batch for batch events); `run` the run's name;
    `time` epoch seconds. `kind` is STATE_CHANGED for the store's own events, with
    `previous_state` (None for none), `state` and `attempt` set and `payload` the serialized
    google.rpc.Status of a change to FAILED (else b""); any other kind is a worker's event
    ("solve_progress": a serialized StreamSolveProblemResponse) with its payload."""

    sequence: int
    run: str
    time: float
    kind: str
    payload: bytes = b""
    previous_state: RunState | None = None
    state: RunState | None = None
    attempt: int = 0
