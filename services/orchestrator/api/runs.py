"""gRPC edge of durable runs: mesh.orchestrator.v1.RunService over the run store.

Thin: each method finds its caller's key (`AccessControl.caller`), turns the request into a store
call and the store's records into messages (`run_records`). The store's domain errors (NotFound,
InvalidArgument naming the field, FailedPrecondition, Unavailable) become status codes once, in
the server's error mapping. Ownership: a key reads, lists, watches, cancels and deletes only its
own runs and batches (another key's are NOT_FOUND); a key with the `admin` scope sees every one.

Create calls check the scope each request needs (`solve` for a SolveProblemRequest, `query` for
an AnswerQueryRequest) and validate every request up front with the synchronous path's own checks
(`OrchestratorServicer.validate`), so a run that is accepted does not fail on its input later.
Watches stream the stored events after `after_sequence`, then each new one: this process's
writes wake them at once, other replicas' writes are seen within `watch_poll_s`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf import empty_pb2
from grpc_status import rpc_status
from mesh.orchestrator.v1 import run_service_pb2 as pb
from mesh.orchestrator.v1 import run_service_pb2_grpc

from libs.errors import InvalidArgument
from services.orchestrator.access.control import (
    AccessControl,
    Admitted,
    Rejection,
    credential_from_metadata,
)
from services.orchestrator.access.interceptor import rejection_status
from services.orchestrator.access.keys import Caller
from services.orchestrator.access.scopes import REQUEST_SCOPES
from services.orchestrator.api.run_records import (
    batch_message,
    ends,
    event_message,
    run_message,
    work_of,
)
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.runs.model import BatchRecord, RunState
from services.orchestrator.runs.paging import parse_run_filter
from services.orchestrator.runs.store import RunStore
from services.orchestrator.runs.worker import Handoff

WATCH_POLL_S = 0.5
"""A watch looks for events written by other replicas this often (seconds)."""
BATCH_SLICE_S = 0.05
"""WatchBatch reads its batch's new events at most this often (seconds)."""


