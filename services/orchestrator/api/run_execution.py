"""How a durable run is executed: the synchronous call's own path, on behalf of the run's key.

`RunExecutor.execute` does what a SolveProblem or AnswerQuery call through the server does:
access control admits it for the key that created the run (its scope and collections, the
orchestrator's and the key's admission caps, its rate limits and budgets: `AccessControl.
enter_as`), the servicer's method validates and runs it (the same admission to the consensus
loop, the same deadline as a call without one: `request_deadline_s`), and the response is
charged to the key's budgets. The loop's events become the run's events (StreamSolveProblem's
messages) and its checkpoints the run's checkpoint; a run with a checkpoint resumes from it.

A refusal that passes (rate limit, admission, a limits store down) defers the run (`Deferred`);
any other refusal (the key was revoked, lost the scope, used up its budget) fails it with the
status the call would have got.
"""

from __future__ import annotations

import functools
import logging
import time

from google.rpc import code_pb2, status_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import MeshError, to_status
from libs.telemetry import current_trace_id
from services.orchestrator.access.control import AccessControl, Admitted, Rejection
from services.orchestrator.access.interceptor import rejection_status
from services.orchestrator.api.responses import stream_event
from services.orchestrator.api.run_records import SOLVE_PROGRESS
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.checkpoint import Durable, LoopCheckpoint
from services.orchestrator.loop.checkpoint_codec import CheckpointCodec, CheckpointError
from services.orchestrator.loop.events import LoopEvent
from services.orchestrator.problems.connect_four import ExactResult
from services.orchestrator.problems.puzzle import Verdict
from services.orchestrator.runs.execution import Deferred, Outcome, RunProgress
from services.orchestrator.runs.model import RunRecord, RunState
from services.orchestrator.text.query import Draft, NoDefaultCollection, Passage

log = logging.getLogger(__name__)

CHECKPOINT_TYPES = (ExactResult, Verdict, Draft, Passage, NoDefaultCollection)
"""The agents' details and context (beside protobuf messages) a checkpoint may hold."""
METHODS = {"solve": "/mesh.orchestrator.v1.OrchestratorService/SolveProblem",
           "answer": "/mesh.orchestrator.v1.OrchestratorService/AnswerQuery"}
"""The synchronous method whose path (scope, admission, limits) each kind of run takes."""
PASSING = frozenset({"rate_limit", "admission", "key_in_flight", "store_unavailable"})
"""Refusals that defer a run rather than fail it."""
SERVICE = "orchestrator"


class _RunContext:
    """The servicer's view of a run's call: no caller deadline (the servicer's
    `request_deadline_s` applies, as for a call without one)."""

    @staticmethod
    def time_remaining() -> None:
        return None


class RunExecutor:
    """The `runs.execution.Executor` of this orchestrator (see the module docstring).

    Args:
        servicer: the synchronous OrchestratorService whose methods run the work.
        access: the server's access control (None: every run is admitted, as without keys).
    """

    def __init__(self, servicer: OrchestratorServicer, access: AccessControl | None) -> None:
        self._servicer = servicer
        self._access = access
        self._codec = CheckpointCodec(CHECKPOINT_TYPES)

    async def execute(self, run: RunRecord, progress: RunProgress) -> Outcome:
        """The run's outcome (see `runs.execution.Executor`). Raises Deferred."""
        request = (pb.SolveProblemRequest if run.kind == "solve" else pb.AnswerQueryRequest)()
        request.ParseFromString(run.request)
        admitted = await self._enter(run, request)
        if isinstance(admitted, Outcome):
            return admitted
        try:
            response = await self._call(run, request, progress)
        except MeshError as error:
            return Outcome(RunState.FAILED, error=to_status(error, SERVICE).SerializeToString())
        finally:
            if admitted is not None and self._access is not None:
                self._access.leave(admitted)
        if admitted is not None and self._access is not None:
            await self._access.charge(admitted, response)
        return Outcome(RunState.SUCCEEDED, response=response.SerializeToString())

    def failure(self, error: BaseException) -> bytes:
        """INTERNAL with the trace id, as the server answers an unexpected error."""
        return status_pb2.Status(
            code=code_pb2.INTERNAL,
            message=f"internal error ({type(error).__name__}; trace id {current_trace_id()})"
        ).SerializeToString()

    def exhausted(self, attempts: int) -> bytes:
        """ABORTED: the run's lease expired `attempts` times, the cap (run_max_attempts)."""
        return status_pb2.Status(
            code=code_pb2.ABORTED,
            message=f"the run was abandoned by its worker {attempts} times (killed or cut off "
                    f"from the run store mid-run); not tried again (ORCHESTRATOR_RUN_MAX_ATTEMPTS"
                    f" = {attempts})").SerializeToString()

    async def _enter(self, run: RunRecord, request) -> Admitted | Outcome | None:
        if self._access is None:
            return None
        admitted = await self._access.enter_as(run.owner, METHODS[run.kind], request)
        if not isinstance(admitted, Rejection):
            return admitted
        if admitted.reason in PASSING:
            raise Deferred(admitted.retry_after_s, admitted.message)
        return Outcome(RunState.FAILED,
                       error=rejection_status(admitted, SERVICE).SerializeToString())

    async def _call(self, run: RunRecord, request, progress: RunProgress):
        started = time.perf_counter()

        def events(event: LoopEvent) -> None:
            progress.event(SOLVE_PROGRESS, stream_event(
                event, (time.perf_counter() - started) * 1e3).SerializeToString())

        def encoded(checkpoint: LoopCheckpoint) -> bytes | None:
            try:
                return self._codec.encode(checkpoint)
            except CheckpointError as error:  # the run goes on; a resumption starts over
                log.warning("%s: no checkpoint of this round: %s", run.name, error)
                return None

        def checkpoints(checkpoint: LoopCheckpoint) -> None:
            # Immutable: serialized when stored, never for one superseded or run to its end.
            progress.checkpoint(functools.partial(encoded, checkpoint))

        durable = Durable(events, checkpoints, self._resume(run))
        if run.kind == "answer":
            return await self._servicer.AnswerQuery(request, _RunContext(), durable=durable)
        response = await self._servicer.SolveProblem(request, _RunContext(), durable=durable)
        progress.event(SOLVE_PROGRESS, pb.StreamSolveProblemResponse(
            iteration=response.iterations, elapsed_ms=(time.perf_counter() - started) * 1e3,
            response=response).SerializeToString())
        return response

    def _resume(self, run: RunRecord) -> LoopCheckpoint | None:
        if run.checkpoint is None:
            return None
        try:
            return self._codec.decode(run.checkpoint)
        except CheckpointError as error:
            log.warning("%s: checkpoint unreadable (%s); the run starts over", run.name, error)
            return None
