"""The run store on a real PostgreSQL server (postgres_server.py): one server for the session, an
empty database per test, and a clock the tests move."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from postgres_server import PostgresServer

from services.orchestrator.runs.store import RunStore


class FakeClock:
    """Epoch seconds that move only when a test says so (leases expire without sleeping)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session; the tests skip, saying why, where it cannot start."""
    server = PostgresServer()
    reason = server.start()
    try:
        if reason is not None:
            pytest.skip(f"no PostgreSQL server: {reason}")
        yield server
    finally:
        server.remove()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(postgres: PostgresServer) -> str:
    return postgres.create_database()


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
