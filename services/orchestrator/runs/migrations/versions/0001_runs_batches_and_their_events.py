"""The first schema: runs, batches and their events.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 04:53:46.655241
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _create_event_tables()
    _create_batches()
    _create_runs()


def _create_event_tables() -> None:
    op.create_table(
        "batch_events",
        sa.Column("batch_id", sa.String(length=36), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("previous_state", sa.String(length=16), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("batch_id", "sequence", name=op.f("pk_batch_events")),
    )
    op.create_table(
        "run_events",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("previous_state", sa.String(length=16), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "sequence", name=op.f("pk_run_events")),
    )


def _create_batches() -> None:
    op.create_table(
        "batches",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("batch_id", sa.String(length=36), nullable=False),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("display_name", sa.String(length=512), nullable=False),
        sa.Column("create_time", sa.Double(), nullable=False),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("run_count", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("last_event_sequence", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
        sa.UniqueConstraint("batch_id", name=op.f("uq_batches_batch_id")),
        sa.UniqueConstraint("owner", "request_id", name=op.f("uq_batches_owner_request_id")),
    )
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_batches_end_time"), ["end_time"], unique=False)
        batch_op.create_index(batch_op.f("ix_batches_owner_id"), ["owner", "id"], unique=False)


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("owner", sa.String(length=256), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("request", sa.LargeBinary(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("create_time", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("update_time", sa.Double(), nullable=False),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("batch_id", sa.String(length=36), nullable=True),
        sa.Column("batch_index", sa.Integer(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=True),
        sa.Column("error", sa.LargeBinary(), nullable=True),
        sa.Column("checkpoint", sa.LargeBinary(), nullable=True),
        sa.Column("lease_owner", sa.String(length=256), nullable=True),
        sa.Column("lease_expires", sa.Double(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("last_event_sequence", sa.BigInteger(), nullable=False),
        sa.Column("trace_ids", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.batch_id"], name=op.f("fk_runs_batch_id_batches")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("owner", "request_id", name=op.f("uq_runs_owner_request_id")),
        sa.UniqueConstraint("run_id", name=op.f("uq_runs_run_id")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_batch_id_id"), ["batch_id", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_batch_id_state"), ["batch_id", "state"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_runs_end_time"), ["end_time"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_owner_id"), ["owner", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_state_id"), ["state", "id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_state_lease_expires"), ["state", "lease_expires"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_state_lease_expires"))
        batch_op.drop_index(batch_op.f("ix_runs_state_id"))
        batch_op.drop_index(batch_op.f("ix_runs_owner_id"))
        batch_op.drop_index(batch_op.f("ix_runs_end_time"))
        batch_op.drop_index(batch_op.f("ix_runs_batch_id_state"))
        batch_op.drop_index(batch_op.f("ix_runs_batch_id_id"))

    op.drop_table("runs")
    op.drop_table("run_events")
    with op.batch_alter_table("batches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_batches_owner_id"))
        batch_op.drop_index(batch_op.f("ix_batches_end_time"))

    op.drop_table("batches")
    op.drop_table("batch_events")
