"""Opening the run store: a SQLite file and its folder are created and migrated; a corrupt file, a
newer schema or a database that is not a run store stops the start with a StoreError naming the
file, and the file is left byte for byte as it was."""

from __future__ import annotations

import hashlib
import importlib
import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from services.orchestrator.runs import database, migrate
from services.orchestrator.runs.model import StoreError
from services.orchestrator.runs.schema import metadata
from services.orchestrator.runs.store import RunStore


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _made(path: Path) -> None:
    """A run store at `path` holding one run, closed (its journal folded into the file)."""
    store = await RunStore.open(f"sqlite:///{path}")
    await store.create_run("k", "solve", b"r", None)
    await store.close()


async def test_the_file_and_its_folder_are_created_and_kept_across_opens(tmp_path: Path):
    path = tmp_path / "var" / "deeper" / "runs.db"
    await _made(path)
    store = await RunStore.open(f"sqlite:///{path}")
    try:
        assert sum((await store.counts_by_state()).values()) == 1
        assert str(path) in store.url
        await store.ping()
    finally:
        await store.close()


@pytest.mark.parametrize("content", [b"not a database at all\n" * 100, b"\x00\xff" * 3000])
async def test_a_file_that_is_not_sqlite_is_refused_and_left_as_it_is(tmp_path, content):
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    with pytest.raises(StoreError) as error:
        await RunStore.open(f"sqlite:///{path}")
    assert str(path) in str(error.value)
    assert path.read_bytes() == content


async def test_a_sqlite_file_with_corrupt_pages_is_refused_and_left_as_it_is(tmp_path: Path):
    path = tmp_path / "runs.db"
    await _made(path)
    data = bytearray(path.read_bytes())
    page = 4096
    data[page:len(data)] = bytes([0x5A]) * (len(data) - page)  # every page after the header's
    path.write_bytes(bytes(data))
    before = _digest(path)
    with pytest.raises(StoreError) as error:
        await RunStore.open(f"sqlite:///{path}")
    assert str(path) in str(error.value)
    assert _digest(path) == before


async def test_a_newer_schema_is_refused_naming_the_file_and_left_as_it_is(tmp_path: Path):
    path = tmp_path / "runs.db"
    await _made(path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    connection.close()
    before = _digest(path)
    with pytest.raises(StoreError) as error:
        await RunStore.open(f"sqlite:///{path}")
    message = str(error.value)
    assert str(path) in message and "9999_from_the_future" in message and "newer" in message
    assert _digest(path) == before


async def test_a_database_of_something_else_is_refused(tmp_path: Path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    connection.close()
    before = _digest(path)
    with pytest.raises(StoreError) as error:
        await RunStore.open(f"sqlite:///{path}")
    assert str(path) in str(error.value) and "invoices" in str(error.value)
    assert _digest(path) == before


@pytest.mark.parametrize("url", ["mysql://db/runs", "sqlite://", "sqlite:///:memory:", "runs.db",
                                 "redis://127.0.0.1/0"])
async def test_an_unsupported_url_is_refused(url: str):
    with pytest.raises(StoreError):
        await RunStore.open(url)


async def test_the_migrations_build_exactly_the_schema_the_queries_use(tmp_path: Path):
    path = tmp_path / "runs.db"
    await _made(path)
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), metadata) == []
    finally:
        engine.dispose()


def test_the_head_revision_the_fast_open_trusts_is_alembics_head():
    assert migrate.revisions()[1] == database.HEAD_REVISION


async def test_a_store_at_the_head_opens_without_alembic(tmp_path: Path, monkeypatch):
    path = tmp_path / "runs.db"
    await _made(path)  # new file: migrated through Alembic
    imported = []
    real = importlib.import_module
    monkeypatch.setattr(database.importlib, "import_module",
                        lambda name: imported.append(name) or real(name))
    store = await RunStore.open(f"sqlite:///{path}")
    await store.close()
    assert imported == []
    (tmp_path / "new.db").unlink(missing_ok=True)
    store = await RunStore.open(f"sqlite:///{tmp_path / 'new.db'}")
    await store.close()
    assert imported == ["services.orchestrator.runs.migrate"]
