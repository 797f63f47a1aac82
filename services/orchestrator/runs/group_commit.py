"""Group commit of the run store's writes: one writer thread, several writes per transaction.

SQLite has one writer at a time, and a commit costs more than a run's statements (its pages go to
the write-ahead log); on PostgreSQL every run of a batch updates the batch's row, held locked from
that update to the commit, so one transaction per write serialised a batch's writes on their
commits. The writes queued while a transaction runs go together in the next one: each
write function runs in order in that transaction, then one COMMIT, then each caller gets its own
result, only once committed. A write that raises rolls the whole transaction back, and the group's
writes are then run again one transaction each, so that one refused write (a NotFound, a
FailedPrecondition) changes nothing of the others and gets its own error. A commit the database
refuses (disk full, the file locked too long) fails every write of the group with Unavailable.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MAX_GROUP = 64
"""Most writes in one transaction."""


@dataclass
class _Job:
    fn: Callable[..., Any]
    args: tuple
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class GroupWriter:
    """Runs `transaction(fns_and_args)` on its own thread (see the module docstring).

    Args:
        group: runs a list of (fn, args) in one write transaction and returns their results in
            order, or raises (the transaction rolled back).
        single: runs fn(connection, *args) in its own write transaction (its result or error).
        name: the thread's name.
    """

    def __init__(self, group: Callable[[list[tuple[Callable[..., Any], tuple]]], list],
                 single: Callable[[Callable[..., Any], tuple], Any],
                 name: str = "run-store-write") -> None:
        self._group = group
        self._single = single
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    async def write(self, fn: Callable[..., Any], args: tuple) -> Any:
        """fn(connection, *args)'s result once its transaction committed; its error else."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put(_Job(fn, args, loop, future))
        return await future

    def close(self) -> None:
        """Ends the thread once the queued writes are done."""
        self._jobs.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            group = [job]
            while len(group) < MAX_GROUP:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)  # ends the loop after this group
                    break
                group.append(more)
            try:
                self._run(group)
            except BaseException as error:  # noqa: BLE001 - the thread must outlive any write
                log.exception("run store writer: a group of %d writes failed", len(group))
                for job in group:
                    self._settle(job, False, error)

    def _run(self, group: list[_Job]) -> None:
        if len(group) == 1:
            self._settle(group[0], *self._outcome(group[0]))
            return
        try:
            results = self._group([(job.fn, job.args) for job in group])
        except Exception:  # noqa: BLE001 - each write again alone, with its own outcome
            for job in group:
                self._settle(job, *self._outcome(job))
            return
        for job, result in zip(group, results, strict=True):
            self._settle(job, True, result)

    def _outcome(self, job: _Job) -> tuple[bool, Any]:
        try:
            return True, self._single(job.fn, job.args)
        except Exception as error:  # noqa: BLE001 - handed to its caller
            return False, error

    @staticmethod
    def _settle(job: _Job, ok: bool, value: Any) -> None:
        def settle() -> None:
            if job.future.done():  # the caller was cancelled meanwhile
                return
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)
        try:
            job.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the caller's loop has closed
            pass
