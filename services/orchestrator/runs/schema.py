"""The run store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

The schema's versions are Alembic revisions under runs/migrations/versions/; these definitions are
the head revision's, used by the queries (the migrations create the tables, never `create_all`).
Times are epoch seconds in double precision; states are RunState names.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

# SQLite autoincrements only an INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
Id = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})

batches = Table(
    "batches", metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("batch_id", String(36), nullable=False, unique=True),
    Column("owner", String(256), nullable=False),
    Column("request_id", String(64)),
    Column("display_name", String(512), nullable=False, default=""),
    Column("create_time", Double, nullable=False),
    Column("end_time", Double),
    Column("run_count", Integer, nullable=False),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("last_event_sequence", BigInteger, nullable=False, default=0),
    UniqueConstraint("owner", "request_id"),
    Index(None, "owner", "id"),
    Index(None, "end_time"),
)

runs = Table(
    "runs", metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("run_id", String(36), nullable=False, unique=True),
    Column("owner", String(256), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("request", LargeBinary, nullable=False),
    Column("request_id", String(64)),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("create_time", Double, nullable=False),
    Column("start_time", Double),
    Column("update_time", Double, nullable=False),
    Column("end_time", Double),
    Column("batch_id", String(36), ForeignKey("batches.batch_id")),
    Column("batch_index", Integer, nullable=False, default=0),
    Column("response", LargeBinary),
    Column("error", LargeBinary),
    Column("checkpoint", LargeBinary),
    Column("lease_owner", String(256)),
    Column("lease_expires", Double),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("last_event_sequence", BigInteger, nullable=False, default=0),
    Column("trace_ids", Text, nullable=False, default=""),
    UniqueConstraint("owner", "request_id"),
    Index(None, "state", "id"),
    Index(None, "state", "lease_expires"),
    Index(None, "owner", "id"),
    Index(None, "batch_id", "id"),
    Index(None, "batch_id", "state"),
    Index(None, "end_time"),
)

run_events = Table(
    "run_events", metadata,
    Column("run_id", String(36), primary_key=True),
    Column("sequence", BigInteger, primary_key=True),
    Column("time", Double, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("previous_state", String(16)),
    Column("state", String(16)),
    Column("attempt", Integer, nullable=False, default=0),
)

batch_events = Table(
    "batch_events", metadata,
    Column("batch_id", String(36), primary_key=True),
    Column("sequence", BigInteger, primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("time", Double, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("previous_state", String(16)),
    Column("state", String(16)),
    Column("attempt", Integer, nullable=False, default=0),
)
