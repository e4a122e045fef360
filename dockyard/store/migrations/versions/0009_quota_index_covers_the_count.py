"""training jobs: the quota index carries the instance count

The quota check sums instance_count over an account's unfinished jobs of a type; with
the count in the index the database answers from the index alone, without a table
lookup per job (4-8 ms with 10,000 queued jobs on SQLite before).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = ["account_id", "region", "instance_type", "status"]


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_training_jobs_quota")
        batch_op.create_index("ix_training_jobs_quota", [*COLUMNS, "instance_count"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_training_jobs_quota")
        batch_op.create_index("ix_training_jobs_quota", COLUMNS, unique=False)
