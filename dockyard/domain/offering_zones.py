"""Where a request can go: its times on the slot grid, and the zones that could hold it.

Offering search (`offerings`) works per zone: the plain pool of the requested instance
type in one AZ, or that AZ's UltraServers of the requested type. This module turns a
request into a `Grid` (t0, the 56-day limit and EndTimeBefore as slot numbers) and the
calendar into `Zone`s, each able to answer "how many slots fit from slot j" from the
per-day tables in `offering_runs`, derived only when a zone is first asked.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from dockyard.domain.calendar import Calendar, PoolCalendar, to_us
from dockyard.domain.offering_rules import OfferingRequest, earliest_start, latest_first_start
from dockyard.domain.offering_runs import (
    DAY_US,
    Runs,
    combine,
    pool_runs,
    slot_of,
    slot_start,
    slot_start_us,
)

# A block-1 start is coded as its slot, or PARTIAL for t0 when t0 is not at 11:30.
PARTIAL = -1
NO_START = 1 << 62
NO_LIMIT = 1 << 40


@dataclass(frozen=True, slots=True)
class Grid:
    """The request's times on the slot grid."""

    t0: datetime
    t0_us: int
    partial: bool  # t0 is not at 11:30: a block may start inside slot j1 - 1, at t0
    j0: int  # a d-day block starting at t0 ends where slot j0 + d starts (t0's date)
    j1: int  # the first slot starting at or after t0
    jmax: int  # the last slot a first block may start at (56 days)
    eb: int  # the last slot a block may end at (EndTimeBefore)
    days: int

    def start_us(self, code: int) -> int:
        return self.t0_us if code == PARTIAL else slot_start_us(code)

    def start_slot(self, code: int) -> int:
        """The slot s such that a d-day block starting at `code` ends where s + d starts."""
        return self.j0 if code == PARTIAL else code


def make_grid(request: OfferingRequest) -> Grid:
    """The request's t0, 56-day limit and EndTimeBefore as slot numbers."""
    t0 = earliest_start(request)
    t0_us = to_us(t0)
    here = slot_of(t0_us)
    partial = slot_start_us(here) != t0_us
    end_before = request.end_before
    return Grid(
        t0=t0,
        t0_us=t0_us,
        partial=partial,
        j0=t0_us // DAY_US,  # slot j starts on day j (since the epoch) at 11:30
        j1=here + 1 if partial else here,
        jmax=slot_of(to_us(latest_first_start(request))),
        eb=NO_LIMIT if end_before is None else slot_of(to_us(end_before)),
        days=request.days,
    )


class Server:
    """One UltraServer of a zone."""

    __slots__ = ("key", "capacity", "runs", "partial_free")

    def __init__(self, key: str, capacity: int, runs: Runs, partial_free: bool) -> None:
        self.key = key
        self.capacity = capacity
        self.runs = runs
        self.partial_free = partial_free  # nothing leased in [t0, the next 11:30)


class Zone:
    """One AZ's capacity for the request: a plain pool, or its UltraServers of the type.

    A plain pool's tables are derived only when asked for (`runs`, `partial`): its
    contiguous blocks are found on the step function directly, and only splits need them.
    """

    __slots__ = (
        "index",
        "name",
        "instance_type",
        "stamp",
        "pool_calendar",
        "need",
        "grid",
        "servers",
        "_runs",
        "_partial",
    )

    def __init__(
        self,
        name: str,
        instance_type: str,
        stamp: tuple[tuple[str, int], ...],
        grid: Grid,
        pool_calendar: PoolCalendar | None = None,
        need: int = 0,
        servers: tuple[Server, ...] = (),
        runs: Runs | None = None,
        partial: int | None = None,
    ) -> None:
        self.index = 0  # position by AZ name: ranks compare it instead of the name
        self.name = name
        self.instance_type = instance_type
        self.stamp = stamp  # (pool key, version) of the pools behind `runs`
        self.grid = grid
        self.pool_calendar = pool_calendar  # a plain pool's; None for UltraServers
        self.need = need
        self.servers = servers
        self._runs = runs
        self._partial = partial

    @property
    def pool_key(self) -> str | None:
        return None if self.pool_calendar is None else self.pool_calendar.pool.key

    @property
    def runs(self) -> Runs:
        """run(j): how many slots from slot j on a block fits in this zone."""
        if self._runs is None:
            assert self.pool_calendar is not None
            self._runs = pool_runs(self.pool_calendar, self.need)
        return self._runs

    @property
    def partial(self) -> int:
        """How many whole slots after t0's partial slot fit together with it.

        -1 when none do: the partial slot itself does not fit, or t0 is at 11:30 and
        there is no partial slot.
        """
        if self._partial is None:
            grid, pool_calendar = self.grid, self.pool_calendar
            assert pool_calendar is not None
            self._partial = -1
            if grid.partial:
                spare = pool_calendar.pool.capacity - self.need
                if partial_usage(pool_calendar, grid) <= spare:
                    self._partial = self.runs.at(grid.j1)
        return self._partial


