"""training jobs: the claim a jobs reconciler holds while it steps one

Two servers may share one database (and one data dir): the jobs reconciler of each
claims a job (owner, token, expiry) in the transaction that starts a step and gives it
up in the one that ends it, so no two servers ever act on the same job at once (issue
13). A claim whose owner is gone, or whose expiry has passed, may be taken over.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dockyard.store.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_owner", sa.String(length=160), nullable=True))
        batch_op.add_column(sa.Column("claim_token", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("claim_expires_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_column("claim_expires_at")
        batch_op.drop_column("claim_token")
        batch_op.drop_column("claim_owner")
