"""repositories: the ECR repositories of the embedded registry (issue 27's first step)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dockyard.store.types import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repositories",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(length=12), nullable=False),
        sa.Column("region", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("arn", sa.String(length=512), nullable=False),
        sa.Column("image_tag_mutability", sa.String(length=32), nullable=False),
        sa.Column("scan_on_push", sa.Boolean(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name=op.f("fk_repositories_account_id_accounts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repositories")),
        sa.UniqueConstraint("account_id", "region", "name", name="uq_repositories_account_name"),
    )
    op.create_index(op.f("ix_repositories_arn"), "repositories", ["arn"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_repositories_arn"), table_name="repositories")
    op.drop_table("repositories")
