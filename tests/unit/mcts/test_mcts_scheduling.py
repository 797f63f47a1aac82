"""SearchQueue: at most `slots` calls at once, the waiting one with the earliest deadline next."""

from __future__ import annotations

import asyncio
import threading

import pytest

from services.mcts.api.scheduling import SearchQueue


async def _blocked(queue: SearchQueue) -> tuple[asyncio.Task, threading.Event]:
    """A call holding the queue's one slot until the returned event is set."""
    gate = threading.Event()
    holder = asyncio.create_task(queue.run(0.0, gate.wait, 5.0))
    while queue._free:  # the holder has its slot
        await asyncio.sleep(0)
    return holder, gate


async def _queued(queue: SearchQueue, count: int) -> None:
    while queue.waiting < count:
        await asyncio.sleep(0)


async def test_waiting_calls_start_earliest_deadline_first_then_those_without_one():
    queue = SearchQueue(1)
    holder, gate = await _blocked(queue)
    started: list[str] = []
    calls = [asyncio.create_task(queue.run(deadline, started.append, name))
             for name, deadline in (("none", None), ("late", 30.0), ("early", 10.0),
                                    ("middle", 20.0), ("none-2", None))]
    await _queued(queue, len(calls))
    gate.set()
    await asyncio.gather(holder, *calls)
    assert started == ["early", "middle", "late", "none", "none-2"]
    queue.close()


async def test_no_more_than_slots_calls_run_at_once():
    queue = SearchQueue(2)
    running = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        threading.Event().wait(0.01)
        with lock:
            running -= 1

    await asyncio.gather(*(queue.run(float(i), work) for i in range(8)))
    assert most == 2
    assert queue._free == 2
    queue.close()


async def test_a_waiting_call_cancelled_never_runs_and_gives_no_slot_away():
    queue = SearchQueue(1)
    holder, gate = await _blocked(queue)
    ran: list[str] = []
    cancelled = asyncio.create_task(queue.run(1.0, ran.append, "cancelled"))
    later = asyncio.create_task(queue.run(2.0, ran.append, "later"))
    await _queued(queue, 2)
    cancelled.cancel()
    gate.set()
    await holder
    await later
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert ran == ["later"]
    assert queue._free == 1 and queue.waiting == 0
    queue.close()


async def test_a_failing_call_raises_to_its_caller_and_frees_its_slot():
    queue = SearchQueue(1)

    def fail() -> None:
        raise ValueError("bad search")

    with pytest.raises(ValueError, match="bad search"):
        await queue.run(None, fail)
    assert await queue.run(None, sum, [1, 2]) == 3
    queue.close()


def test_slots_below_one_are_refused():
    with pytest.raises(ValueError, match="slots"):
        SearchQueue(0)
