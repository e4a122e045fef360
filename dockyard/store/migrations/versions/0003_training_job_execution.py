"""training job execution

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import dockyard.store.types

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("training_start_time", dockyard.store.types.UTCDateTime(), nullable=True)
        )
        batch_op.add_column(sa.Column("failure_reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("transitions", sa.JSON(), nullable=False, server_default="{}")
        )
        batch_op.add_column(sa.Column("runtime", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.add_column(
            sa.Column("stop_requested", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("billable_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_column("billable_seconds")
        batch_op.drop_column("stop_requested")
        batch_op.drop_column("runtime")
        batch_op.drop_column("transitions")
        batch_op.drop_column("failure_reason")
        batch_op.drop_column("training_start_time")
