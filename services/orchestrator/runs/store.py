"""RunStore: durable runs and batches on SQLite or PostgreSQL, for the RunService servicer, the REST
front and the workers that lease runs.

Every method is a coroutine; the work runs in one database transaction on the store's thread pool
(database.Database). Names are "runs/{uuid}" and "batches/{uuid}"; owners are API key ids ("" for
calls without a key), and an owner of None means an administrative caller that sees every run.
Times come from the injected clock (epoch seconds), so that tests move leases without sleeping.

Errors (libs.errors, mapped to status codes at the gRPC edge): InvalidArgument naming the field
(a malformed name, request_id, page_size, page_token or filter, a batch over its limits naming the
limit), NotFound (an unknown run or batch, or another owner's), FailedPrecondition (cancelling or
deleting in the wrong state), LeaseLost (a worker that lost its lease), Unavailable (the database
is down or unreachable). `open` raises StoreError for a database it must not touch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from libs.errors import InvalidArgument
from services.orchestrator.runs import leases, reads, removal, writes
from services.orchestrator.runs.database import Database, open_database
from services.orchestrator.runs.model import BatchRecord, EventRecord, RunRecord, RunState
from services.orchestrator.runs.paging import parse_name
from services.orchestrator.runs.recent import RecentEvents

T = TypeVar("T")
DEFAULT_BATCH_MAX_ITEMS = 10_000
DEFAULT_BATCH_MAX_BYTES = 4 * 1024 * 1024
MAX_DISPLAY_NAME = 512
EXPIRED_CHECK_S = 1.0
"""A process's leases look for runs whose lease expired at most this often (seconds); an
expired run is thus taken again within its lease time plus about this long."""


class RunStore:
    """The run store (see the module docstring). Build it with `await RunStore.open(url)`."""

    def __init__(self, database: Database, *, clock: Callable[[], float] = time.time,
                 batch_max_items: int = DEFAULT_BATCH_MAX_ITEMS,
                 batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES) -> None:
        self._database = database
        self._clock = clock
        self.batch_max_items = batch_max_items
        self.batch_max_bytes = batch_max_bytes
        self._changed = asyncio.Event()
        self._recent = RecentEvents()
        self._expired_check_at = 0.0

    @classmethod
    async def open(cls, url: str, *, clock: Callable[[], float] = time.time,
                   batch_max_items: int = DEFAULT_BATCH_MAX_ITEMS,
                   batch_max_bytes: int = DEFAULT_BATCH_MAX_BYTES,
                   pool_size: int = 8) -> RunStore:
        """Opens the store at `url` (`sqlite:///var/runs.db`, its folder created; or
        `postgresql://user:password@host:port/db`) and migrates its schema to the newest revision.

        Raises StoreError naming the file or URL (password masked) for an unsupported URL, a
        corrupt file, a newer schema revision or a database that is not a run store; nothing is
        written then. Raises Unavailable when a PostgreSQL server cannot be reached."""
        database = await asyncio.to_thread(open_database, url, pool_size=pool_size,
                                           group_scope=writes.batch_events_last)
        return cls(database, clock=clock, batch_max_items=batch_max_items,
                   batch_max_bytes=batch_max_bytes)

    @property
    def url(self) -> str:
        """The store's URL, password masked (for logs and /ready)."""
        return self._database.shown

    async def close(self) -> None:
        """Closes the connections and the thread pool."""
        await asyncio.to_thread(self._database.close)

    async def ping(self) -> None:
        """Returns when the database answers; raises Unavailable when it does not."""
        await asyncio.to_thread(self._database.ping)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            result, published = await self._database.write(writes.transaction, fn, *args)
            self._recent.publish(published)  # committed: this process's watchers get them
            return result
        finally:
            # Wake the watchers (wait_for_events) after every write, committed or not.
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    # Runs -----------------------------------------------------------------------------------

    async def create_run(self, owner: str, kind: str, request: bytes, request_id: str | None,
                         batch: str | None = None) -> RunRecord:
        """Creates a QUEUED run of `kind` ("solve" | "answer") holding the serialized `request`.
        With a `request_id` (AIP-155, a UUID) this owner already used, returns the run it created
        instead. With `batch` ("batches/{uuid}", the owner's), the run joins that batch at the
        next index. InvalidArgument("request_id" | "kind" | "batch"); NotFound for the batch."""
        return await self._write(writes.create_run, self._clock(), owner, kind, request,
                                 request_id, batch)

    async def create_leased_run(self, owner: str, kind: str, request: bytes,
                                request_id: str | None, worker_id: str,
                                lease_s: float) -> tuple[RunRecord, RunRecord | None]:
        """create_run, then in the same transaction the lease of the new run to `worker_id`
        for `lease_s` seconds (as `lease` would: RUNNING, attempt 1): (the run as created,
        QUEUED; its leased record). For a request_id already used: (that run, None)."""
        return await self._write(writes.create_leased_run, self._clock(), owner, kind, request,
                                 request_id, None, (worker_id, lease_s))

    def start_leased_run(self, owner: str, kind: str, request: bytes, worker_id: str,
                         lease_s: float) -> tuple[RunRecord, asyncio.Task]:
        """Starts creating a run (no request_id, outside batches) already leased to `worker_id`,
        as `create_leased_run` does, and returns at once: (its leased record, the creation: a
        task that ends with the record as created once committed, or raises). The worker may
        execute the run meanwhile; it must not write to it before the creation has committed
        (`Attempt`'s `created`). InvalidArgument("kind") before anything is written."""
        draft = writes.LeasedRunDraft.new(self._clock(), owner, kind, request, None, worker_id,
                                          lease_s)
        return draft.leased, asyncio.ensure_future(self._write(writes.insert_leased_run, draft))

    async def get_run(self, name: str, owner: str | None) -> RunRecord:
        """The run; NotFound when unknown or another owner's; InvalidArgument("name")."""
        return await self._database.read(reads.get_run, name, owner)

    async def list_runs(self, owner: str | None, state: RunState | None, batch: str | None,
                        page_size: int, page_token: str) -> tuple[list[RunRecord], str]:
        """A page of the owner's runs (every run for None), newest first, or a batch's runs in
        item order; optionally of one state. Returns (runs, next_page_token; "" after the last).
        page_size 0 means 50, over 1,000 means 1,000. InvalidArgument("page_size" |
        "page_token"; "filter" for a malformed batch name). Parse a filter string with
        paging.parse_run_filter."""
        return await self._database.read(reads.list_runs, owner, state, batch, page_size,
                                         page_token)

    async def cancel_run(self, name: str, owner: str | None) -> RunRecord:
        """QUEUED -> CANCELLED at once (so is a RUNNING run whose lease expired); RUNNING ->
        cancel_requested (the worker's next renew returns False, then it finishes the run
        CANCELLED); already requested: unchanged. Returns the run. FailedPrecondition when it
        has ended; NotFound; InvalidArgument("name")."""
        return await self._write(writes.cancel_run, self._clock(), name, owner)

    async def delete_run(self, name: str, owner: str | None) -> None:
        """Deletes an ended run with its events. FailedPrecondition while QUEUED or RUNNING, or
        for a batch's run (kept with its batch); NotFound; InvalidArgument("name")."""
        await self._write(removal.delete_run, name, owner)

    async def load_checkpoint(self, name: str) -> bytes | None:
        """The run's newest checkpoint (None before the first); NotFound."""
        return await self._database.read(reads.load_checkpoint, name)

    # Batches --------------------------------------------------------------------------------

    async def create_batch(self, owner: str, items: Sequence[tuple[str, bytes]],
                           request_id: str | None, display_name: str = "") -> BatchRecord:
        """Creates a batch with one QUEUED run per (kind, serialized request) item, in item order,
        all in one transaction (all runs or none). With a `request_id` this owner already used,
        returns the batch it created. InvalidArgument: "items" for none, or more than
        batch_max_items, or more than batch_max_bytes of requests (the message names the limit);
        "items[i].kind" for an unknown kind; "batch.display_name" over 512 characters;
        "request_id" when not a UUID."""
        self._check_batch(items, display_name)
        batch_id = await self._write(writes.create_batch, self._clock(), owner, list(items),
                                     request_id, display_name)
        return await self.get_batch(f"batches/{batch_id}", owner)

    def _check_batch(self, items: Sequence[tuple[str, bytes]], display_name: str) -> None:
        if not items:
            raise InvalidArgument("items", "a batch needs at least one item")
        if len(items) > self.batch_max_items:
            raise InvalidArgument("items", f"{len(items)} items exceed the limit "
                                           f"batch_max_items = {self.batch_max_items}")
        size = sum(len(request) for _, request in items)
        if size > self.batch_max_bytes:
            raise InvalidArgument("items", f"{size} bytes of requests exceed the limit "
                                           f"batch_max_bytes = {self.batch_max_bytes}")
        for index, (kind, _) in enumerate(items):
            writes.check_kind(kind, f"items[{index}].kind")
        if len(display_name) > MAX_DISPLAY_NAME:
            raise InvalidArgument("batch.display_name",
                                  f"{len(display_name)} characters; at most {MAX_DISPLAY_NAME}")

    async def get_batch(self, name: str, owner: str | None) -> BatchRecord:
        """The batch with its counts by state; NotFound; InvalidArgument("name")."""
        return await self._database.read(reads.get_batch, name, owner)

    async def list_batches(self, owner: str | None, page_size: int,
                           page_token: str) -> tuple[list[BatchRecord], str]:
        """A page of the owner's batches (all for None), newest first, and the next page's token.
        InvalidArgument("page_size" | "page_token")."""
        return await self._database.read(reads.list_batches, owner, page_size, page_token)

    async def cancel_batch(self, name: str, owner: str | None) -> BatchRecord:
        """Cancels each unfinished run of the batch as cancel_run does; returns the batch.
        FailedPrecondition when every run has ended; NotFound; InvalidArgument("name")."""
        await self._write(writes.cancel_batch, self._clock(), name, owner)
        return await self.get_batch(name, owner)

    async def counts_by_state(self, batch: str | None = None) -> dict[RunState, int]:
        """Runs by state (every state a key): of the batch ("batches/{uuid}"), or of the store."""
        batch_id = None if batch is None else parse_name(batch, "batches", "batch")
        return await self._database.read(reads.counts_by_state, batch_id)

    # Workers --------------------------------------------------------------------------------

    async def lease(self, worker_id: str, lease_s: float) -> RunRecord | None:
        """Takes the oldest run whose lease expired (looked for at most every
        EXPIRED_CHECK_S), else the oldest QUEUED one (PostgreSQL:
        FOR UPDATE SKIP LOCKED, so concurrent leasers never get the same run): it becomes RUNNING
        with attempts + 1 and a lease to `worker_id` for `lease_s` seconds, and the returned
        record carries its checkpoint. None when no run is waiting."""
        now = self._clock()
        run = await self._write(leases.lease, now, worker_id, lease_s, self._expired_due(now))
        self._took(run)
        return run

    def _expired_due(self, now: float) -> bool:
        """Whether a lease now looks for expired leases: at most every EXPIRED_CHECK_S per
        process (a query less per run while a queue drains), and again at once after one was
        found (there may be more)."""
        if now < self._expired_check_at:
            return False
        self._expired_check_at = now + EXPIRED_CHECK_S
        return True

    def _took(self, run: RunRecord | None) -> None:
        if run is not None and run.attempts > 1:
            self._expired_check_at = 0.0

    async def renew(self, name: str, worker_id: str, lease_s: float) -> bool:
        """Extends the worker's lease by `lease_s` seconds from now: True. False when the lease
        was lost (the worker must stop, writing nothing) or cancellation was asked (the record's
        cancel_requested tells which; the worker then finishes the run CANCELLED)."""
        return await self._write(writes.renew, self._clock(), name, worker_id, lease_s)

    async def checkpoint(self, name: str, worker_id: str, state: bytes) -> None:
        """Stores the loop's state after a finished round (replacing the previous one).
        LeaseLost when the worker no longer holds the run."""
        await self._write(writes.checkpoint, self._clock(), name, worker_id, state)

    async def record_trace(self, name: str, worker_id: str, trace_id: str) -> None:
        """Adds the current attempt's trace id (32 hex digits) to the run's trace_ids.
        LeaseLost when the worker no longer holds the run."""
        await self._write(writes.record_trace, name, worker_id, trace_id)

    async def append_events(self, name: str, worker_id: str | None,
                            events: Sequence[tuple[str, bytes]],
                            checkpoint: bytes | None = None,
                            trace_id: str | None = None) -> list[int]:
        """Persists (kind, payload) events of the run ("solve_progress": a serialized
        StreamSolveProblemResponse); returns their sequence numbers (per run, 1-based,
        gapless). With a `checkpoint`, stores it after them in the same transaction (as
        `checkpoint`); so is a worker's `trace_id` (as `record_trace`). With a worker_id,
        LeaseLost unless it holds the run; NotFound."""
        return await self._write(writes.append_events, self._clock(), name, worker_id,
                                 list(events), checkpoint, trace_id)

    async def finish(self, name: str, worker_id: str, state: RunState, response: bytes | None,
                     error: bytes | None, events: Sequence[tuple[str, bytes]] = (),
                     trace_id: str | None = None) -> bool:
        """Appends the worker's last `events` (as append_events; none by default), then ends the
        run in `state` (SUCCEEDED with the serialized response, FAILED with a serialized
        google.rpc.Status, CANCELLED) and releases the lease, all in one transaction, with the
        attempt's `trace_id` when given (as record_trace): True. False, changing nothing (the
        events neither), when the worker no longer holds the lease, so no run ends twice."""
        return await self._write(writes.finish, self._clock(), name, worker_id, state, response,
                                 error, list(events), trace_id)

    async def finish_and_lease(self, name: str, worker_id: str, state: RunState,
                               response: bytes | None, error: bytes | None,
                               events: Sequence[tuple[str, bytes]], lease_s: float,
                               trace_id: str | None = None) -> tuple[bool, RunRecord | None]:
        """`finish`, then, when it ended the run, `lease` for the same worker, in one
        transaction (a worker draining a queue pays one write per run less): (finish's
        result, the leased run or None)."""
        now = self._clock()
        ended, run = await self._write(leases.finish_and_lease, now, name, worker_id, state,
                                       response, error, list(events), lease_s,
                                       self._expired_due(now), trace_id)
        self._took(run)
        return ended, run

    # Events and retention --------------------------------------------------------------------

    async def events_after(self, name: str, after_sequence: int,
                           limit: int = 1000) -> list[EventRecord]:
        """The run's events of sequence > after_sequence, in order, at most `limit`."""
        return await self._database.read(reads.events_after, name, after_sequence, limit)

    async def run_and_events(self, name: str, owner: str | None, after_sequence: int,
                             limit: int = 1000) -> tuple[RunRecord, list[EventRecord]]:
        """get_run and events_after in one read (a watch's start): NotFound when unknown or
        another owner's; InvalidArgument("name")."""
        return await self._database.read(reads.run_and_events, name, owner, after_sequence,
                                         limit)

    async def batch_events_after(self, batch: str, after_sequence: int,
                                 limit: int = 1000) -> list[EventRecord]:
        """The batch's events (its runs' state changes, batch-level sequence) after
        after_sequence, in order, at most `limit`."""
        return await self._database.read(reads.batch_events_after, batch, after_sequence, limit)

    def changes(self) -> asyncio.Event:
        """Set at this process's next write: take it before a read, and pass it as
        wait_for_events' `changed` to skip that call's first read while nothing was written."""
        return self._changed

    async def wait_for_events(self, name: str, after_sequence: int, timeout_s: float,
                              limit: int = 1000, *, batch: bool = False,
                              changed: asyncio.Event | None = None) -> list[EventRecord]:
        """The events after after_sequence (of the run, or of the batch when `batch`), waiting up
        to timeout_s for one when there is none yet: [] at the timeout. Woken by this process's
        writes at once, and handed a run's events this process committed from memory (no read);
        writes of other replicas are seen at the next call. With `changed` (from `changes()`,
        taken before the caller read up to after_sequence), the first read waits for it."""
        if batch:
            return await self._wait(self.batch_events_after, name, after_sequence, timeout_s,
                                    limit, changed)
        with self._recent.watching(name):
            return await self._wait(self._run_events_after, name, after_sequence, timeout_s,
                                    limit, changed)

    async def _run_events_after(self, name: str, after_sequence: int,
                                limit: int) -> list[EventRecord]:
        recent = self._recent.after(name, after_sequence, limit)
        return recent if recent is not None else await self.events_after(name, after_sequence,
                                                                          limit)

    async def _wait(self, read: Callable[[str, int, int], Awaitable[list[EventRecord]]],
                    name: str, after_sequence: int, timeout_s: float, limit: int,
                    changed: asyncio.Event | None) -> list[EventRecord]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        if changed is not None:  # nothing new to read until this process writes
            try:  # asyncio.timeout: wait_for can lose a cancellation on 3.11 (gh-86296)
                async with asyncio.timeout(timeout_s):
                    await changed.wait()
            except TimeoutError:
                return []
        while True:
            changed = self._changed  # taken before reading: no write is missed
            events = await read(name, after_sequence, limit)
            remaining = deadline - asyncio.get_running_loop().time()
            if events or remaining <= 0:
                return events
            try:
                async with asyncio.timeout(remaining):
                    await changed.wait()
            except TimeoutError:
                return []

    async def purge_finished(self, older_than_s: float) -> int:
        """Deletes the runs that ended more than older_than_s seconds ago, with their events, and
        the batches whose last run did (with all their runs). Returns the runs deleted."""
        return await self._write(removal.purge_finished, self._clock() - older_than_s)
