"""training plans, fleet and capacity calendar

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import dockyard.store.types

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_lock",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_capacity_lock")),
    )
    # The single row that every capacity-booking transaction updates first.
    op.execute("INSERT INTO capacity_lock (id, generation) VALUES (1, 0)")
    op.create_table(
        "capacity_pools",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("availability_zone", sa.String(length=32), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("ultraserver_id", sa.String(length=160), nullable=True),
        sa.Column("ultraserver_type", sa.String(length=64), nullable=True),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_capacity_pools")),
    )
    with op.batch_alter_table("capacity_pools", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_capacity_pools_region"), ["region"], unique=False)

    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=160), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("availability_zone", sa.String(length=32), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("ultraserver_id", sa.String(length=160), nullable=True),
        sa.Column("ultraserver_type", sa.String(length=64), nullable=True),
        sa.Column("pool_key", sa.String(length=200), nullable=False),
        sa.Column("health", sa.String(length=32), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_pool_key"), ["pool_key"], unique=False)

    op.create_table(
        "leases",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pool_key", sa.String(length=200), nullable=False),
        sa.Column("start_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("end_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool_key"], ["capacity_pools.key"], name=op.f("fk_leases_pool_key_capacity_pools")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
    )
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_leases_holder"), ["holder"], unique=False)
        batch_op.create_index("ix_leases_pool_end", ["pool_key", "end_time"], unique=False)

    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("resource_arn", sa.String(length=2048), nullable=False),
        sa.Column("amount", sa.String(length=32), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("description", sa.String(length=512), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_ledger_entries_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
    )
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_ledger_entries_account_id"), ["account_id"], unique=False
        )

    op.create_table(
        "training_plan_offerings",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("expires_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("target", sa.String(length=32), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("blocks", sa.JSON(), nullable=False),
        sa.Column("upfront_fee", sa.String(length=32), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("purchased_by", sa.String(length=2048), nullable=True),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_training_plan_offerings_account_id_accounts"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_plan_offerings")),
    )
    op.create_table(
        "training_plans",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("arn", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("status_message", sa.String(length=1024), nullable=True),
        sa.Column("offering_id", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=32), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("ultraserver_type", sa.String(length=64), nullable=True),
        sa.Column("ultraserver_count", sa.Integer(), nullable=True),
        sa.Column("spare_per_ultraserver", sa.Integer(), nullable=False),
        sa.Column("upfront_fee", sa.String(length=32), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("start_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("end_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("last_modified_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_training_plans_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_training_plans")),
        sa.UniqueConstraint("account_id", "region", "name", name="uq_training_plans_account_name"),
    )
    with op.batch_alter_table("training_plans", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_training_plans_status"), ["status"], unique=False)

    op.create_table(
        "reserved_capacities",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("arn", sa.String(length=256), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("availability_zone", sa.String(length=32), nullable=False),
        sa.Column("ultraserver_type", sa.String(length=64), nullable=True),
        sa.Column("ultraserver_count", sa.Integer(), nullable=True),
        sa.Column("pools", sa.JSON(), nullable=False),
        sa.Column("start_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.Column("end_time", dockyard.store.types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"],
            ["accounts.id"],
            name=op.f("fk_reserved_capacities_account_id_accounts"),
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"],
            ["training_plans.id"],
            name=op.f("fk_reserved_capacities_plan_id_training_plans"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reserved_capacities")),
    )
    with op.batch_alter_table("reserved_capacities", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_reserved_capacities_arn"), ["arn"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_reserved_capacities_plan_id"), ["plan_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("reserved_capacities", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reserved_capacities_plan_id"))
        batch_op.drop_index(batch_op.f("ix_reserved_capacities_arn"))

    op.drop_table("reserved_capacities")
    with op.batch_alter_table("training_plans", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_training_plans_status"))

    op.drop_table("training_plans")
    op.drop_table("training_plan_offerings")
    with op.batch_alter_table("ledger_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ledger_entries_account_id"))

    op.drop_table("ledger_entries")
    with op.batch_alter_table("leases", schema=None) as batch_op:
        batch_op.drop_index("ix_leases_pool_end")
        batch_op.drop_index(batch_op.f("ix_leases_holder"))

    op.drop_table("leases")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_pool_key"))

    op.drop_table("instances")
    with op.batch_alter_table("capacity_pools", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capacity_pools_region"))

    op.drop_table("capacity_pools")
    op.drop_table("capacity_lock")
