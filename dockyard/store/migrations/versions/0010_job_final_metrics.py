"""training jobs: their FinalMetricDataList, kept when they end

The agents scrape MetricDefinitions as lines arrive; the jobs reconciler merges the
instances' values when a job ends and keeps them here, so DescribeTrainingJob reads the
database only (and runs on the event loop again). Jobs that ended before keep being
answered from the instances' files.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("final_metrics", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_column("final_metrics")
