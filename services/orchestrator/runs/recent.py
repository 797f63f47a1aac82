"""Events this process committed, handed to its own watchers from memory.

The store stays the source of truth: an event reaches `RecentEvents` only after the transaction
that wrote it committed (`RunStore._write` publishes what the write functions collected under
`PUBLISHED`), and only for runs that a watcher of this process is waiting on. A watcher asks
`after(name, sequence)` first: it answers only with the events that follow `sequence` without a
gap (sequences are per run and gapless, so these are exactly the stored ones), else None and the
watcher reads the store (events written before it started watching, or by another replica).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Iterator

from sqlalchemy import Connection

from services.orchestrator.runs.model import EventRecord

PUBLISHED = "run_store_published"
"""Key of Connection.info under which a write transaction collects the events it writes."""
KEPT = 1000
"""Events kept per watched run (the newest)."""


def collect(connection: Connection, event: EventRecord) -> None:
    """Notes an event written in the current transaction (when its writer collects them)."""
    published = connection.info.get(PUBLISHED)
    if published is not None:
        published.append(event)


def collecting(connection: Connection, fn, *args):
    """(fn(connection, *args), the events it wrote): the write functions' wrapper."""
    published: list[EventRecord] = []
    connection.info[PUBLISHED] = published
    try:
        return fn(connection, *args), published
    finally:
        connection.info.pop(PUBLISHED, None)


class RecentEvents:
    """The committed events of the runs watched in this process (see the module docstring)."""

    def __init__(self) -> None:
        self._watchers: collections.Counter[str] = collections.Counter()
        self._events: dict[str, collections.deque[EventRecord]] = {}

    @contextlib.contextmanager
    def watching(self, name: str) -> Iterator[None]:
        """Keeps the events of run `name` published meanwhile."""
        self._watchers[name] += 1
        self._events.setdefault(name, collections.deque(maxlen=KEPT))
        try:
            yield
        finally:
            self._watchers[name] -= 1
            if self._watchers[name] <= 0:
                del self._watchers[name]
                self._events.pop(name, None)

    def publish(self, events: Iterable[EventRecord]) -> None:
        """Committed events: kept for the runs being watched."""
        for event in events:
            kept = self._events.get(event.run)
            if kept is not None and (not kept or kept[-1].sequence < event.sequence):
                kept.append(event)

    def after(self, name: str, sequence: int, limit: int) -> list[EventRecord] | None:
        """The run's events from sequence + 1 on, without a gap, at most `limit`; None when
        memory does not hold sequence + 1 (read the store)."""
        kept = self._events.get(name)
        if not kept or kept[0].sequence > sequence + 1 or kept[-1].sequence <= sequence:
            return None
        events = [event for event in kept if event.sequence > sequence][:limit]
        expected = range(sequence + 1, sequence + 1 + len(events))
        if [event.sequence for event in events] != list(expected):
            return None
        return events