class RunServicer(run_service_pb2_grpc.RunServiceServicer):
    """mesh.orchestrator.v1.RunService (see the module docstring).

    Args:
        store: the run store.
        validator: the synchronous servicer, whose `validate` checks requests up front.
        access: who calls (None: every call is the anonymous administrator, as without keys).
        queued: called with the number of runs created (wakes this process's idle workers).
        handoff: an idle local worker reserved for a run about to be created (`RunWorkers.
            handoff`), or None: CreateRun then creates the run already leased to it (without a
            request_id, the worker starts executing it while the creation commits).
        cancelled: called with (run, batch) once a cancellation is stored (`RunWorkers.
            cancelled`), so that this process's worker stops the run at once.
        watch_poll_s: how often a watch reads events other replicas wrote.
    """

    def __init__(self, store: RunStore, validator: OrchestratorServicer,
                 access: AccessControl | None, queued: Callable[[int], None] = lambda runs: None,
                 watch_poll_s: float = WATCH_POLL_S,
                 handoff: Callable[[], Handoff | None] = lambda: None,
                 cancelled: Callable[[str | None, str | None], None] = lambda run, batch: None,
                 ) -> None:
        self._store = store
        self._cancelled = cancelled
        self._validator = validator
        self._access = access
        self._queued = queued
        self._handoff = handoff
        self._poll_s = watch_poll_s

    async def _caller(self, context: grpc.aio.ServicerContext) -> Caller:
        if self._access is None:
            return Caller("")
        caller = self._access.caller(credential_from_metadata(
            context.invocation_metadata() or ()))
        if isinstance(caller, Rejection):  # the interceptor refused these already
            await context.abort_with_status(rpc_status.to_status(rejection_status(caller)))
        return caller

    async def _reader(self, context: grpc.aio.ServicerContext) -> str | None:
        """The owner whose resources the caller sees: None (all) for an administrator."""
        caller = await self._caller(context)
        return None if caller.admin else caller.owner

    async def _checked(self, context, caller: Caller, message, field: str) -> tuple[str, bytes]:
        """(kind, serialized request) of a Run or BatchItem, once the caller may create it."""
        kind, request = work_of(message, field + ".request" if field == "run" else field)
        scope = REQUEST_SCOPES[kind]
        if not caller.may(scope):
            await context.abort_with_status(rpc_status.to_status(rejection_status(Rejection(
                "scope", f"this API key lacks the scope {scope!r} that a {kind} run needs",
                metadata=(("scope", scope), ("field", field))))))
        if caller.record is not None and self._access is not None:
            denied = self._access.check_request(Admitted(caller.owner, caller.record),
                                                     request)
            if denied is not None:
                await context.abort_with_status(rpc_status.to_status(rejection_status(denied)))
        try:
            self._validator.validate(request)
        except InvalidArgument as error:
            raise InvalidArgument(f"{field}.{kind}.{error.field}", error.description) from None
        return kind, request.SerializeToString()

    async def CreateRun(self, request: pb.CreateRunRequest, context) -> pb.Run:
        caller = await self._caller(context)
        kind, data = await self._checked(context, caller, request.run, "run")
        handoff = self._handoff()
        if handoff is None:
            record = await self._store.create_run(caller.owner, kind, data,
                                                  request.request_id or None)
            self._queued(1)
            return run_message(record)
        if not request.request_id:
            # Nothing to look up first: the idle worker executes the run while its creation
            # commits, and writes to it only after (see Handoff); the caller gets the run once
            # committed, whenever its own call ends.
            try:
                leased, creation = self._store.start_leased_run(
                    caller.owner, kind, data, handoff.worker_id, handoff.lease_s)
            except BaseException:
                handoff.give(None)  # the worker looks for runs itself
                raise
            handoff.give(leased, creation)
            return run_message(await asyncio.shield(creation))
        # Created leased to the idle worker, which gets the record however the call ends.
        creation = asyncio.ensure_future(self._store.create_leased_run(
            caller.owner, kind, data, request.request_id or None, handoff.worker_id,
            handoff.lease_s))
        creation.add_done_callback(functools.partial(_give, handoff))
        created, _ = await asyncio.shield(creation)
        return run_message(created)

    async def GetRun(self, request: pb.GetRunRequest, context) -> pb.Run:
        return run_message(await self._store.get_run(request.name,
                                                     await self._reader(context)))

    async def ListRuns(self, request: pb.ListRunsRequest, context) -> pb.ListRunsResponse:
        owner = await self._reader(context)
        restriction = parse_run_filter(request.filter)
        records, token = await self._store.list_runs(
            owner, restriction.state, restriction.batch, request.page_size, request.page_token)
        return pb.ListRunsResponse(runs=[run_message(r) for r in records], next_page_token=token)

    async def CancelRun(self, request: pb.CancelRunRequest, context) -> pb.Run:
        record = await self._store.cancel_run(request.name, await self._reader(context))
        self._cancelled(record.name, None)
        return run_message(record)

    async def DeleteRun(self, request: pb.DeleteRunRequest, context) -> empty_pb2.Empty:
        await self._store.delete_run(request.name, await self._reader(context))
        return empty_pb2.Empty()

    async def CreateBatch(self, request: pb.CreateBatchRequest, context) -> pb.Batch:
        caller = await self._caller(context)
        if len(request.items) > self._store.batch_max_items:
            raise InvalidArgument("items", f"{len(request.items)} items exceed the limit "
                                           f"batch_max_items = {self._store.batch_max_items}")
        items = [await self._checked(context, caller, item, f"items[{index}]")
                 for index, item in enumerate(request.items)]
        record = await self._store.create_batch(caller.owner, items, request.request_id or None,
                                                request.batch.display_name)
        self._queued(len(items))
        return batch_message(record)

    async def GetBatch(self, request: pb.GetBatchRequest, context) -> pb.Batch:
        return batch_message(await self._store.get_batch(request.name,
                                                         await self._reader(context)))

    async def ListBatches(self, request: pb.ListBatchesRequest,
                          context) -> pb.ListBatchesResponse:
        records, token = await self._store.list_batches(
            await self._reader(context), request.page_size, request.page_token)
        return pb.ListBatchesResponse(batches=[batch_message(r) for r in records],
                                      next_page_token=token)

    async def CancelBatch(self, request: pb.CancelBatchRequest, context) -> pb.Batch:
        record = await self._store.cancel_batch(request.name, await self._reader(context))
        self._cancelled(None, record.name)
        return batch_message(record)

    async def WatchRun(self, request: pb.WatchRunRequest, context) -> AsyncIterator[pb.RunEvent]:
        _check_after(request.after_sequence)
        after = request.after_sequence
        reader = await self._reader(context)
        changed = self._store.changes()  # before the read: a write after it wakes the wait
        record, events = await self._store.run_and_events(request.name, reader, after)
        if record.state.finished and record.last_event_sequence <= after:
            return
        waited = False
        while True:
            for event in events:
                yield event_message(event)
                if ends(event):
                    return
            if events:
                after = events[-1].sequence
            elif waited and (await self._store.get_run(request.name, None)).state.finished:
                return
            events = await self._store.wait_for_events(request.name, after, self._poll_s,
                                                       changed=changed)
            changed, waited = None, True

    async def WatchBatch(self, request: pb.WatchBatchRequest,
                         context) -> AsyncIterator[pb.RunEvent]:
        _check_after(request.after_sequence)
        batch = await self._store.get_batch(request.name, await self._reader(context))
        after = request.after_sequence
        loop = asyncio.get_running_loop()
        checked = loop.time()
        unfinished = _unfinished(batch)
        while not (batch.end_time is not None and batch.last_event_sequence <= after):
            events = await self._store.wait_for_events(request.name, after, self._poll_s,
                                                       batch=True)
            for event in events:
                yield event_message(event)
            if events:
                after = events[-1].sequence
                # The batch is looked at (its end) once the runs unfinished at the last look
                # may all have ended, or once a poll period: each run ends once, so its last
                # run's end is seen at once, and a batch of thousands costs no read per slice.
                unfinished -= sum(1 for event in events if ends(event))
                if unfinished > 0 and loop.time() - checked < self._poll_s:
                    # A batch's runs write often: read their events in slices of BATCH_SLICE_S.
                    await asyncio.sleep(BATCH_SLICE_S)
                    continue
            batch = await self._store.get_batch(request.name, None)
            checked, unfinished = loop.time(), _unfinished(batch)


def _unfinished(batch: BatchRecord) -> int:
    """The batch's runs not ended (QUEUED or RUNNING)."""
    return batch.counts.get(RunState.QUEUED, 0) + batch.counts.get(RunState.RUNNING, 0)


def _check_after(after_sequence: int) -> None:
    if after_sequence < 0:
        raise InvalidArgument("after_sequence", f"is {after_sequence}; must be >= 0")


def _give(handoff: Handoff, creation: asyncio.Future) -> None:
    """Gives the reserved worker the run created leased to it, else None (it then leases)."""
    failed = creation.cancelled() or creation.exception() is not None
    handoff.give(None if failed else creation.result()[1])
