"""The Alembic side of opening a run store: the revisions this code knows and the upgrade to the
head. Imported only when a database is not at `database.HEAD_REVISION` already (a new file, an
older schema, or a newer one to refuse): importing Alembic and reading its scripts cost about
0.15 CPU seconds, a tenth of the orchestrator's start (docs/results/serving.md#readiness)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def revisions() -> tuple[set[str], str | None]:
    """Every revision of `migrations/versions` and the head one."""
    script = ScriptDirectory.from_config(_config())
    return {revision.revision for revision in script.walk_revisions()}, script.get_current_head()


def upgrade(connection: Connection) -> None:
    """Runs the migrations to the head revision on `connection`, in its transaction."""
    config = _config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
