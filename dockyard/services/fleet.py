"""The fleet in the database: synchronised from the config on start, and shown to operators.

Instances are rows; each pool's capacity is the number of its healthy instances. A
pool's version is bumped whenever its capacity changes, so calendars cached from it
know they are stale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.domain import fleet as fleet_rules
from dockyard.domain.instances import HEALTH_TRANSITIONS, InstanceHealth
from dockyard.services import ultraserver_capacity
from dockyard.store.tables import CapacityPool, Instance, LeaseRow

HEALTHY = InstanceHealth.HEALTHY.value
# Taken out of service by an operator (maintenance, patching): not handed out, and the
# warm pools on it are terminated (spec §5.10).
MAINTENANCE = InstanceHealth.MAINTENANCE.value
# Failed (`dockyard fleet fail` injects a fault): not handed out; what ran on it failed.
UNHEALTHY = InstanceHealth.UNHEALTHY.value
HEALTH_STATES = tuple(h.value for h in InstanceHealth)


def set_health(
    session: Session,
    health: str,
    *,
    instance_ids: Iterable[str] = (),
    instance_type: str | None = None,
    availability_zone: str | None = None,
) -> list[Instance]:
    """Put instances (by id, or all of a type and/or AZ) in or out of service; answer them.

    Their pools' capacity follows at once, so nothing new is placed on them; what they
    hold now is the caller's to end (see control/ and services/warm_pools).
    """
    if health not in HEALTH_STATES:
        raise ValueError(f"health must be one of {', '.join(HEALTH_STATES)}; got {health!r}")
    ids = list(instance_ids)
    if not ids and instance_type is None and availability_zone is None:
        raise ValueError("name instances, or an instance type and/or availability zone")
    query = select(Instance).order_by(Instance.id)
    if ids:
        query = query.where(Instance.id.in_(ids))
    if instance_type is not None:
        query = query.where(Instance.instance_type == instance_type)
    if availability_zone is not None:
        query = query.where(Instance.availability_zone == availability_zone)
    rows = list(session.scalars(query))
    missing = sorted(set(ids) - {row.id for row in rows})
    if missing or not rows:
        raise ValueError(f"no such instance(s) in the fleet: {', '.join(missing) or 'none match'}")
    for row in rows:
        # An illegal move is a caller's mistake here (an operator's request): say so.
        if not HEALTH_TRANSITIONS.allowed(InstanceHealth(row.health), InstanceHealth(health)):
            raise ValueError(f"instance {row.id} cannot go from {row.health} to {health}")
        row.health = health
    session.flush()
    refresh_pools(session)
    return rows


def sync_fleet(session: Session, groups: Iterable[Mapping[str, Any]], now: datetime) -> int:
    """Make the instances table match the declared fleet; returns the number of instances."""
    declared = {i.id: i for i in fleet_rules.expand(groups)}
    existing = {row.id: row for row in session.scalars(select(Instance))}
    for instance_id, row in existing.items():
        if instance_id not in declared:
            session.delete(row)
    for instance_id, spec in declared.items():
        if instance_id not in existing:
            session.add(
                Instance(
                    id=instance_id,
                    instance_type=spec.instance_type,
                    availability_zone=spec.availability_zone,
                    region=spec.region,
                    ultraserver_id=spec.ultraserver_id,
                    ultraserver_type=spec.ultraserver_type,
                    pool_key=spec.pool_key,
                    health=HEALTHY,
                    created_at=now,
                )
            )
    session.flush()
    refresh_pools(session)
    return len(declared)


def refresh_pools(session: Session) -> None:
    """Recompute each pool's capacity from its healthy instances."""
    capacity: dict[str, int] = defaultdict(int)
    sample: dict[str, Instance] = {}
    for row in session.scalars(select(Instance)):
        sample.setdefault(row.pool_key, row)
        if row.health == HEALTHY:
            capacity[row.pool_key] += 1
    pools = {p.key: p for p in session.scalars(select(CapacityPool))}
    for key, row in sample.items():
        pool = pools.get(key)
        if pool is None:
            session.add(
                CapacityPool(
                    key=key,
                    instance_type=row.instance_type,
                    availability_zone=row.availability_zone,
                    region=row.region,
                    ultraserver_id=row.ultraserver_id,
                    ultraserver_type=row.ultraserver_type,
                    capacity=capacity[key],
                    version=0,
                )
            )
        elif pool.capacity != capacity[key]:
            pool.capacity = capacity[key]
            pool.version += 1
    for key, pool in pools.items():
        if key not in sample and pool.capacity != 0:
            # Instances gone from the config: the pool stays (leases may name it), empty.
            pool.capacity = 0
            pool.version += 1


def fleet_view(session: Session, now: datetime) -> list[dict[str, Any]]:
    """Every instance with what it is doing now.

    On an UltraServer, jobs and cluster nodes hold instances by id and are shown on them.
    Otherwise leases are counts, not instance ids, so the instances of a pool are handed to the
    leases active now in a fixed order (leases by start, instances by id) for display.
    """
    active: dict[str, list[LeaseRow]] = defaultdict(list)
    for row in session.scalars(
        select(LeaseRow)
        .where(LeaseRow.start_time <= now, LeaseRow.end_time > now)
        .order_by(LeaseRow.start_time, LeaseRow.id)
    ):
        active[row.pool_key].append(row)
    rows: list[dict[str, Any]] = []
    by_pool: dict[str, list[Instance]] = defaultdict(list)
    for instance in session.scalars(select(Instance).order_by(Instance.id)):
        by_pool[instance.pool_key].append(instance)
    pinned = ultraserver_capacity.holders(session)  # UltraServer instances held by id
    for key in sorted(by_pool):
        holders: list[LeaseRow] = []
        for held in active.get(key, []):
            holders += [held] * held.count
        position = 0
        for instance in by_pool[key]:
            lease: LeaseRow | None = None
            if instance.health == HEALTHY:
                lease = holders[position] if position < len(holders) else None
                position += 1
            rows.append(
                {
                    "id": instance.id,
                    "instance_type": instance.instance_type,
                    "availability_zone": instance.availability_zone,
                    "ultraserver_id": instance.ultraserver_id,
                    "health": instance.health,
                    "doing": (
                        pinned[instance.id]
                        if instance.id in pinned
                        else f"{lease.kind} {lease.holder}"
                        if lease
                        else ("idle" if instance.health == HEALTHY else "out of service")
                    ),
                    "until": lease.end_time.isoformat() if lease else None,
                }
            )
    return rows


def leases_between(session: Session, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Every lease on the calendar between start and end, with its pool's type and AZ
    (what the console's fleet picture draws), by pool and start."""
    rows = session.execute(
        select(LeaseRow, CapacityPool.instance_type, CapacityPool.availability_zone)
        .join(CapacityPool, CapacityPool.key == LeaseRow.pool_key)
        .where(LeaseRow.start_time < end, LeaseRow.end_time > start)
        .order_by(CapacityPool.instance_type, CapacityPool.availability_zone, LeaseRow.start_time)
    )
    return [
        {
            "pool": lease.pool_key,
            "instance_type": instance_type,
            "availability_zone": zone,
            "kind": lease.kind,
            "holder": lease.holder,
            "count": lease.count,
            "start": lease.start_time,
            "end": lease.end_time,
        }
        for lease, instance_type, zone in rows
    ]
