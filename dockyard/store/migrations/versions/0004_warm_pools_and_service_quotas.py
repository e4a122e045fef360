"""warm pools and service quotas

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import dockyard.store.types

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "quota_requests",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("service_code", sa.String(length=64), nullable=False),
        sa.Column("quota_code", sa.String(length=32), nullable=False),
        sa.Column("quota_name", sa.String(length=256), nullable=False),
        sa.Column("desired_value", sa.Double(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("case_id", sa.String(length=64), nullable=True),
        sa.Column("requester", sa.String(length=256), nullable=True),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("last_updated", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_quota_requests_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quota_requests")),
    )
    with op.batch_alter_table("quota_requests", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_quota_requests_account_id"), ["account_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_quota_requests_status"), ["status"], unique=False)

    op.create_table(
        "service_quotas",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("quota_code", sa.String(length=32), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("updated_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_service_quotas_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_service_quotas")),
        sa.UniqueConstraint("account_id", "region", "quota_code", name="uq_service_quotas_quota"),
    )
    with op.batch_alter_table("service_quotas", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_service_quotas_account_id"), ["account_id"], unique=False
        )

    op.create_table(
        "warm_pools",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("match_key", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("home", sa.String(length=256), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("born_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("available_since", dockyard.store.types.UTCDateTime(), nullable=True),
        sa.Column("deadline", dockyard.store.types.UTCDateTime(), nullable=True),
        sa.Column("terminated_at", dockyard.store.types.UTCDateTime(), nullable=True),
        sa.Column("termination_reason", sa.String(length=256), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_warm_pools_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_warm_pools")),
    )
    with op.batch_alter_table("warm_pools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_warm_pools_account_id"), ["account_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_warm_pools_match_key"), ["match_key"], unique=False)
        batch_op.create_index(batch_op.f("ix_warm_pools_status"), ["status"], unique=False)

    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warm_pool_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("warm_pool_reused_by", sa.String(length=63), nullable=True))
        batch_op.add_column(sa.Column("warm_pool_retained_seconds", sa.Integer(), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_training_jobs_warm_pool_id"), ["warm_pool_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_training_jobs_warm_pool_id"))
        batch_op.drop_column("warm_pool_retained_seconds")
        batch_op.drop_column("warm_pool_reused_by")
        batch_op.drop_column("warm_pool_id")

    with op.batch_alter_table("warm_pools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_warm_pools_status"))
        batch_op.drop_index(batch_op.f("ix_warm_pools_match_key"))
        batch_op.drop_index(batch_op.f("ix_warm_pools_account_id"))

    op.drop_table("warm_pools")
    with op.batch_alter_table("service_quotas", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_service_quotas_account_id"))

    op.drop_table("service_quotas")
    with op.batch_alter_table("quota_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_quota_requests_status"))
        batch_op.drop_index(batch_op.f("ix_quota_requests_account_id"))

    op.drop_table("quota_requests")
