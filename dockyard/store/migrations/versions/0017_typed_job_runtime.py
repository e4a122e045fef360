"""training jobs: an explicit phase; warm pools: whether their instances are released

The jobs reconciler inferred where a job was from the keys of `training_jobs.runtime`
(no "placement": queued; "interrupting": being interrupted); it now keeps a phase
column (`domain.job_runtime.JobPhase`) and the rest as one typed value, whose
interruption reason is named "interruption". The pools reconciler wrote "released"
into a pool's placement; it is a column now. Existing rows are moved both ways.

This migration spells the old and new shapes itself (it must keep working when the
code's shapes move on).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_JOBS = sa.table(
    "training_jobs",
    sa.column("id", sa.Integer),
    sa.column("status", sa.String),
    sa.column("stop_requested", sa.Boolean),
    sa.column("runtime", sa.JSON),
    sa.column("phase", sa.String),
)
_POOLS = sa.table(
    "warm_pools",
    sa.column("id", sa.Integer),
    sa.column("placement", sa.JSON),
    sa.column("released", sa.Boolean),
)
_ENDED = ("Completed", "Failed", "Stopped")


def phase_of(status: str, stop_requested: bool, runtime: dict[str, Any]) -> str:
    """Where a job stood, from its row as 0016 kept it."""
    if status in _ENDED:
        return "ended"
    if runtime.get("interrupting"):
        return "interrupting"
    if "az" not in (runtime.get("placement") or {}):
        return "queued"
    # Placed: its instances may or may not have been launched yet; a step launches
    # them either way (a launch is safe to repeat), so it is followed as running.
    return "ending" if stop_requested else "running"


def _without_secret(spec: Any) -> Any:
    if not isinstance(spec, dict) or not isinstance(spec.get("s3"), dict):
        return spec
    return {**spec, "s3": {k: v for k, v in spec["s3"].items() if k != "secret_access_key"}}


def upgrade() -> None:
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("phase", sa.String(length=16), nullable=False, server_default="queued")
        )
    with op.batch_alter_table("warm_pools", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("released", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    connection = op.get_bind()
    jobs = connection.execute(
        sa.select(_JOBS.c.id, _JOBS.c.status, _JOBS.c.stop_requested, _JOBS.c.runtime)
    ).all()
    for job_id, status, stop_requested, stored in jobs:
        runtime = dict(stored or {})
        phase = phase_of(status, bool(stop_requested), runtime)
        reason = runtime.pop("interrupting", None)
        if reason and phase == "interrupting":
            runtime["interruption"] = reason
        # No stored spec keeps the S3 service's secret any more (it is added at launch,
        # from the server's configuration).
        if isinstance(runtime.get("specs"), list):
            runtime["specs"] = [_without_secret(spec) for spec in runtime["specs"]]
        connection.execute(
            _JOBS.update().where(_JOBS.c.id == job_id).values(phase=phase, runtime=runtime)
        )
    for pool_id, stored in connection.execute(sa.select(_POOLS.c.id, _POOLS.c.placement)).all():
        placement = dict(stored or {})
        if "released" in placement:
            released = bool(placement.pop("released"))
            connection.execute(
                _POOLS.update()
                .where(_POOLS.c.id == pool_id)
                .values(placement=placement, released=released)
            )


def downgrade() -> None:
    connection = op.get_bind()
    jobs = connection.execute(sa.select(_JOBS.c.id, _JOBS.c.phase, _JOBS.c.runtime)).all()
    for job_id, phase, stored in jobs:
        runtime = dict(stored or {})
        reason = runtime.pop("interruption", None)
        if reason and phase == "interrupting":
            runtime["interrupting"] = reason
        connection.execute(_JOBS.update().where(_JOBS.c.id == job_id).values(runtime=runtime))
    pools = connection.execute(
        sa.select(_POOLS.c.id, _POOLS.c.placement).where(_POOLS.c.released)
    ).all()
    for pool_id, stored in pools:
        placement = {**(stored or {}), "released": True}
        connection.execute(
            _POOLS.update().where(_POOLS.c.id == pool_id).values(placement=placement)
        )
    with op.batch_alter_table("warm_pools", schema=None) as batch_op:
        batch_op.drop_column("released")
    with op.batch_alter_table("training_jobs", schema=None) as batch_op:
        batch_op.drop_column("phase")
