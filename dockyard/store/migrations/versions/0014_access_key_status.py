"""An access key's status: Active, or Inactive once disabled (issue 25)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every key made before this was usable: Active.
    with op.batch_alter_table("access_keys") as batch:
        batch.add_column(
            sa.Column("status", sa.String(length=16), nullable=False, server_default="Active")
        )


def downgrade() -> None:
    # A disabled key would come back to life: an older server has no way to refuse it.
    op.execute("DELETE FROM access_keys WHERE status <> 'Active'")
    with op.batch_alter_table("access_keys") as batch:
        batch.drop_column("status")
