"""training jobs: a uid naming their files, and one job per ARN

A job's files on a backend were named after the job, so a job created again under a
deleted job's name found the old one's (its logs, its finished state). They are named
after a uid now (jobs from before keep their old names: no uid). Names that differ only
in case share an ARN (SageMaker lower-cases it), and capacity leases are held by ARN:
an ARN is now unique.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uid", sa.String(length=32), nullable=True))
    shared = (
        op.get_bind()
        .execute(
            sa.text("SELECT arn FROM training_jobs GROUP BY arn HAVING COUNT(*) > 1 ORDER BY arn")
        )
        .scalars()
        .all()
    )
    if shared:
        # Two live jobs behind one ARN cannot both be kept consistent; an operator must
        # choose (delete one through the API with the previous version, then upgrade).
        raise RuntimeError(
            "training jobs whose names differ only in case share an ARN: "
            + ", ".join(shared)
            + "; delete all but one of each before upgrading"
        )
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.create_index("ix_training_jobs_arn", ["arn"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_training_jobs_arn")
        batch_op.drop_column("uid")
