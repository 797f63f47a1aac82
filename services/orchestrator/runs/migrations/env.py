"""Alembic environment of the run store.

`RunStore.open` runs the migrations in-process, passing its connection in
`config.attributes["connection"]`; the command line (`alembic -c
services/orchestrator/runs/alembic.ini ...`) connects to `sqlalchemy.url` (or the `-x url=...`
argument) instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from services.orchestrator.runs.schema import metadata


def _migrate(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    """Migrates the given connection, or one to the configured URL."""
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    engine = create_engine(url)
    with engine.connect() as connection:
        _migrate(connection)
    engine.dispose()


run()
