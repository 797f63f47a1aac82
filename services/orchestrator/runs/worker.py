"""The run workers of one orchestrator: `workers` tasks, each leasing a run from the store,
executing it (`attempt.py`) and taking the next.

A worker with nothing to lease waits until `wake()` (this process created a run), a `handoff()`
gives it a run created already leased to it (one transaction instead of two, and no wait), or
`poll_s` seconds (runs created by other replicas, and leases that expired). A store that is
down is asked again with exponential backoff; synchronous calls never wait on it. Each attempt
is a trace span "run attempt" (a new trace per attempt) whose trace id the run lists
(`Run.trace_ids`), so a run's attempts link to each other through the run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
import uuid

from opentelemetry import trace

from libs.errors import Unavailable
from services.orchestrator.metrics import RUN_ATTEMPTS, RUN_LEASE_EXPIRIES, RUN_TIME_QUEUED
from services.orchestrator.runs.attempt import (
    BACKOFF_S,
    MAX_BACKOFF_S,
    WRITE_INTERVAL_S,
    Attempt,
    AttemptEnd,
    retrying,
)
from services.orchestrator.runs.execution import Executor
from services.orchestrator.runs.model import RunRecord, RunState
from services.orchestrator.runs.store import RunStore

log = logging.getLogger(__name__)


class Handoff:
    """An idle worker reserved for one run about to be created in this process: create the
    run with `lease_to=(worker_id, lease_s)`, then `give` the worker the record (None when
    the creation failed or returned an existing run: the worker then looks for runs itself);
    or give it the leased record of `RunStore.start_leased_run` at once with its `created`
    task: the worker executes the run while the creation commits, and writes to it only after
    (nothing, and the execution is cancelled, when the creation fails). It must be given
    exactly once (a second `give` is ignored)."""

    def __init__(self, worker_id: str, lease_s: float, waiter: asyncio.Future) -> None:
        self.worker_id = worker_id
        self.lease_s = lease_s
        self._waiter = waiter

    def give(self, run: RunRecord | None, created: asyncio.Future | None = None) -> None:
        if not self._waiter.done():
            self._waiter.set_result((run, created))
_tracer = trace.get_tracer("mcts_mesh.orchestrator.runs")

DEFAULT_POLL_S = 1.0
"""An idle worker looks for runs of other replicas and expired leases this often."""
PROGRESS_WRITES_PER_S = 100.0
"""The runs in progress in one process write their progress about this often in all: each at
most every max(attempt.WRITE_INTERVAL_S, runs in progress / this) seconds, so that a busy
process spends its time on the runs rather than on their progress (a run's events are shown
that much later; its end is written at once)."""


class RunWorkers:
    """`workers` concurrent run workers over `store` (see the module docstring).

    Args:
        store: the run store.
        executor: executes a leased run (`api/run_execution.RunExecutor`).
        workers: runs executed at once (ORCHESTRATOR_RUN_WORKERS); 0 starts none.
        lease_s: a lease's length in seconds (ORCHESTRATOR_RUN_LEASE_S), renewed every third.
        poll_s: an idle worker's period, in seconds.
        max_attempts: a run leased for attempt max_attempts + 1 (its lease expired that many
            times) ends FAILED (`Executor.exhausted`) unexecuted; 0: no cap
            (ORCHESTRATOR_RUN_MAX_ATTEMPTS).
    """

    def __init__(self, store: RunStore, executor: Executor, *, workers: int, lease_s: float,
                 poll_s: float = DEFAULT_POLL_S, max_attempts: int = 0) -> None:
        if workers < 0 or lease_s <= 0 or poll_s <= 0 or max_attempts < 0:
            raise ValueError("need workers >= 0, lease_s > 0, poll_s > 0, max_attempts >= 0")
        self._max_attempts = max_attempts
        self._store = store
        self._executor = executor
        self._count = workers
        self._lease_s = lease_s
        self._poll_s = poll_s
        self._prefix = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._idle: collections.deque[tuple[str, asyncio.Future]] = collections.deque()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._busy = 0
        self._attempts: dict[str, Attempt] = {}
        self.ended: dict[AttemptEnd, int] = dict.fromkeys(AttemptEnd, 0)

    def start(self) -> None:
        """Starts the workers."""
        self._tasks = [asyncio.create_task(self._work(f"{self._prefix}:{index}"),
                                           name=f"run worker {index}")
                       for index in range(self._count)]

    async def stop(self) -> None:
        """Stops the workers; the runs they held stay RUNNING until their leases expire, and
        are then resumed by any worker from their last checkpoint. A worker whose cancellation
        was lost in a library (a result that arrived with it) stops at its next step."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def wake(self, runs: int = 1) -> None:
        """`runs` runs were queued in this process: as many idle workers look at once (the
        others stay idle rather than all racing for one run)."""
        for _ in range(runs):
            while self._idle:
                _, waiter = self._idle.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    break
            else:
                return

    def cancelled(self, run: str | None = None, batch: str | None = None) -> None:
        """Cancellation of `run` (or of every run of `batch`) was asked in the store: the
        attempts of this process executing them check at once (`Attempt.poke`); other
        replicas' attempts see it at their next lease renewal."""
        for attempt in list(self._attempts.values()):
            record = attempt.run_record
            if record.name == run or (batch is not None and record.batch == batch):
                attempt.poke()

    def handoff(self) -> Handoff | None:
        """An idle worker, reserved for a run this process is about to create (see Handoff);
        None when every worker is busy (create the run QUEUED and `wake`)."""
        while self._idle:
            worker_id, waiter = self._idle.popleft()
            if not waiter.done():
                return Handoff(worker_id, self._lease_s, waiter)
        return None

    async def _work(self, worker_id: str) -> None:
        delay = BACKOFF_S
        lease = True
        while not self._stopping:
            run, created = None, None
            if lease:
                try:
                    run = await self._store.lease(worker_id, self._lease_s)
                except Unavailable as error:
                    log.warning("run worker %s: the run store is unavailable (%s); again in "
                                "%.1f s", worker_id, error.message, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF_S)
                    continue
                delay = BACKOFF_S
            if run is None:
                # A handed-off run (with its creation when it may still be committing), or
                # None: lease again.
                run, created = await self._wait(worker_id)
                lease = True
            # Each run's finish leases the next one in its own transaction (a handed-off run's
            # too: no lease of its own after it, racing its watchers for the store's writer).
            while run is not None and not self._stopping:
                run, lease = await self._attempt(worker_id, run, created)
                created = None

    async def _wait(self, worker_id: str) -> tuple[RunRecord | None, asyncio.Future | None]:
        """Idle until woken ((None, None): lease), handed a run leased to `worker_id` (with its
        creation task, see Handoff), or poll_s."""
        if self._stopping:
            return None, None
        entry = (worker_id, asyncio.get_running_loop().create_future())
        self._idle.append(entry)
        try:
            await asyncio.wait([entry[1]], timeout=self._poll_s)
            if entry in self._idle:  # neither woken nor reserved: the poll period ended
                return None, None
            return await entry[1] or (None, None)  # reserved by handoff(): given soon
        finally:
            if entry in self._idle:
                self._idle.remove(entry)

    async def _attempt(self, worker_id: str, run: RunRecord,
                       created: asyncio.Future | None = None) -> tuple[RunRecord | None, bool]:
        """Runs one attempt: (the next run, leased with its finish; whether the worker must
        still lease, the finish not having looked for one). `created`: the run's creation
        when it may still be committing (see Handoff)."""
        if self._max_attempts and run.attempts > self._max_attempts:
            return await self._abandon(worker_id, run)
        if run.attempts == 1:
            RUN_TIME_QUEUED.observe(max(0.0, time.time() - run.create_time))
        else:
            RUN_LEASE_EXPIRIES.labels("taken_over").inc()
            log.info("%s: attempt %d resumes %s", run.name, run.attempts,
                     "from its checkpoint" if run.checkpoint else "from the start")
        with _tracer.start_as_current_span(
                "run attempt", kind=trace.SpanKind.CONSUMER,
                attributes={"mesh.run.name": run.name, "mesh.run.attempt": run.attempts,
                            "mesh.run.kind": run.kind,
                            "mesh.run.resumed": run.checkpoint is not None}) as span:
            # Only a recorded (sampled, exported) trace is worth a link from the run.
            trace_id = format(span.get_span_context().trace_id, "032x") \
                if span.is_recording() else None
            self._busy += 1
            interval_s = max(WRITE_INTERVAL_S, self._busy / PROGRESS_WRITES_PER_S)
            attempt = Attempt(self._store, self._executor, worker_id, self._lease_s, run,
                              trace_id, lease_next=True, write_interval_s=interval_s,
                              created=created)
            self._attempts[run.name] = attempt
            try:
                end = await attempt.run()
            finally:
                self._busy -= 1
                self._attempts.pop(run.name, None)
            span.set_attribute("mesh.run.end", end.value)
        self.ended[end] += 1
        if end is AttemptEnd.LOST:
            RUN_LEASE_EXPIRIES.labels("lost").inc()
        elif end not in (AttemptEnd.STOPPED, AttemptEnd.NOT_CREATED):
            RUN_ATTEMPTS.labels(end.value).observe(run.attempts)
        if end is AttemptEnd.STOPPED:
            raise asyncio.CancelledError
        return attempt.next_run, end is not AttemptEnd.FINISHED

    async def _abandon(self, worker_id: str,
                       run: RunRecord) -> tuple[RunRecord | None, bool]:
        """Ends FAILED, unexecuted, a run over max_attempts (see the constructor); returns as
        `_attempt` does (the next run is leased in the same transaction)."""
        RUN_LEASE_EXPIRIES.labels("taken_over").inc()
        log.warning("%s: its lease expired %d times; failed without another attempt "
                    "(ORCHESTRATOR_RUN_MAX_ATTEMPTS)", run.name, run.attempts - 1)
        error = self._executor.exhausted(run.attempts - 1)
        ended, next_run = await retrying(lambda: self._store.finish_and_lease(
            run.name, worker_id, RunState.FAILED, None, error, (), self._lease_s),
            f"failure of {run.name}")
        self.ended[AttemptEnd.FINISHED] += 1
        RUN_ATTEMPTS.labels(AttemptEnd.FINISHED.value).observe(run.attempts)
        return next_run, not ended