def make_zones(calendar: Calendar, request: OfferingRequest, grid: Grid) -> list[Zone]:
    """The zones that could hold the request, by AZ name (`Zone.index` follows it)."""
    if request.ultraserver_type is None:
        zones = _instance_zones(calendar, request, grid)
    else:
        zones = _ultraserver_zones(calendar, request, grid)
    zones.sort(key=lambda zone: zone.name)
    for index, zone in enumerate(zones):
        zone.index = index
    return zones


def _instance_zones(calendar: Calendar, request: OfferingRequest, grid: Grid) -> list[Zone]:
    count = request.instance_count or 0
    zones = []
    for pool_calendar in calendar.calendars_of_type(request.instance_type or ""):
        pool = pool_calendar.pool
        if pool.is_ultraserver:
            continue  # an UltraServer type spelled like an instance type
        if pool.capacity < count:
            continue  # never fits, whatever is leased
        stamp = ((pool.key, pool_calendar.version),)
        zone = Zone(pool.availability_zone, pool.instance_type, stamp, grid, pool_calendar, count)
        zones.append(zone)
    return zones


def _ultraserver_zones(calendar: Calendar, request: OfferingRequest, grid: Grid) -> list[Zone]:
    wanted = request.ultraserver_count or 0
    by_zone: dict[str, list[PoolCalendar]] = {}
    for pool_calendar in calendar.calendars_of_type(request.ultraserver_type or ""):
        pool = pool_calendar.pool
        if pool.ultraserver_type != request.ultraserver_type or pool.capacity < 1:
            continue
        if request.instance_type is not None and pool.instance_type != request.instance_type:
            continue
        by_zone.setdefault(pool.availability_zone, []).append(pool_calendar)
    zones = []
    for name, members in by_zone.items():
        if len(members) < wanted:
            continue
        members.sort(key=lambda member: member.pool.key)
        servers = tuple(
            Server(
                member.pool.key,
                member.pool.capacity,
                # Whole UltraServers only: a slot fits when nothing at all is leased.
                pool_runs(member, member.pool.capacity),
                grid.partial and partial_usage(member, grid) == 0,
            )
            for member in members
        )
        stamp = tuple((member.pool.key, member.version) for member in members)
        runs = calendar.derived(
            ("ultraserver-zone", request.ultraserver_type, name, wanted),
            stamp,
            functools.partial(combine, [server.runs for server in servers], wanted),
        )
        if not runs.ok:
            continue
        reach = sorted(
            (server.runs.at(grid.j1) for server in servers if server.partial_free),
            reverse=True,
        )
        partial = reach[wanted - 1] if len(reach) >= wanted else -1
        instance_type = members[0].pool.instance_type
        zones.append(
            Zone(name, instance_type, stamp, grid, servers=servers, runs=runs, partial=partial)
        )
    return zones


def partial_usage(pool_calendar: PoolCalendar, grid: Grid) -> int:
    return pool_calendar.max_usage(grid.t0, slot_start(grid.j1))
