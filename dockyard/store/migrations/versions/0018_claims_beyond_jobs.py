"""clusters, warm pools, training plans: the claim a reconciler holds while it steps one

Every reconciler now steps its rows one at a time under a claim (owner, token,
expiry; `store.claims`), as the jobs reconciler has since 0011, rather than serialising
whole passes on the capacity lock. A cluster is claimed as a whole (not node by node):
one step decides all its groups' nodes and its status together.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dockyard.store.types import UTCDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TABLES = ("clusters", "warm_pools", "training_plans")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("claim_owner", sa.String(length=160), nullable=True))
            batch_op.add_column(sa.Column("claim_token", sa.String(length=32), nullable=True))
            batch_op.add_column(sa.Column("claim_expires_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("claim_expires_at")
            batch_op.drop_column("claim_token")
            batch_op.drop_column("claim_owner")
