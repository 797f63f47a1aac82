"""Group commit of the run store's writes (SQLite and PostgreSQL): the writes queued while one
runs go together in one transaction, each caller gets its own result only once committed, and one
refused write leaves the others of its group written and gets its own error."""

from __future__ import annotations

import asyncio
import threading

from libs.errors import FailedPrecondition
from services.orchestrator.runs.group_commit import GroupWriter
from services.orchestrator.runs.model import RunState


class FakeDatabase:
    """Transactions over a list: a group's values are kept only if every function returned."""

    def __init__(self) -> None:
        self.committed: list[object] = []
        self.groups: list[int] = []
        self.release = threading.Event()

    def group(self, jobs) -> list:
        pending: list[object] = []
        results = [fn(pending, *args) for fn, args in jobs]
        self.groups.append(len(jobs))
        self.committed += pending
        return results

    def single(self, fn, args):
        return self.group([(fn, args)])[0]


def put(pending: list, value: object) -> object:
    pending.append(value)
    return value


def refuse(pending: list, value: object) -> object:
    pending.append(value)
    raise FailedPrecondition(f"{value} refused")


async def _while_busy(writer: GroupWriter, database: FakeDatabase, queued) -> list:
    """Runs one write that holds the writer thread until the writes `queued` (a list of
    (fn, value)) are all queued, then lets it go: the outcomes of the queued writes."""
    entered = threading.Event()

    def held(pending: list, value: object) -> object:
        entered.set()
        database.release.wait(10)
        return put(pending, value)

    database.release.clear()
    first = asyncio.ensure_future(writer.write(held, ("held",)))
    await asyncio.to_thread(entered.wait, 10)
    writes = [asyncio.ensure_future(writer.write(fn, (value,))) for fn, value in queued]
    await asyncio.sleep(0)  # every write queued behind the held one
    database.release.set()
    assert await first == "held"
    return await asyncio.gather(*writes, return_exceptions=True)


async def test_writes_queued_meanwhile_commit_together_and_a_refusal_is_their_own():
    database = FakeDatabase()
    writer = GroupWriter(database.group, database.single)
    try:
        assert await _while_busy(writer, database, [(put, i) for i in range(5)]) == \
            [0, 1, 2, 3, 4]
        assert database.groups == [1, 5]  # the five in one transaction
        outcomes = await _while_busy(writer, database, [(put, "a"), (refuse, "bad"),
                                                        (put, "b")])
    finally:
        await asyncio.to_thread(writer.close)
    assert outcomes[0] == "a" and outcomes[2] == "b"
    assert isinstance(outcomes[1], FailedPrecondition)
    assert database.committed == ["held", 0, 1, 2, 3, 4, "held", "a", "b"]


async def test_concurrent_writes_of_the_store_each_get_their_outcome(store):
    done = (await store.create_run("alice", "solve", b"r", None)).name
    await store.cancel_run(done, None)
    calls = [store.create_run("alice", "solve", b"r", None) for _ in range(20)]
    outcomes = await asyncio.gather(*calls, store.cancel_run(done, None),
                                    return_exceptions=True)
    assert isinstance(outcomes[-1], FailedPrecondition)
    for created in outcomes[:-1]:
        assert (await store.get_run(created.name, "alice")).state is RunState.QUEUED
