"""The capacity calendar in the database: loading it for a search, booking leases on it.

The database is the truth: a booking takes the capacity lock first (one row every
booking transaction updates before it reads), so two buyers of the same capacity are
serialised and the second one's re-check sees the first one's leases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.orm import Session

from dockyard.domain.calendar import Calendar, Lease, Pool, PoolCalendar
from dockyard.store.tables import CapacityLock, CapacityPool, LeaseRow

POOLS = CapacityPool.__table__
LEASES = LeaseRow.__table__


def lock(session: Session) -> None:
    """Serialise with every other booking transaction until this one ends."""
    session.execute(
        update(CapacityLock)
        .where(CapacityLock.id == 1)
        .values(generation=CapacityLock.generation + 1)
    )


def load_calendar(
    connection: Connection | Session,
    now: datetime,
    *,
    region: str | None = None,
    instance_type: str | None = None,
    ultraserver_type: str | None = None,
    pool_keys: Iterable[str] | None = None,
) -> Calendar:
    """Pools matching the filters, each with its leases that have not ended by `now`."""
    query = select(POOLS)
    if region is not None:
        query = query.where(POOLS.c.region == region)
    if instance_type is not None:
        query = query.where(POOLS.c.instance_type == instance_type)
    if ultraserver_type is not None:
        query = query.where(POOLS.c.ultraserver_type == ultraserver_type)
    if pool_keys is not None:
        query = query.where(POOLS.c.key.in_(list(pool_keys)))
    pools = {
        row.key: Pool(
            key=row.key,
            instance_type=row.instance_type,
            availability_zone=row.availability_zone,
            capacity=row.capacity,
            ultraserver_id=row.ultraserver_id,
            ultraserver_type=row.ultraserver_type,
        )
        for row in connection.execute(query)
    }
    leases: dict[str, list[Lease]] = defaultdict(list)
    if pools:
        for row in connection.execute(
            select(
                LEASES.c.pool_key,
                LEASES.c.start_time,
                LEASES.c.end_time,
                LEASES.c.count.label("instances"),
            ).where(LEASES.c.pool_key.in_(list(pools)), LEASES.c.end_time > now)
        ):
            leases[row.pool_key].append(Lease(row.start_time, row.end_time, row.instances))
    return Calendar(_calendar(pool, leases[key]) for key, pool in sorted(pools.items()))


def _calendar(pool: Pool, leases: list[Lease]) -> PoolCalendar:
    # Stored leases were admitted when they were booked; if the pool has since lost
    # healthy instances they may exceed it now. Load them all, then apply the capacity,
    # so such a pool reads as full rather than failing to load.
    loaded = PoolCalendar(
        replace(pool, capacity=pool.capacity + sum(lease.count for lease in leases)), leases
    )
    loaded.set_capacity(pool.capacity)
    return loaded


def book(
    session: Session,
    pool_counts: Iterable[tuple[str, int]],
    start: datetime,
    end: datetime,
    *,
    kind: str,
    holder: str,
    account_id: str | None,
) -> None:
    for key, count in pool_counts:
        session.add(
            LeaseRow(
                pool_key=key,
                start_time=start,
                end_time=end,
                count=count,
                kind=kind,
                holder=holder,
                account_id=account_id,
            )
        )


def release(session: Session, holder: str) -> None:
    """Drop every lease a holder has (a block that ended, a plan whose payment failed)."""
    session.execute(delete(LeaseRow).where(LeaseRow.holder == holder))
