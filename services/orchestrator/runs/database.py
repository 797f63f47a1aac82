"""The run store's database: the engine for a SQLite or PostgreSQL URL, the start-up checks
(a corrupt file, a newer schema, a database that is not a run store: StoreError, nothing written),
the Alembic migration to the head revision, and transactions run on a thread pool.

Writes of one process go through one writer thread that commits the writes queued meanwhile in
one transaction (`group_commit`), on both databases: SQLite has one writer at a time anyway, and on
PostgreSQL a batch's runs all update their batch's row, which a transaction per write held locked
until its own commit, one write after another.

SQLite: one file (its folder created), WAL journal (persistent, set once checked), writers
serialised by BEGIN IMMEDIATE (workers of several processes would contend for one lock).
PostgreSQL (`postgresql://` or `postgresql+psycopg://`, psycopg 3): row locks, `FOR UPDATE SKIP
LOCKED` for leases, so that replicas share the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)

from libs.errors import Unavailable
from services.orchestrator.runs.group_commit import GroupWriter
from services.orchestrator.runs.model import StoreError

T = TypeVar("T")
HEAD_REVISION = "0001"
"""The newest revision of migrations/versions (a test checks it against Alembic's head): a
database at it opens without importing Alembic (`migrate.py`)."""
SQLITE_MAGIC = b"SQLite format 3\x00"
MIGRATION_LOCK = 0x6D63_7473_7275_6E73  # pg_advisory_xact_lock key ("mctsruns"), one migrator
_IMMEDIATE = "run_store_immediate"


def parse_url(url: str) -> URL:
    """The SQLAlchemy URL of a run store URL: `sqlite:///path` (relative to the working
    directory) or `postgresql://...` (driven by psycopg 3). Raises StoreError otherwise."""
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise StoreError(f"run store URL {url!r} is not a database URL: {error}") from None
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername in ("sqlite", "sqlite+pysqlite") and parsed.database \
            and parsed.database != ":memory:":
        return parsed
    raise StoreError(f"run store URL {_shown(parsed)} is not supported: use sqlite:///FILE or "
                     "postgresql://USER@HOST/DB")


def _shown(url: URL) -> str:
    return url.render_as_string(hide_password=True)


GroupScope = Callable[[Connection], contextlib.AbstractContextManager[Any]]


class Database:
    """An engine, its writer thread and the thread pool its reads run on. `write` and `read` run
    a function of a Connection in one transaction (SQLite: writes take the write lock at BEGIN)
    and map a lost or refused connection to Unavailable.

    Args:
        url: the parsed URL (`parse_url`).
        pool_size: read threads and pooled connections (+ one for the writer).
        group_scope: entered around a group's writes inside its transaction (the run store
            writes a group's batch events last, in its exit); none by default.
    """

    def __init__(self, url: URL, *, pool_size: int = 8,
                 group_scope: GroupScope | None = None) -> None:
        self.url = url
        self.shown = _shown(url)
        self.is_sqlite = url.get_backend_name() == "sqlite"
        self.engine = _engine(url, pool_size)
        self._group_scope = group_scope or (lambda _connection: contextlib.nullcontext())
        self._pool = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="run-store")
        self._writer = GroupWriter(self._group, functools.partial(self._transaction, True))

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs fn(connection, *args) in a write transaction; one retry after a unique-key race
        (an idempotent create that lost it finds the winner's row the second time)."""
        return await self._writer.write(fn, args)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Runs fn(connection, *args) in a read transaction."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._transaction, False, fn, args)

    def _transaction(self, immediate: bool, fn: Callable[..., T], args: tuple) -> T:
        for attempt in (1, 2):
            try:
                with self.engine.connect() as connection:
                    connection.execution_options(**{_IMMEDIATE: immediate})
                    with connection.begin():
                        return fn(connection, *args)
            except IntegrityError:
                if attempt == 2 or not immediate:
                    raise
            except (OperationalError, InterfaceError) as error:
                # A connection the server dropped (it restarted) fails once and the pool is
                # renewed: a read is asked again; a write is Unavailable (its caller retries).
                if attempt == 1 and not immediate and error.connection_invalidated:
                    continue
                raise Unavailable(f"run store {self.shown} unavailable: "
                                  f"{_first_line(error)}") from error
        raise AssertionError("unreachable")

    def _group(self, jobs: list[tuple[Callable[..., Any], tuple]]) -> list:
        """Runs each fn(connection, *args) in order in one write transaction: their results."""
        try:
            with self.engine.connect() as connection:
                connection.execution_options(**{_IMMEDIATE: True})
                with connection.begin(), self._group_scope(connection):
                    return [fn(connection, *args) for fn, args in jobs]
        except (OperationalError, InterfaceError) as error:
            raise Unavailable(f"run store {self.shown} unavailable: "
                              f"{_first_line(error)}") from error

    def ping(self) -> None:
        """Raises Unavailable unless the database answers a query."""
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except (OperationalError, InterfaceError, DatabaseError) as error:
            raise Unavailable(f"run store {self.shown} unavailable: "
                              f"{_first_line(error)}") from error

    def close(self) -> None:
        """Closes the pool's connections and threads."""
        self._pool.shutdown(wait=True)
        self._writer.close()
        self.engine.dispose()


def _first_line(error: Exception) -> str:
    return str(getattr(error, "orig", None) or error).strip().splitlines()[0]


def _engine(url: URL, pool_size: int) -> Engine:
    if url.get_backend_name() != "sqlite":
        # No ping per checkout (a round trip per transaction): a dropped connection fails its
        # transaction once, and SQLAlchemy then renews every pooled connection.
        return create_engine(url, pool_size=pool_size + 1, max_overflow=0,  # + the writer's
                             connect_args={"connect_timeout": 5})
    engine = create_engine(url, pool_size=pool_size + 1, max_overflow=0,
                           connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN (below)
        dbapi_connection.execute("PRAGMA busy_timeout = 30000")
        # WAL with synchronous NORMAL: a commit survives the process's crash (kill -9), and the
        # file stays consistent on power loss; FULL's fsync per commit cost ~4 ms per write.
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(_IMMEDIATE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def open_database(url: str, *, pool_size: int = 8,
                  group_scope: GroupScope | None = None) -> Database:
    """Opens the database of `url` and migrates it to the head revision.

    Raises StoreError naming the file or URL for an unsupported URL, a file that is not a SQLite
    database or fails its integrity check, a database of a schema revision this code does not know
    (newer), or one that holds other tables but no run store; nothing is written then. Raises
    Unavailable when the server cannot be reached."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        _check_sqlite_file(Path(parsed.database))
    database = Database(parsed, pool_size=pool_size, group_scope=group_scope)
    try:
        _migrate(database)
        if database.is_sqlite:  # after the checks: it rewrites the file's header
            raw = database.engine.raw_connection()  # no BEGIN: not inside a transaction
            try:
                raw.driver_connection.execute("PRAGMA journal_mode = WAL")
            finally:
                raw.close()
    except BaseException:
        database.close()
        raise
    return database


def _check_sqlite_file(path: Path) -> None:
    if path.exists():
        with path.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
        if head and head != SQLITE_MAGIC:
            raise StoreError(f"run store file {path} is not a SQLite database (corrupt or "
                             "another kind of file); left as it is")
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the folder of run store file {path}: {error}") from None


def _migrate(database: Database) -> None:
    try:
        with database.engine.connect() as connection:
            connection.execution_options(**{_IMMEDIATE: True})
            with connection.begin():
                versions = _check_existing(database, connection)
                if versions == [HEAD_REVISION]:
                    return  # at the head: nothing to migrate, Alembic not needed
                migrate = importlib.import_module("services.orchestrator.runs.migrate")
                known, head = migrate.revisions()
                _check_known(database, versions, known, head)
                migrate.upgrade(connection)
    except (OperationalError, InterfaceError) as error:
        if database.is_sqlite:
            raise StoreError(f"run store file {database.url.database} cannot be opened: "
                             f"{_first_line(error)}") from error
        raise Unavailable(f"run store {database.shown} unavailable: "
                          f"{_first_line(error)}") from error
    except DatabaseError as error:
        raise StoreError(f"run store {database.shown} cannot be read (corrupt?): "
                         f"{_first_line(error)}; left as it is") from error


def _check_existing(database: Database, connection: Connection) -> list[str]:
    """The database's schema revisions (none: a new database), after SQLite's integrity check
    (PostgreSQL: the migration lock taken); StoreError for a database of other tables."""
    where = f"run store {database.shown}"
    if database.is_sqlite:
        verdict = connection.exec_driver_sql("PRAGMA quick_check").scalar()
        if verdict != "ok":
            raise StoreError(f"{where} fails SQLite's integrity check ({verdict}); left as it is")
    else:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    tables = set(inspect(connection).get_table_names())
    if "alembic_version" not in tables:
        if tables:
            raise StoreError(f"{where} holds tables ({', '.join(sorted(tables)[:5])}) but no "
                             "run store schema; left as it is")
        return []
    return list(connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars())


def _check_known(database: Database, versions: list[str], known: set[str],
                 head: str | None) -> None:
    for version in versions:
        if version not in known:
            raise StoreError(f"run store {database.shown} has schema revision {version}, newer "
                             f"than this orchestrator's ({head}); upgrade the orchestrator; "
                             "left as it is")
