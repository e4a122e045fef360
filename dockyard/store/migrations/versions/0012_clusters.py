"""HyperPod clusters and their nodes (issue 14)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dockyard.store.types import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("cluster_id", sa.String(length=12), nullable=False),
        sa.Column("arn", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("failure_message", sa.String(length=1024), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("last_modified_time", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_clusters_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
        sa.UniqueConstraint("account_id", "region", "name", name="uq_clusters_account_name"),
        sa.UniqueConstraint("cluster_id", name=op.f("uq_clusters_cluster_id")),
    )
    op.create_index(op.f("ix_clusters_arn"), "clusters", ["arn"], unique=False)
    op.create_index(op.f("ix_clusters_status"), "clusters", ["status"], unique=False)
    op.create_table(
        "cluster_nodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("instance_group", sa.String(length=63), nullable=False),
        sa.Column("instance_id", sa.String(length=32), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("message", sa.String(length=1024), nullable=True),
        sa.Column("availability_zone", sa.String(length=32), nullable=False),
        sa.Column("pool_key", sa.String(length=200), nullable=False),
        sa.Column("block_id", sa.String(length=64), nullable=True),
        sa.Column("fleet_instance_id", sa.String(length=160), nullable=True),
        sa.Column("ultraserver_id", sa.String(length=160), nullable=True),
        sa.Column("launch_time", UTCDateTime(), nullable=False),
        sa.Column("shutdown_requested", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_cluster_nodes_account_id_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["cluster_id"], ["clusters.id"], name=op.f("fk_cluster_nodes_cluster_id_clusters")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cluster_nodes")),
        sa.UniqueConstraint("instance_id", name=op.f("uq_cluster_nodes_instance_id")),
    )
    op.create_index(
        op.f("ix_cluster_nodes_cluster_id"), "cluster_nodes", ["cluster_id"], unique=False
    )
    op.create_index(op.f("ix_cluster_nodes_block_id"), "cluster_nodes", ["block_id"], unique=False)


def downgrade() -> None:
    op.drop_table("cluster_nodes")
    op.drop_table("clusters")
