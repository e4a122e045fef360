"""training jobs: their instance type and count as columns, for the quota check

The quota check summed the instances of an account's running jobs by loading and
decoding every one of them on each CreateTrainingJob, so submitting N jobs cost O(N²)
(issue 13). The type and count now sit in indexed columns and the check is one sum.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JOBS = sa.table(
    "training_jobs",
    sa.column("id", sa.Integer),
    sa.column("spec", sa.JSON),
    sa.column("instance_type", sa.String),
    sa.column("instance_count", sa.Integer),
)


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("instance_type", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("instance_count", sa.Integer(), nullable=True))
    bind = op.get_bind()
    for row in bind.execute(sa.select(JOBS.c.id, JOBS.c.spec)).all():
        spec = json.loads(row.spec) if isinstance(row.spec, str) else row.spec
        resources = (spec or {}).get("ResourceConfig", {})
        bind.execute(
            JOBS.update()
            .where(JOBS.c.id == row.id)
            .values(
                instance_type=str(resources.get("InstanceType", "")),
                instance_count=int(resources.get("InstanceCount", 0)),
            )
        )
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.alter_column("instance_type", existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column("instance_count", existing_type=sa.Integer(), nullable=False)
        batch_op.create_index(
            "ix_training_jobs_quota",
            ["account_id", "region", "instance_type", "status"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_training_jobs_quota")
        batch_op.drop_column("instance_count")
        batch_op.drop_column("instance_type")
