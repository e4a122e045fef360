"""buckets of the embedded S3 service

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import dockyard.store.types

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "buckets",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_buckets_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_buckets")),
    )
    with op.batch_alter_table("buckets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_buckets_account_id"), ["account_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("buckets", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_buckets_account_id"))
    op.drop_table("buckets")
