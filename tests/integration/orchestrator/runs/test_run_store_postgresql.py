"""The run store on a real PostgreSQL server: every test of
tests/unit/orchestrator/runs/test_run_store.py again (this folder's conftest gives them a store on a
fresh database of the session's server), and what only a server shows: a newer schema refused with
the URL named, an unreachable server and a restarted one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import psycopg
import pytest

from libs.errors import Unavailable
from services.orchestrator.runs.model import StoreError
from services.orchestrator.runs.store import RunStore

_CASES = Path(__file__).resolve().parents[3] / "unit" / "orchestrator" / "runs" / \
    "test_run_store.py"
_spec = importlib.util.spec_from_file_location("run_store_cases", _CASES)
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
globals().update({name: value for name, value in vars(_cases).items()
                  if name.startswith("test_")})


async def test_a_newer_schema_is_refused_naming_the_url_and_left_as_it_is(store_url, open_store):
    store = await open_store()
    await store.create_run("k", "solve", b"r", None)
    await store.close()
    with psycopg.connect(store_url, autocommit=True) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(StoreError) as error:
        await RunStore.open(store_url)
    message = str(error.value)
    assert "9999_from_the_future" in message and store_url.split("@")[1] in message
    with psycopg.connect(store_url) as connection:
        assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0] == \
            "9999_from_the_future"


async def test_the_password_is_masked_in_errors():
    with pytest.raises(Unavailable) as error:
        # Port 1 on loopback: nothing listens there.
        await RunStore.open("postgresql://user:s3cret@127.0.0.1:1/runs")
    assert "s3cret" not in str(error.value) and "127.0.0.1:1" in str(error.value)


async def test_a_restarted_server_is_unavailable_then_serves_again(postgres, store):
    run = await store.create_run("k", "solve", b"r", None)
    postgres.stop()
    try:
        with pytest.raises(Unavailable):
            await store.ping()
        with pytest.raises(Unavailable):
            await store.create_run("k", "solve", b"r", None)
    finally:
        postgres.restart()
    await store.ping()
    assert (await store.get_run(run.name, "k")).state.name == "QUEUED"
    assert (await store.lease("w", 30)).name == run.name
