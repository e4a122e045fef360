"""Training jobs on training plans in the database: checks, placement, counts (spec §3.4).

A plan's blocks hold their capacity on the calendar already (their leases), so a job
on a plan books nothing: it takes instances of the block that is usable now, and the
block's instances in use are the jobs placed on it plus the warm pools kept on it.
Jobs of one plan are served first come, first served: a job waits while an earlier
job of the same plan waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dockyard.domain import plan_jobs as rules
from dockyard.domain.job_runtime import JobPhase
from dockyard.domain.jobs import JobStatus
from dockyard.domain.placement import Placement
from dockyard.domain.plan_jobs import Block
from dockyard.domain.plans import PlanStatus
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import ultraserver_capacity
from dockyard.services.errors import ValidationException
from dockyard.store.scoped import owned
from dockyard.store.tables import (
    ClusterNode,
    ReservedCapacity,
    TrainingJob,
    TrainingPlan,
    WarmPool,
)

TRAINING_JOB_TARGET = "training-job"
RUNNING = (JobStatus.IN_PROGRESS.value, JobStatus.STOPPING.value)


def check_request(
    session: Session, account_id: str, region: str, resources: dict[str, Any]
) -> TrainingPlan:
    """CreateTrainingJob's checks of ResourceConfig.TrainingPlanArn; the plan if they pass."""
    arn = str(resources["TrainingPlanArn"])
    plan = session.scalar(owned(TrainingPlan, account_id, region).where(TrainingPlan.arn == arn))
    if plan is None:
        raise ValidationException(
            f"ResourceConfig.TrainingPlanArn {arn} is not a training plan of this account "
            f"in {region}"
        )
    if plan.target != TRAINING_JOB_TARGET:
        raise ValidationException(
            f"The training plan {plan.name} reserves capacity for {plan.target}, not for "
            "training jobs"
        )
    if resources.get("InstanceType") != plan.instance_type:
        raise ValidationException(
            f"The training plan {plan.name} reserves {plan.instance_type} instances; the job "
            f"asks for {resources.get('InstanceType')}"
        )
    blocks = plan_blocks(session, plan.id)
    largest = max((b.instance_count for b in blocks), default=0)
    wanted = int(resources.get("InstanceCount") or 0)
    if wanted > largest:
        raise ValidationException(
            f"The training plan {plan.name}'s reserved capacity holds {largest} instances; "
            f"the job asks for {wanted}"
        )
    if plan.status in (PlanStatus.EXPIRED.value, PlanStatus.FAILED.value):
        raise ValidationException(
            f"The training plan {plan.name} is {plan.status}; it has no capacity left to run on"
        )
    return plan


def plan_blocks(session: Session, plan_id: int) -> list[ReservedCapacity]:
    return list(
        session.scalars(
            select(ReservedCapacity)
            .where(ReservedCapacity.plan_id == plan_id)
            .order_by(ReservedCapacity.ordinal)
        )
    )


def as_block(row: ReservedCapacity) -> Block:
    return Block(
        id=row.id,
        start=row.start_time,
        end=row.end_time,
        instance_count=row.instance_count,
        availability_zone=row.availability_zone,
    )


def _count(job: TrainingJob) -> int:
    return int(job.spec["ResourceConfig"]["InstanceCount"])


def in_use(session: Session, plan_arn: str) -> dict[str, int]:
    """Instances in use per block of a plan: placed jobs and Available warm pools."""
    used: dict[str, int] = {}
    for job in _running(session, plan_arn):
        placed = job.runtime.placement
        block = placed.block if placed else None
        if block:
            used[block] = used.get(block, 0) + _count(job)
    kept = session.execute(
        select(WarmPool.placement, WarmPool.instance_count)
        .join(TrainingJob, TrainingJob.id == WarmPool.job_id)
        .where(
            WarmPool.status == WarmPoolStatus.AVAILABLE.value,
            TrainingJob.training_plan_arn == plan_arn,
        )
    )
    for stored, count in kept:
        placement = Placement.of(stored)
        block = placement.block if placement else None
        if block:
            used[block] = used.get(block, 0) + count
    # A plan bought for clusters: the nodes on its blocks.
    nodes = session.execute(
        select(ClusterNode.block_id, func.count())
        .join(ReservedCapacity, ReservedCapacity.id == ClusterNode.block_id)
        .join(TrainingPlan, TrainingPlan.id == ReservedCapacity.plan_id)
        .where(TrainingPlan.arn == plan_arn)
        .group_by(ClusterNode.block_id)
    )
    for block, count in nodes:
        if block is not None:
            used[block] = used.get(block, 0) + int(count)
    return used


def _running(session: Session, plan_arn: str) -> Iterable[TrainingJob]:
    return session.scalars(
        select(TrainingJob)
        .where(TrainingJob.training_plan_arn == plan_arn, TrainingJob.status.in_(RUNNING))
        .order_by(TrainingJob.id)
    )


def place(session: Session, job: TrainingJob, now: datetime) -> Placement | str | None:
    """Where the job starts now on its plan (a placement), why it waits (a message), or
    None when the plan has nothing left for it (it ended)."""
    plan = session.scalar(select(TrainingPlan).where(TrainingPlan.arn == job.training_plan_arn))
    if plan is None or plan.status in (PlanStatus.EXPIRED.value, PlanStatus.FAILED.value):
        return None
    rows = {row.id: row for row in plan_blocks(session, plan.id)}
    blocks = [as_block(row) for row in rows.values()]
    target = rules.upcoming(blocks, now)
    if target is None:
        return None
    wanted = _count(job)
    if not rules.usable(target, now):
        return rules.waiting_message(target, now, 0, wanted)
    earlier_waiting = any(
        other.id < job.id and other.runtime.phase is JobPhase.QUEUED
        for other in _running(session, str(job.training_plan_arn))
    )
    free = target.instance_count - in_use(session, str(job.training_plan_arn)).get(target.id, 0)
    if earlier_waiting or free < wanted:
        return rules.waiting_message(target, now, max(free, 0), wanted)
    chosen: tuple[str, ...] = ()
    if ultraserver_capacity.servers_of(session, target.id):
        # On UltraServers the job gets instances by id: healthy ones, within each
        # UltraServer's usable count (failures use the spares up first).
        picked = ultraserver_capacity.pick(
            session, target.id, plan.spare_per_ultraserver, wanted, but=job.id
        )
        if picked is None:
            return rules.waiting_message(target, now, 0, wanted)
        chosen = tuple(instance.id for instance in picked)
    pools = rows[target.id].pools.get("pools") or []
    return Placement(
        pool=str(pools[0][0]) if pools else "",
        az=target.availability_zone,
        block=target.id,
        work_ends=target.work_ends,
        instances=chosen,
    )


def lost_instances(session: Session, job: TrainingJob) -> set[str]:
    """Instances a running plan job was placed on that have failed since."""
    placement = job.runtime.placement
    if placement is None or not placement.instances:
        return set()
    return ultraserver_capacity.failed(session, set(placement.instances))


def block_ending(job: TrainingJob, now: datetime) -> bool:
    """Whether a running plan job's block has reached its last 30 minutes."""
    placement = job.runtime.placement
    return bool(placement and placement.work_ends and now >= placement.work_ends)
