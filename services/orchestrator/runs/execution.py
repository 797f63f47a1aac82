"""What the run workers need from the orchestrator's edge to execute a run, with no proto in it.

The worker (`worker.py`, `attempt.py`) leases runs and keeps their leases; an `Executor` (built in
`api/run_execution.py` over the synchronous servicer, so a run takes the same path as a
SolveProblem or AnswerQuery call) executes one and reports its progress to a `RunProgress`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from services.orchestrator.runs.model import RunRecord, RunState


class Deferred(Exception):
    """The run cannot start now, for a reason that passes (its key's rate limit, the
    orchestrator's admission control): the worker keeps the lease, waits `retry_after_s` seconds
    and asks the executor again."""

    def __init__(self, retry_after_s: float, message: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Outcome:
    """How an execution ended: SUCCEEDED with the serialized response, or FAILED with a
    serialized google.rpc.Status (what the synchronous call would have answered)."""

    state: RunState
    response: bytes | None = None
    error: bytes | None = None


class RunProgress(Protocol):
    """Where an execution reports, in order; both calls are synchronous and never block (the
    worker persists them behind)."""

    def event(self, kind: str, payload: bytes) -> None:
        """A run event: `kind` ("solve_progress") and its serialized payload."""
        ...

    def checkpoint(self, state: bytes | Callable[[], bytes | None]) -> None:
        """The loop's state after a finished round (a serialized `LoopCheckpoint`), or a
        function serializing it, called only if it is stored (not when a newer checkpoint or
        the run's end comes first); a function returning None stores nothing."""
        ...


class Executor(Protocol):
    """Executes runs (see the module docstring)."""

    async def execute(self, run: RunRecord, progress: RunProgress) -> Outcome:
        """Executes `run` (resuming from `run.checkpoint` when it has one) to its outcome.
        Raises Deferred when it cannot start now; cancelled, it stops its work (its calls to
        the agents' services are cancelled with it)."""
        ...

    def failure(self, error: BaseException) -> bytes:
        """The serialized google.rpc.Status of an unexpected error of `execute` (INTERNAL)."""
        ...

    def exhausted(self, attempts: int) -> bytes:
        """The serialized google.rpc.Status of a run abandoned `attempts` times (ABORTED)."""
        ...
