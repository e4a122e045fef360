"""A deleted job's instances, whose files are to be removed (issue 25)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dockyard.store.types import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_purges",
        sa.Column("job_key", sa.String(length=255), nullable=False),
        sa.Column("requested_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job_key", name=op.f("pk_instance_purges")),
    )


def downgrade() -> None:
    op.drop_table("instance_purges")
