"""Instances of a plan's UltraServers, handed out by id (spec §3.6).

On an UltraServer block, work is placed on instances rather than on a count: a failed
instance is a particular one, and what ran on it moves to a healthy one - a spare while
the UltraServer has one. Jobs (their placement's instances), warm pools kept on the
block and cluster nodes all hold instances; each UltraServer gives out no more than its
usable count (`domain.ultraservers.usable`).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.domain import ultraservers
from dockyard.domain.instances import InstanceHealth
from dockyard.domain.jobs import JobStatus
from dockyard.domain.placement import Placement
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.store.tables import ClusterNode, Instance, ReservedCapacity, TrainingJob, WarmPool

HEALTHY = InstanceHealth.HEALTHY.value
RUNNING = (JobStatus.IN_PROGRESS.value, JobStatus.STOPPING.value)


def servers_of(session: Session, block_id: str) -> list[str]:
    """The UltraServers a block holds (none for a block of plain instances)."""
    row = session.get(ReservedCapacity, block_id)
    pools = (row.pools.get("pools") or []) if row is not None else []
    return [str(key).removeprefix("us:") for key, _ in pools if str(key).startswith("us:")]


def instances_of(session: Session, servers: list[str]) -> dict[str, list[Instance]]:
    """Each UltraServer's instances, in their positions' order."""
    found: dict[str, list[Instance]] = {server: [] for server in servers}
    for instance in session.scalars(
        select(Instance).where(Instance.ultraserver_id.in_(servers)).order_by(Instance.id)
    ):
        found[str(instance.ultraserver_id)].append(instance)
    return found


def taken(session: Session, block_id: str, but: int | None = None) -> set[str]:
    """Instances of the block held now: by running jobs (all but job `but`), warm pools
    kept on it, and cluster nodes (going ones too, until they are gone)."""
    held: set[str] = set()
    jobs = session.scalars(
        select(TrainingJob).where(  # only a plan's jobs run on a block
            TrainingJob.status.in_(RUNNING), TrainingJob.training_plan_arn.is_not(None)
        )
    )
    for job in jobs:
        placement = job.runtime.placement
        if job.id != but and placement is not None and placement.block == block_id:
            held.update(placement.instances)
    pools = session.scalars(
        select(WarmPool.placement).where(WarmPool.status == WarmPoolStatus.AVAILABLE.value)
    )
    for stored in pools:
        placement = Placement.of(stored)
        if placement is not None and placement.block == block_id:
            held.update(placement.instances)
    nodes = session.scalars(
        select(ClusterNode.fleet_instance_id).where(ClusterNode.block_id == block_id)
    )
    held.update(str(i) for i in nodes if i)
    return held


def pick(
    session: Session, block_id: str, spares: int, count: int, but: int | None = None
) -> list[Instance] | None:
    """`count` healthy free instances of the block's UltraServers, filling one before
    the next (one NVLink domain) and each within its usable count; None if there are
    not that many."""
    held = taken(session, block_id, but)
    chosen: list[Instance] = []
    for instances in instances_of(session, servers_of(session, block_id)).values():
        unhealthy = sum(1 for i in instances if i.health != HEALTHY)
        room = ultraservers.usable(len(instances), spares, unhealthy) - sum(
            1 for i in instances if i.id in held
        )
        for instance in instances:
            if len(chosen) == count or room <= 0:
                break
            if instance.health == HEALTHY and instance.id not in held:
                chosen.append(instance)
                room -= 1
    return chosen if len(chosen) == count else None


def failed(session: Session, instance_ids: set[str]) -> set[str]:
    """Which of these instances are no longer healthy."""
    if not instance_ids:
        return set()
    return set(
        session.scalars(
            select(Instance.id).where(Instance.id.in_(instance_ids), Instance.health != HEALTHY)
        )
    )


def holders(session: Session) -> dict[str, str]:
    """Instance id -> what holds it by id now (for the fleet view): a job or a node."""
    held: dict[str, str] = {}
    plan_jobs = select(TrainingJob).where(
        TrainingJob.status.in_(RUNNING), TrainingJob.training_plan_arn.is_not(None)
    )
    for job in session.scalars(plan_jobs):
        placement = job.runtime.placement
        for instance in placement.instances if placement is not None else ():
            held[instance] = f"training-job {job.arn}"
    for node in session.scalars(
        select(ClusterNode).where(ClusterNode.fleet_instance_id.is_not(None))
    ):
        held[str(node.fleet_instance_id)] = f"cluster-node {node.instance_id} ({node.status})"
    return held
