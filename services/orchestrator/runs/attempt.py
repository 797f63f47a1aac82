"""One attempt at a leased run: execute it, keep its lease, persist its progress, end it once.

Three tasks run side by side:
- the execution (`Executor.execute`), which reports events and checkpoints to a `ProgressWriter`;
- the writer, which persists them in order (consecutive events in one `append_events`, each
  checkpoint after the events before it), retrying while the store is unavailable;
- the heartbeat, which renews the lease every `lease_s / 3` seconds.

The attempt ends in one of five ways (`AttemptEnd`): FINISHED (the outcome was written by
`RunStore.finish`), CANCELLED (cancellation was asked: the execution is cancelled, which cancels
its calls to the agents' services, and the run ends CANCELLED), LOST (the lease was lost: another
worker holds the run, so this one stops and writes nothing more), STOPPED (the worker itself
was stopped; the lease expires and another worker resumes the run from its last checkpoint), or
NOT_CREATED (a run handed over while its creation was committing, `RunStore.start_leased_run`,
whose creation failed: the execution is cancelled and nothing is written; its creator got the
error). Such a run executes from the start, and each of its writes (progress, lease renewal,
outcome) waits for the creation's commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Callable

from libs.errors import MeshError, Unavailable
from services.orchestrator.runs.execution import Deferred, Executor, Outcome
from services.orchestrator.runs.model import LeaseLost, RunRecord, RunState
from services.orchestrator.runs.store import RunStore

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
"""First wait before retrying a write the store refused as unavailable (doubled up to MAX)."""
MAX_BACKOFF_S = 5.0
MAX_DEFERRAL_S = 60.0
WRITE_INTERVAL_S = 0.05
"""Progress queued within this many seconds is stored in one write (see ProgressWriter)."""
"""A deferred run (its key's rate limit, admission) is asked again after at most this long."""


class AttemptEnd(enum.Enum):
    """How an attempt ended (see the module docstring)."""

    FINISHED = "finished"
    CANCELLED = "cancelled"
    LOST = "lost"
    STOPPED = "stopped"
    NOT_CREATED = "not_created"


async def committed(created: asyncio.Future | None) -> bool:
    """Whether the run's creation (None: committed before the attempt) committed; waits for
    it. Shielded: an awaiter's cancellation does not cancel the creation."""
    if created is None:
        return True
    try:
        await asyncio.shield(created)
    except asyncio.CancelledError:
        if created.cancelled():
            return False
        raise
    except Exception:  # noqa: BLE001 - its creator reports the error
        return False
    return True


async def retrying(call, what: str):
    """`await call()`, retried with exponential backoff while it raises Unavailable."""
    delay = BACKOFF_S
    while True:
        try:
            return await call()
        except Unavailable as error:
            log.warning("run store unavailable (%s): %s; retrying in %.1f s", what,
                        error.message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)


class ProgressWriter:
    """The attempt's `RunProgress`: queues events and checkpoints, and persists them in order
    from its own task (`run`); `close` lets the task end once everything queued is stored. The
    task ends with LeaseLost when the store says the worker no longer holds the run.

    Writes are coalesced: what is queued within `interval_s` of the first item (and while a write
    is under way) goes in the next write, one `append_events` transaction: every event, then
    only the newest checkpoint (stored after the events of its round; one superseded before it
    was stored is skipped). Watchers thus see progress at most `interval_s` late. The events
    still queued when the run has finished go with its outcome (`take_events`), so a short
    run's progress costs no write of its own."""

    def __init__(self, store: RunStore, name: str, worker_id: str,
                 interval_s: float = WRITE_INTERVAL_S,
                 created: asyncio.Future | None = None) -> None:
        self._store = store
        self._created = created
        self._name = name
        self._worker_id = worker_id
        self._events: list[tuple[str, bytes]] = []
        self._checkpoint: bytes | Callable[[], bytes | None] | None = None
        self._trace_id: str | None = None
        self._interval_s = interval_s
        self._wakeup = asyncio.Event()
        self._closed = asyncio.Event()
        self._keep = False

    def event(self, kind: str, payload: bytes) -> None:
        self._events.append((kind, payload))
        self._wakeup.set()

    def checkpoint(self, state: bytes | Callable[[], bytes | None]) -> None:
        self._checkpoint = state
        self._wakeup.set()

    def trace(self, trace_id: str) -> None:
        """The attempt's trace id, recorded on the run (`Run.trace_ids`) with its first write."""
        self._trace_id = trace_id
        self._wakeup.set()

    def close(self, finished: bool = False) -> None:
        """No more items: `run` returns once the queued ones are stored. When the run has
        `finished`, its outcome follows: `run` returns once a write under way ends, leaving the
        events still queued to `take_events` (stored with the outcome, in one transaction),
        and a checkpoint not stored yet is dropped."""
        if finished:
            self._checkpoint = None
            self._keep = True
        self._closed.set()
        self._wakeup.set()

    def take_events(self) -> list[tuple[str, bytes]]:
        """The events queued and not stored (after `run` returned): the caller stores them."""
        events, self._events = self._events, []
        return events

    def take_trace(self) -> str | None:
        """The trace id not stored yet (after `run` returned): the caller stores it."""
        trace_id, self._trace_id = self._trace_id, None
        return trace_id

    async def run(self) -> None:
        """Stores what is queued until closed; LeaseLost when the worker no longer holds the
        run or its creation failed (nothing is written before it committed)."""
        await self._wakeup.wait()
        if not await committed(self._created):
            raise LeaseLost(f"{self._name}: its creation failed")
        while True:
            await self._wakeup.wait()
            if not self._closed.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval_s):  # not wait_for: see _heartbeat
                        await self._closed.wait()
            self._wakeup.clear()
            if self._keep:
                return
            await self._write_pending()
            if self._events or self._checkpoint is not None or self._trace_id is not None:
                self._wakeup.set()
            elif self._closed.is_set():
                return

    async def _write_pending(self) -> None:
        # Taken together: every event queued before the checkpoint goes in the same write, and
        # the trace id with the first.
        events, self._events = self._events, []
        state, self._checkpoint = self._checkpoint, None
        trace_id = self.take_trace()
        if callable(state):  # serialized only now that it is stored
            state = state()
        if events or state is not None or trace_id is not None:
            await retrying(functools.partial(self._store.append_events, self._name,
                                             self._worker_id, events, state, trace_id),
                           f"progress of {self._name}")


