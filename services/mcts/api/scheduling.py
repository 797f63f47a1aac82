"""Earliest deadline first: the order in which the mcts service starts its CPU-bound searches.

A UCT search is pure CPU (random rollouts, no I/O), so running more of them at once than there are
cores only shares the cores out: under load every search then takes as long as all of them
together, and a request that needs a second or third round (the orchestrator's consensus loop
continues its search) queues again behind every newer request's first round. `SearchQueue` runs
at most `slots` searches at once and starts the waiting one whose gRPC deadline comes first
(earliest deadline first, Liu & Layland 1973, "Scheduling Algorithms for Multiprogramming in a
Hard-Real-Time Environment", J. ACM 20(1), section 7). The orchestrator gives every search of one
request the request's own deadline, so an older request's later round starts before a newer
request's first: each request runs to its end rather than all of them slowing down together.
Searches without a deadline come after those with one, in arrival order.

A waiting search whose caller cancels (or whose deadline passes: gRPC then cancels the handler)
leaves the queue without running.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

T = TypeVar("T")


class SearchQueue:
    """Runs blocking calls on `slots` worker threads, the waiting call with the earliest deadline
    first (see the module docstring).

    Args:
        slots: calls running at once, >= 1 (one worker thread each).

    Raises:
        ValueError: `slots` < 1.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self._free = slots
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._executor = ThreadPoolExecutor(slots, thread_name_prefix="search")

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        return sum(not turn.done() for _, _, turn in self._waiting)

    async def run(self, deadline: float | None, function: Callable[..., T], *args,
                  **kwargs) -> T:
        """`function(*args, **kwargs)` on a worker thread once a slot is free and no waiting call
        has an earlier `deadline` (a `time.monotonic()` instant; None: after every call with one).

        The call's own cancellation (asyncio.CancelledError) while it waits removes it from the
        queue; while it runs, the thread runs on (the caller stops it, as `uct_search`'s `stop`
        event does) and its slot passes on at once.
        """
        await self._acquire(math.inf if deadline is None else deadline)
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, partial(function, *args, **kwargs))
        finally:
            self._release()

    async def _acquire(self, deadline: float) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (deadline, next(self._arrivals), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # the slot came with the cancellation
                self._release()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, turn = heapq.heappop(self._waiting)
            if not turn.done():  # cancelled waiters are skipped
                turn.set_result(None)
                return
        self._free += 1

    def close(self) -> None:
        """Lets running calls finish; later calls raise RuntimeError."""
        self._executor.shutdown(wait=False, cancel_futures=True)
