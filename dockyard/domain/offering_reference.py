"""Offering search by brute force: the oracle that the fast search is checked against.

`reference_search` applies the rules and the ranking documented in
`dockyard.domain.offerings` as literally as it can: it tries every candidate start in
every AZ, asks the pool calendar for the exact peak usage of each interval, and sorts
what fits by the documented keys. It shares no tables, caches or slot arithmetic with
`offerings.search`, so the property tests that compare the two (and the benchmark that
times them) compare two independent readings of the same rules.

One concession keeps it usable as a benchmark baseline: splits are enumerated by the
end of their second block, the first ranking key, one day at a time, and the
enumeration stops at the first day that completes the list. That is still exhaustive
for the answer: every split ending on a later day ranks after every split found.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from dockyard.domain.calendar import Calendar, PoolCalendar
from dockyard.domain.offering_rules import (
    DAY,
    MAX_OFFERINGS,
    BlockPlacement,
    Offering,
    OfferingRequest,
    block_end,
    check_request,
    contiguous_rank,
    earliest_start,
    is_cut_block,
    latest_first_start,
    next_block_end_time,
    split_rank,
)


def reference_search(calendar: Calendar, request: OfferingRequest) -> list[Offering]:
    """Same answer as `offerings.search`, found the slow, obvious way."""
    check_request(request)
    zones = _zones(calendar, request)
    days = request.days
    t0 = earliest_start(request)
    first_starts = [t0, *_eleven_thirties(next_block_end_time(t0), latest_first_start(request))]

    def place(zone: str, start: datetime, days: int) -> BlockPlacement | None:
        return _place(request, zone, zones[zone], start, block_end(start, days))

    contiguous = []
    for zone in sorted(zones):
        for start in first_starts:
            block = place(zone, start, days)
            if block is not None:
                contiguous.append(Offering((block,), request.target))
                break  # only each AZ's earliest
    offerings = sorted(contiguous, key=contiguous_rank)[:MAX_OFFERINGS]
    wanted = MAX_OFFERINGS - len(offerings)
    if wanted <= 0 or days < 2:
        return offerings

    # Every first block that fits, by its number of days.
    first_blocks: dict[int, list[BlockPlacement]] = {}
    for d1 in range(1, days):
        first_blocks[d1] = [
            block
            for start in first_starts
            for zone in sorted(zones)
            if (block := place(zone, start, d1)) is not None
        ]
    if not any(first_blocks.values()):
        return offerings
    # Past `settled` every pool is empty and no first block is still running, so each
    # later day ends at least one split that fits (if any ever does): a few days past it
    # the list is full or nothing ever fits.
    leases_end = max(
        (lease.end for pools in zones.values() for pool in pools for lease in pool.leases()),
        default=t0,
    )
    settled = max(leases_end, block_end(first_starts[-1], days))
    last_end = next_block_end_time(settled) + (days + MAX_OFFERINGS + 1) * DAY
    if request.end_before is not None:
        last_end = min(last_end, request.end_before)

    splits: list[Offering] = []
    for end2 in _eleven_thirties(next_block_end_time(t0), last_end):
        ending_here = []
        for d1 in range(1, days):
            d2 = days - d1
            start2 = end2 - timedelta(days=d2)
            if start2 <= t0:
                continue  # block 2 starts at or after block 1's end, which is after t0
            for zone2 in sorted(zones):
                second = place(zone2, start2, d2)
                if second is None:
                    continue
                for first in first_blocks[d1]:
                    if first.end > start2:
                        continue
                    if request.target == "hyperpod-cluster" and zone2 != first.availability_zone:
                        continue
                    if is_cut_block(first, second):
                        continue
                    ending_here.append(Offering((first, second), request.target))
        splits += sorted(ending_here, key=split_rank)[: wanted - len(splits)]
        if len(splits) == wanted:
            break
    return offerings + splits


def _zones(calendar: Calendar, request: OfferingRequest) -> dict[str, list[PoolCalendar]]:
    """The pools that may hold the request, by AZ (UltraServers sorted by pool key)."""
    zones: dict[str, list[PoolCalendar]] = {}
    for pool_calendar in calendar:
        pool = pool_calendar.pool
        if request.ultraserver_type is None:
            eligible = (
                pool.ultraserver_type is None and pool.instance_type == request.instance_type
            )
        else:
            eligible = pool.ultraserver_type == request.ultraserver_type and (
                request.instance_type is None or pool.instance_type == request.instance_type
            )
        if eligible:
            zones.setdefault(pool.availability_zone, []).append(pool_calendar)
    for pools in zones.values():
        pools.sort(key=lambda pool_calendar: pool_calendar.pool.key)
    return zones


def _place(
    request: OfferingRequest,
    zone: str,
    pools: list[PoolCalendar],
    start: datetime,
    end: datetime,
) -> BlockPlacement | None:
    if request.end_before is not None and end > request.end_before:
        return None
    if request.ultraserver_type is None:
        (pool_calendar,) = pools
        count = request.instance_count or 0
        if pool_calendar.max_usage(start, end) + count > pool_calendar.pool.capacity:
            return None
        return BlockPlacement(
            availability_zone=zone,
            instance_type=pool_calendar.pool.instance_type,
            instance_count=count,
            start=start,
            end=end,
            pool_counts=((pool_calendar.pool.key, count),),
        )
    wanted = request.ultraserver_count or 0
    free = [
        pool_calendar.pool
        for pool_calendar in pools
        if pool_calendar.pool.capacity >= 1 and pool_calendar.max_usage(start, end) == 0
    ][:wanted]
    if len(free) < wanted:
        return None
    return BlockPlacement(
        availability_zone=zone,
        instance_type=free[0].instance_type,
        instance_count=sum(pool.capacity for pool in free),
        start=start,
        end=end,
        pool_counts=tuple((pool.key, pool.capacity) for pool in free),
        ultraserver_type=request.ultraserver_type,
        ultraserver_count=wanted,
    )


def _eleven_thirties(first: datetime, last: datetime) -> Iterator[datetime]:
    """11:30 UTC on every day from `first` (itself an 11:30) up to `last` included."""
    instant = first
    while instant <= last:
        yield instant
        instant += DAY