class Attempt:
    """Executes one leased `run` for `worker_id` (see the module docstring); `trace_id`, the
    attempt's, is recorded on the run."""

    def __init__(self, store: RunStore, executor: Executor, worker_id: str, lease_s: float,
                 run: RunRecord, trace_id: str | None = None, *, lease_next: bool = False,
                 write_interval_s: float = WRITE_INTERVAL_S,
                 created: asyncio.Future | None = None) -> None:
        self._store = store
        self._created = created
        self._lease_next = lease_next
        self.next_run: RunRecord | None = None
        """With `lease_next`, the run the worker leased in the transaction that finished
        this one (None when none was waiting or the attempt did not finish)."""
        self._executor = executor
        self._worker_id = worker_id
        self._lease_s = lease_s
        self._run = run
        self._writer = ProgressWriter(store, run.name, worker_id, write_interval_s, created)
        if trace_id is not None:
            self._writer.trace(trace_id)
        self._poked = asyncio.Event()

    @property
    def run_record(self) -> RunRecord:
        """The run this attempt executes."""
        return self._run

    def poke(self) -> None:
        """Renews the lease now instead of at the next beat: a cancellation asked in this
        process (CancelRun, CancelBatch) then stops the run at once, not lease_s / 3 later."""
        self._poked.set()

    async def run(self) -> AttemptEnd:
        """Runs the attempt to its end. Cancelled (the worker stops), it cancels the execution
        and returns STOPPED, leaving the lease to expire."""
        tasks = {
            "execution": asyncio.create_task(self._execute()),
            "heartbeat": asyncio.create_task(self._heartbeat()),
            "writer": asyncio.create_task(self._writer.run()),
        }
        try:
            done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
            if tasks["execution"] in done:
                return await self._finished(tasks["execution"].result(), tasks["writer"])
            await _cancelled(tasks["execution"])
            # The heartbeat and the writer end only once the creation is settled.
            if not await committed(self._created):
                log.info("%s: its creation failed; execution dropped", self._run.name)
                return AttemptEnd.NOT_CREATED
            if tasks["heartbeat"] in done and tasks["heartbeat"].result() is AttemptEnd.CANCELLED:
                return await self._cancel(tasks["writer"])
            log.warning("%s: lease lost (attempt %d); another worker holds it", self._run.name,
                        self._run.attempts)
            return AttemptEnd.LOST
        except asyncio.CancelledError:
            return AttemptEnd.STOPPED
        finally:
            for task in tasks.values():
                await _cancelled(task)

    async def _execute(self) -> Outcome:
        """The executor's outcome; a Deferred run is asked again after its wait (the heartbeat
        keeps the lease meanwhile); an unexpected error is a FAILED outcome (INTERNAL)."""
        while True:
            try:
                return await self._executor.execute(self._run, self._writer)
            except Deferred as deferred:
                wait = min(max(deferred.retry_after_s, BACKOFF_S), MAX_DEFERRAL_S)
                log.info("%s deferred %.1f s: %s", self._run.name, wait, deferred)
                await asyncio.sleep(wait)
            except Exception as error:  # noqa: BLE001 - a bug ends the run FAILED
                log.exception("%s: execution failed unexpectedly", self._run.name)
                return Outcome(RunState.FAILED, error=self._executor.failure(error))

    async def _heartbeat(self) -> AttemptEnd:
        """Renews the lease every lease_s / 3 seconds until it is lost (LOST) or cancellation
        was asked (CANCELLED). A store that is down is asked again at the next beat. First,
        NOT_CREATED when the run's creation fails."""
        if not await committed(self._created):
            return AttemptEnd.NOT_CREATED
        while True:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when the
            # event is set as the task is cancelled, losing the cancellation (gh-86296).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._lease_s / 3):
                    await self._poked.wait()
            self._poked.clear()
            try:
                if await self._store.renew(self._run.name, self._worker_id, self._lease_s):
                    continue
                record = await self._store.get_run(self._run.name, None)
            except Unavailable as error:
                log.warning("%s: lease not renewed, the run store is unavailable: %s",
                            self._run.name, error.message)
                continue
            except MeshError:  # the run was deleted or purged
                return AttemptEnd.LOST
            held = record.state is RunState.RUNNING and record.lease_owner == self._worker_id
            return AttemptEnd.CANCELLED if held and record.cancel_requested else AttemptEnd.LOST

    async def _finished(self, outcome: Outcome, writer: asyncio.Task) -> AttemptEnd:
        """Stores the outcome (once) with the progress still queued, in one write."""
        self._writer.close(finished=True)
        try:
            await writer
        except LeaseLost:
            return AttemptEnd.LOST if await committed(self._created) else AttemptEnd.NOT_CREATED
        if not await committed(self._created):
            return AttemptEnd.NOT_CREATED
        events, trace_id = self._writer.take_events(), self._writer.take_trace()
        if self._lease_next:
            ended, self.next_run = await retrying(lambda: self._store.finish_and_lease(
                self._run.name, self._worker_id, outcome.state, outcome.response,
                outcome.error, events, self._lease_s, trace_id), f"finish of {self._run.name}")
        else:
            ended = await retrying(lambda: self._store.finish(
                self._run.name, self._worker_id, outcome.state, outcome.response,
                outcome.error, events, trace_id), f"finish of {self._run.name}")
        return AttemptEnd.FINISHED if ended else AttemptEnd.LOST

    async def _cancel(self, writer: asyncio.Task) -> AttemptEnd:
        """Ends a run whose cancellation was asked: its progress so far, then CANCELLED."""
        self._writer.close()
        with contextlib.suppress(LeaseLost):
            await writer
        ended = await retrying(lambda: self._store.finish(
            self._run.name, self._worker_id, RunState.CANCELLED, None, None),
            f"cancellation of {self._run.name}")
        return AttemptEnd.CANCELLED if ended else AttemptEnd.LOST


async def _cancelled(task: asyncio.Task) -> None:
    """Cancels `task` and waits for it to end, whatever it raises."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning
