"""training jobs: what a job waiting for capacity waits for

A pass of the jobs reconciler tried to place every queued job, each behind the capacity
lock with a calendar loaded for it: 46 s with 10,000 queued (issue 13). A job that fails
to place now records the capacity it saw (its pools' versions, the next lease end), and
a pass skips it while that still holds.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("waiting_for", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_column("waiting_for")
