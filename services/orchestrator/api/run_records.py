"""The run store's records as RunService messages (Run, Batch, RunEvent) and run requests out of
CreateRun / CreateBatch messages."""

from __future__ import annotations

from google.protobuf import timestamp_pb2
from mesh.orchestrator.v1 import run_service_pb2 as pb

from libs.errors import InvalidArgument
from services.orchestrator.runs.model import (
    STATE_CHANGED,
    BatchRecord,
    EventRecord,
    RunRecord,
    RunState,
)

STATE_TO_PROTO = {state: pb.Run.State.Value(f"STATE_{state.value}") for state in RunState}
SOLVE_PROGRESS = "solve_progress"
"""EventRecord.kind of a StreamSolveProblemResponse of the run's consensus loop."""


def _time(seconds: float | None) -> timestamp_pb2.Timestamp | None:
    if seconds is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(round(seconds * 1e9))
    return stamp


def run_message(record: RunRecord) -> pb.Run:
    """The Run of a stored run: request, state, times and, once ended, its result."""
    run = pb.Run(name=record.name, state=STATE_TO_PROTO[record.state], attempts=record.attempts,
                 create_time=_time(record.create_time), update_time=_time(record.update_time),
                 start_time=_time(record.start_time), end_time=_time(record.end_time),
                 batch=record.batch or "", batch_index=record.batch_index,
                 last_event_sequence=record.last_event_sequence,
                 cancel_requested=record.cancel_requested, trace_ids=record.trace_ids)
    if record.kind == "solve":
        run.solve.ParseFromString(record.request)
        if record.response is not None:
            run.solve_response.ParseFromString(record.response)
    else:
        run.answer.ParseFromString(record.request)
        if record.response is not None:
            run.answer_response.ParseFromString(record.response)
    if record.error is not None:
        run.error.ParseFromString(record.error)
    return run


def batch_message(record: BatchRecord) -> pb.Batch:
    """The Batch of a stored batch, with its counts by state and derived state."""
    counts = {state: record.counts.get(state, 0) for state in RunState}
    return pb.Batch(
        name=record.name, display_name=record.display_name,
        create_time=_time(record.create_time), end_time=_time(record.end_time),
        run_count=record.run_count, state=STATE_TO_PROTO[record.state],
        cancel_requested=record.cancel_requested,
        last_event_sequence=record.last_event_sequence,
        state_counts=pb.RunStateCounts(
            queued=counts[RunState.QUEUED], running=counts[RunState.RUNNING],
            succeeded=counts[RunState.SUCCEEDED], failed=counts[RunState.FAILED],
            cancelled=counts[RunState.CANCELLED]))


def event_message(record: EventRecord) -> pb.RunEvent:
    """The RunEvent of a stored event (a state change, or a step of the consensus loop)."""
    event = pb.RunEvent(sequence=record.sequence, run=record.run, time=_time(record.time))
    if record.kind == STATE_CHANGED:
        changed = event.state_changed
        changed.previous_state = (STATE_TO_PROTO[record.previous_state]
                                  if record.previous_state is not None else 0)
        changed.state = STATE_TO_PROTO[record.state] if record.state is not None else 0
        changed.attempt = record.attempt
        if record.state is RunState.FAILED and record.payload:
            changed.error.ParseFromString(record.payload)
    elif record.kind == SOLVE_PROGRESS:
        event.solve_progress.ParseFromString(record.payload)
    return event


def ends(record: EventRecord) -> bool:
    """The event moves its run to an end state (SUCCEEDED, FAILED, CANCELLED)."""
    return record.kind == STATE_CHANGED and record.state is not None and record.state.finished


def work_of(message: pb.Run | pb.BatchItem, field: str):
    """("solve" | "answer", the request message) of a Run or BatchItem.

    Raises:
        InvalidArgument: `field` (e.g. "run.request", "items[3]") when it holds no request.
    """
    which = message.WhichOneof("request")
    if which is None:
        raise InvalidArgument(field, "a solve or an answer request is required")
    return which, getattr(message, which)
