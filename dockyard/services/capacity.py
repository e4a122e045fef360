"""The capacity calendar in the database: loading it for a search, booking leases on it.

The database is the truth: a booking takes the capacity lock first (one row every
booking transaction updates before it reads), so two buyers of the same capacity are
serialised and the second one's re-check sees the first one's leases.

Every write of a pool's leases bumps the pool's version (as a change of its capacity
does), so a `CalendarCache` can keep the calendar in memory and reload only the pools
whose version moved: a search reads the pool rows, not every lease.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.orm import Session

from dockyard.domain.calendar import Calendar, Lease, Pool, PoolCalendar
from dockyard.store.tables import CapacityLock, CapacityPool, LeaseRow

POOLS = CapacityPool.__table__
LEASES = LeaseRow.__table__
_LOCKED = "dockyard.capacity_locked"  # session.info: the transaction holding the lock
# session.info: (the transaction, the pools whose leases it changed so far)
_CHANGED = "dockyard.capacity_changed"


def lock(session: Session) -> None:
    """Serialise with every other booking transaction until this one ends.

    Taken once per transaction: placing, reserving and bumping versions each ask for it,
    and a second update of the lock row would only cost the hot path a statement."""
    transaction = session.get_transaction()  # the root one, held: never a reused id
    if transaction is not None and session.info.get(_LOCKED) is transaction:
        return
    session.execute(
        update(CapacityLock)
        .where(CapacityLock.id == 1)
        .values(generation=CapacityLock.generation + 1)
    )
    session.info[_LOCKED] = transaction


def changed(connection: Connection | Session) -> set[str]:
    """The pools whose leases this transaction has changed so far (none for a plain
    connection: only sessions write leases)."""
    if not isinstance(connection, Session):
        return set()
    transaction = connection.get_transaction()
    entry = connection.info.get(_CHANGED)
    if entry is None or entry[0] is not transaction:
        entry = (transaction, set())
        connection.info[_CHANGED] = entry
    keys: set[str] = entry[1]
    return keys


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
    rows = connection.execute(
        _pools_query(region, instance_type, ultraserver_type, pool_keys)
    ).all()
    pools = {row.key: _pool(row) for row in rows}
    leases = _leases(connection, list(pools), now)
    return Calendar(_calendar(pool, leases[key]) for key, pool in sorted(pools.items()))


def _pools_query(
    region: str | None,
    instance_type: str | None,
    ultraserver_type: str | None,
    pool_keys: Iterable[str] | None,
) -> Any:
    query = select(POOLS)
    if region is not None:
        query = query.where(POOLS.c.region == region)
    if instance_type is not None:
        query = query.where(POOLS.c.instance_type == instance_type)
    if ultraserver_type is not None:
        query = query.where(POOLS.c.ultraserver_type == ultraserver_type)
    if pool_keys is not None:
        query = query.where(POOLS.c.key.in_(list(pool_keys)))
    return query


def _pool(row: Any) -> Pool:
    return Pool(
        key=row.key,
        instance_type=row.instance_type,
        availability_zone=row.availability_zone,
        capacity=row.capacity,
        ultraserver_id=row.ultraserver_id,
        ultraserver_type=row.ultraserver_type,
    )


def _leases(
    connection: Connection | Session, keys: list[str], now: datetime
) -> dict[str, list[Lease]]:
    leases: dict[str, list[Lease]] = defaultdict(list)
    if keys:
        for row in connection.execute(
            select(
                LEASES.c.pool_key,
                LEASES.c.start_time,
                LEASES.c.end_time,
                LEASES.c.count.label("instances"),
            ).where(LEASES.c.pool_key.in_(keys), LEASES.c.end_time > now)
        ):
            leases[row.pool_key].append(Lease(row.start_time, row.end_time, row.instances))
    return leases


class CalendarCache:
    """The calendar kept in memory between reads, one server's, shared by its threads.

    Each pool's calendar is reloaded only when its row's version moved (every lease
    write and capacity change bumps it, in the writer's transaction), so a read costs
    one query of the pool rows plus the leases of the pools that changed. The versions
    are read before the leases: a lease committed in between makes the cached entry
    newer than its version says, and the next read loads it again, never older.

    For searches: what they answer is re-checked under the capacity lock when bought.
    Leases that end while cached stay until their pool next changes; they lie in the
    past, where no search looks.

    A transaction that has changed a pool's leases and reads the calendar again (a
    pass placing several jobs in one transaction) gets that pool loaded from its own
    session and never cached: what it sees is not committed, and may never be.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[int, PoolCalendar]] = {}
        self._calendars: dict[tuple[Any, ...], tuple[tuple[Any, ...], Calendar]] = {}

    def calendar(
        self,
        connection: Connection | Session,
        now: datetime,
        *,
        region: str | None = None,
        instance_type: str | None = None,
        ultraserver_type: str | None = None,
    ) -> Calendar:
        rows = connection.execute(
            _pools_query(region, instance_type, ultraserver_type, None)
        ).all()
        mine = changed(connection)
        with self._lock:
            cached = dict(self._pools)
        stale = [
            row
            for row in rows
            if row.key in mine or cached.get(row.key, (None,))[0] != row.version
        ]
        if stale:
            leases = _leases(connection, [row.key for row in stale], now)
            fresh = {
                row.key: (row.version, _calendar(_pool(row), leases[row.key])) for row in stale
            }
            with self._lock:
                self._pools.update((k, v) for k, v in fresh.items() if k not in mine)
            cached.update(fresh)
        if any(row.key in mine for row in rows):
            return Calendar(cached[key][1] for key in sorted(row.key for row in rows))
        stamp = tuple(sorted((row.key, row.version) for row in rows))
        filters = (region, instance_type, ultraserver_type)
        with self._lock:
            entry = self._calendars.get(filters)
        if entry is not None and entry[0] == stamp:
            return entry[1]
        # Calendar-wide derived tables are memoised on the Calendar: the same object is
        # answered while none of its pools changed.
        calendar = Calendar(cached[key][1] for key, _ in stamp)
        with self._lock:
            self._calendars[filters] = (stamp, calendar)
        return calendar


