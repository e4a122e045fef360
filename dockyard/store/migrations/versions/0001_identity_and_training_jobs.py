"""accounts, access keys, the manual clock's state and training jobs

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import dockyard.store.types

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.String(length=12), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accounts")),
        sa.UniqueConstraint("name", name=op.f("uq_accounts_name")),
    )
    op.create_table(
        "clock_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("now", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clock_state")),
    )
    op.create_table(
        "access_keys",
        sa.Column("access_key_id", sa.String(length=32), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("secret_ciphertext", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=True),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_access_keys_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("access_key_id", name=op.f("pk_access_keys")),
    )
    op.create_index(op.f("ix_access_keys_account_id"), "access_keys", ["account_id"])
    op.create_table(
        "training_jobs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("arn", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("secondary_status", sa.String(length=64), nullable=False),
        sa.Column("warm_pool_status", sa.String(length=32), nullable=True),
        sa.Column("training_plan_arn", sa.String(length=2048), nullable=True),
        sa.Column("creation_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("last_modified_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("training_end_time", dockyard.store.types.UTCDateTime(), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_training_jobs_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_jobs")),
        sa.UniqueConstraint("account_id", "region", "name", name="uq_training_jobs_account_name"),
    )
    op.create_index(
        "ix_training_jobs_account_created",
        "training_jobs",
        ["account_id", "region", "creation_time"],
    )


def downgrade() -> None:
    op.drop_index("ix_training_jobs_account_created", table_name="training_jobs")
    op.drop_table("training_jobs")
    op.drop_index(op.f("ix_access_keys_account_id"), table_name="access_keys")
    op.drop_table("access_keys")
    op.drop_table("clock_state")
    op.drop_table("accounts")
