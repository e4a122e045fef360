"""A cluster node's own access key, for its S3 requests (issue 14)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cluster_nodes") as batch:
        batch.add_column(sa.Column("access_key_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cluster_nodes") as batch:
        batch.drop_column("access_key_id")