def _calendar(pool: Pool, leases: list[Lease]) -> PoolCalendar:
    # Stored leases were admitted when they were booked; if the pool has since lost
    # healthy instances they may exceed it now. Load them all, then apply the capacity,
    # so such a pool reads as full rather than failing to load.
    loaded = PoolCalendar(
        replace(pool, capacity=pool.capacity + sum(lease.count for lease in leases)), leases
    )
    loaded.set_capacity(pool.capacity)
    return loaded


class CalendarConflict(RuntimeError):
    """A reservation that would over-book an instant of a pool: a caller's bug, since
    every caller checks what fits first; refused rather than written."""


def reserve(
    session: Session,
    pool_counts: Iterable[tuple[str, int]],
    start: datetime,
    end: datetime,
    *,
    kind: str,
    holder: str,
    account_id: str | None,
    calendar: Calendar | None = None,
) -> None:
    """Hold `count` instances of each pool from `start` to `end`: the only writer of
    leases. Takes the capacity lock and checks the calendar invariant itself (no instant
    of a pool over-booked), against `calendar` when the caller read one under the lock
    in this transaction before writing any lease, else against the leases as they
    stand in this transaction."""
    pool_counts = list(pool_counts)
    keys = [key for key, _ in pool_counts]
    lock(session)
    if calendar is None:
        calendar = load_calendar(session, start, pool_keys=keys)
    for key, count in pool_counts:
        if key not in calendar or not calendar[key].fits(start, end, count):
            raise CalendarConflict(
                f"{count} instance(s) of pool {key} from {start.isoformat()} to "
                f"{end.isoformat()} would over-book it ({kind} {holder})"
            )
    _bump(session, keys)
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
    held = select(LEASES.c.pool_key).where(LEASES.c.holder == holder).distinct()
    _bump(session, list(session.scalars(held)))
    session.execute(delete(LeaseRow).where(LeaseRow.holder == holder))


def _bump(session: Session, keys: list[str]) -> None:
    """A change of these pools' leases: their calendars cached anywhere are stale.

    Under the capacity lock (a no-op for a booking, which holds it already), so every
    transaction takes the lock row before pool rows and none waits on another in a cycle.
    """
    if keys:
        lock(session)
        changed(session).update(keys)
        session.execute(
            update(CapacityPool)
            .where(CapacityPool.key.in_(sorted(set(keys))))
            .values(version=CapacityPool.version + 1)
        )


# ------------------------------------------------------------------ waiting jobs


def versions(
    session: Session | Connection, region: str | None = None, instance_type: str | None = None
) -> dict[tuple[str, str], int]:
    """(region, instance type) -> the sum of its plain pools' versions (of one type when
    given). Versions only grow, so the sum moves whenever any of those pools' leases or
    capacity change."""
    query = select(POOLS.c.region, POOLS.c.instance_type, func.sum(POOLS.c.version)).where(
        POOLS.c.ultraserver_id.is_(None)
    )
    if region is not None and instance_type is not None:
        query = query.where(POOLS.c.region == region, POOLS.c.instance_type == instance_type)
    rows = session.execute(query.group_by(POOLS.c.region, POOLS.c.instance_type))
    return {(region, kind): int(total or 0) for region, kind, total in rows}


@dataclass(frozen=True)
class WaitStamp:
    """What a job that could not be placed on demand saw (`training_jobs.waiting_for`):
    its type's pool-version sum, the next moment a lease on those pools ends (capacity
    frees then with no write at all), and what it asked for."""

    version: int
    until: datetime | None
    count: int
    seconds: int

    def text(self) -> str:
        until = self.until.isoformat() if self.until else ""
        return f"{self.version}|{until}|{self.count}|{self.seconds}"

    @classmethod
    def parse(cls, text: str | None) -> WaitStamp | None:
        try:
            version, until, count, seconds = (text or "").split("|")
            return cls(
                int(version),
                datetime.fromisoformat(until) if until else None,
                int(count),
                int(seconds),
            )
        except ValueError:
            return None  # not a stamp (or an older one): the job is simply tried

    def holds(self, version: int | None, now: datetime) -> bool:
        """Whether nothing it recorded has changed by `now`."""
        return version == self.version and (self.until is None or now < self.until)

    def covers(self, other: WaitStamp) -> bool:
        """Whether a job asking for `other` cannot fit where this one did not: as many
        instances or more, for as long or longer, of the same type."""
        return other.count >= self.count and other.seconds >= self.seconds


def wait_stamp(
    session: Session,
    calendar: Calendar,
    region: str,
    instance_type: str,
    now: datetime,
    count: int,
    seconds: int,
) -> WaitStamp:
    """What a job that could not be placed saw (see `WaitStamp`)."""
    ends = [
        lease.end
        for pool in calendar
        if pool.pool.ultraserver_id is None
        for lease in pool.leases()
        if lease.end > now
    ]
    version = versions(session, region, instance_type).get((region, instance_type), 0)
    return WaitStamp(version, min(ends) if ends else None, count, seconds)
