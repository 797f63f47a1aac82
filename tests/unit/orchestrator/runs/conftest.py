"""The run store on a SQLite file in a temporary folder, with a clock the tests move."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from services.orchestrator.runs.store import RunStore


class FakeClock:
    """Epoch seconds that move only when a test says so (leases expire without sleeping)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/var/runs.db"


@pytest.fixture
async def open_store(store_url: str, clock: FakeClock
                     ) -> AsyncIterator[Callable[..., Awaitable[RunStore]]]:
    """Opens stores on the test's database (closed after the test)."""
    opened: list[RunStore] = []

    async def _open(**options: object) -> RunStore:
        store = await RunStore.open(store_url, clock=clock, pool_size=4, **options)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        await store.close()


@pytest.fixture
async def store(open_store: Callable[..., Awaitable[RunStore]]) -> RunStore:
    return await open_store(batch_max_items=2000, batch_max_bytes=64 * 1024)
