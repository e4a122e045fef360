"""Training-plan offerings (spec §3.1): which blocks of capacity can be offered, in what order.

SearchTrainingPlanOfferings answers with at most three offerings, each of one block or of
two blocks (a split), read off the capacity calendar. This module is that search, plus
the two checks buying relies on (`fits_now`, `book`). The rules themselves (request
validation, block ends, the offering shapes) live in `offering_rules`; `reference_search`
(in `offering_reference`) applies the same rules by brute force, as the oracle for the
property tests and the baseline of `bench/offering_search.py`.

Placement rules
---------------
t0 = max(now + 30 minutes, StartTimeAfter). A block starts at t0 or at any 11:30 UTC
after t0; a d-day block starting at s ends at block_end(s, d) = 11:30 UTC on (s's UTC
date + d days), so a block starting at t0 may be shorter or longer than d x 24 hours.
A plan's first block starts no later than now + 56 days (later blocks may); every block
ends no later than EndTimeBefore, when given.

A block of N instances fits in an AZ when the plain pool of (instance type, AZ) has N
instances free at every instant of the block. A block of K UltraServers fits in an AZ
when K UltraServers of the requested type there are entirely free (no lease at all) over
the whole block and have at least one healthy instance; the block takes the first K of
them by pool key, each with all its healthy instances.

Ranking (deterministic)
-----------------------
1. Contiguous offerings: for each AZ, the earliest start at which one block of the whole
   duration fits. These are ordered by (start, AZ name) and the first 3 are taken.
2. When fewer than 3 were found, splits fill the remaining places. A split is d1 + d2 =
   the requested days (each at least 1); block 1 starts as a first block may; block 2
   starts at an 11:30 UTC at or after block 1's end (a gap is allowed), in the same AZ
   for `hyperpod-cluster`, in any AZ for `training-job`. Splits are ordered by
   (end of block 2, start of block 1, |d1 - d2|, d1, AZ of block 1, AZ of block 2), and
   the first ones are taken; these six values determine a split's blocks, so no two
   offerings have identical blocks. One kind of split is never offered: block 2 starting
   exactly when block 1 ends on the very same pools (the AZ's instance pool, or the same
   UltraServers). That is one block cut in two; whenever splits are offered, every AZ's
   contiguous offering is offered too, and the one in that AZ starts no later and ends
   no later, in a single block.

So when a contiguous block fits anywhere, the first offering is contiguous; when none
does, every offering is a split, and splits come back whenever any split fits.

How it is fast
--------------
Contiguous offerings on plain pools are read off each pool's step function directly:
a try is one slice maximum over the block, and a failed try jumps to the first start
past the last over-used step inside it; zones are visited in AZ-name order, so once
three offerings are found, a later zone is only searched for strictly earlier starts.

Everything else uses per-day tables (`offering_runs`). A block is a whole number of
11:30-to-11:30 slots apart from the partial first day [t0, next 11:30), so per pool the
search needs the highest usage per slot and, per requested count, the free-run length
from each slot; both are derived on first use and kept until the pool changes
(`PoolCalendar.derived`). Splits are enumerated lazily in rank order: one stream per d1
(per d1 and AZ for `hyperpod-cluster`), each yielding its splits in rank order, merged
through a heap keyed first by a lower bound (block 1 at its earliest end, block 2 right
after it), so a stream is only worked out once its bound reaches the top of the heap.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from heapq import heapify, heappop, heapreplace

from dockyard.domain.calendar import Calendar, Lease, OverbookedError
from dockyard.domain.offering_reference import reference_search
from dockyard.domain.offering_rules import (
    INSTANCE_COUNTS,
    MAX_ADVANCE,
    MAX_DAYS,
    MAX_OFFERINGS,
    MIN_LEAD,
    PAYMENT_LEAD,
    TARGETS,
    BlockPlacement,
    Offering,
    OfferingRequest,
    OfferingRuleError,
    block_end,
    check_request,
    earliest_start,
)
from dockyard.domain.offering_runs import Runs, combine, slot_of, slot_start, slot_start_us
from dockyard.domain.offering_zones import (
    NO_START,
    PARTIAL,
    Grid,
    Server,
    Zone,
    make_grid,
    make_zones,
)

__all__ = [
    "INSTANCE_COUNTS",
    "MAX_ADVANCE",
    "MAX_DAYS",
    "MAX_OFFERINGS",
    "MIN_LEAD",
    "PAYMENT_LEAD",
    "TARGETS",
    "BlockPlacement",
    "Offering",
    "OfferingRequest",
    "OfferingRuleError",
    "block_end",
    "book",
    "check_request",
    "earliest_start",
    "fits_now",
    "reference_search",
    "search",
]

# Rank of a split: (end slot of block 2, start of block 1 in microseconds, |d1 - d2|,
# d1, AZ index of block 1, AZ index of block 2), AZ indexes following AZ names.
Key = tuple[int, int, int, int, int, int]
# A split found: (zone of block 1, its start code, zone of block 2, its start slot, d1, d2).
Split = tuple[Zone, int, Zone, int, int, int]
# A heap entry: (key, stream id, zone (same-zone streams), d1, the stream once started,
# the split the key belongs to; None while the key is only the stream's lower bound).
Entry = tuple[Key, int, Zone | None, int, Iterator[tuple[Key, Split]] | None, Split | None]


class _Search:
    """One search: the request on the slot grid, and the zones that could hold it."""

    def __init__(
        self, calendar: Calendar, request: OfferingRequest, grid: Grid, zones: list[Zone]
    ) -> None:
        self.calendar = calendar
        self.request = request
        self.grid = grid
        self.zones = zones
        # Per zone index, per d: the earliest start code of a d-day first block, its end.
        self.codes: list[list[int]] = []
        self.ends: list[list[int]] = []

    # ------------------------------------------------------------ contiguous offerings

    def contiguous(self) -> list[Offering]:
        """Each zone's earliest whole-duration block, best 3 by (start, AZ name).

        Zones advance together, one tried start at a time, through a heap keyed by
        (the next start to try, zone): a fit popped from it is that zone's earliest and
        ranks before anything any other zone can still offer, so the first three fits
        are the answer and no zone is searched past the third one's start.
        """
        grid, days = self.grid, self.grid.days
        tries: list[tuple[int, int, int, bool, Zone]] = []  # (start, zone, code, fits?, zone)
        for zone in self.zones:
            if zone.pool_calendar is None:
                code = self._earliest_by_runs(zone)  # UltraServers: one table query
                if code is not None:
                    tries.append((grid.start_us(code), zone.index, code, True, zone))
            else:
                code = PARTIAL if grid.partial else grid.j1
                tries.append((grid.start_us(code), zone.index, code, False, zone))
        heapify(tries)
        best: list[tuple[Zone, int]] = []
        while tries and len(best) < MAX_OFFERINGS:
            _, index, code, fits, zone = tries[0]
            if fits:
                best.append((zone, code))
                heappop(tries)
                continue
            following = self._try(zone, code)
            if following is None:
                heappop(tries)
            elif following == code:
                heapreplace(tries, (grid.start_us(code), index, code, True, zone))
            else:
                heapreplace(tries, (grid.start_us(following), index, following, False, zone))
        return [
            Offering((self._block(zone, code, days),), self.request.target) for zone, code in best
        ]

    def _earliest_by_runs(self, zone: Zone) -> int | None:
        grid, days = self.grid, self.grid.days
        if grid.partial and zone.partial >= grid.j0 + days - grid.j1:
            # From t0; if that ends too late, so does every later start.
            return PARTIAL if grid.j0 + days <= grid.eb else None
        slot = zone.runs.next_fit(grid.j1, days)
        if slot is None or slot > grid.jmax or slot + days > grid.eb:
            return None
        return slot

    def _try(self, zone: Zone, code: int) -> int | None:
        """Try a whole-duration block from `code` on a plain pool.

        Returns `code` when it fits, else the next start worth trying, or None when no
        later start can fit. Read off the step function, without slot tables: a try is
        one slice maximum over the block, and a failed one skips every start before the
        end of the last over-used step inside it, since those blocks overlap that step.
        """
        grid = self.grid
        if code != PARTIAL and code > grid.jmax:
            return None
        end = grid.start_slot(code) + grid.days
        if end > grid.eb:
            return None  # later starts end later still
        assert zone.pool_calendar is not None
        times, levels = zone.pool_calendar.step_function()
        spare = zone.pool_calendar.pool.capacity - zone.need
        last = bisect_left(times, slot_start_us(end))
        first = max(bisect_right(times, grid.start_us(code)) - 1, 0)
        if max(levels[first:last], default=0) <= spare:
            return code
        over = last - 1
        while levels[over] <= spare:
            over -= 1
        # The first slot starting at or after the over-used step's end.
        return max(slot_of(times[over + 1] - 1) + 1, grid.j1)

    # ------------------------------------------------------------ splits

    def splits(self, wanted: int) -> list[Offering]:
        """The `wanted` best splits, in rank order."""
        for zone in self.zones:
            codes, ends = self._first_starts(zone)
            self.codes.append(codes)
            self.ends.append(ends)
        heap = self._lower_bounds()
        heapify(heap)
        found: list[Split] = []
        while heap:
            _, stream, home, d1, items, split = heap[0]
            if items is None:
                # The stream's bound reached the top: work out its first split.
                items = self._same_zone(home, d1) if home is not None else self._cross_zone(d1)
            else:
                assert split is not None
                found.append(split)
                if len(found) == wanted:
                    break
            following = next(items, None)
            if following is None:
                heappop(heap)
            else:
                heapreplace(heap, (following[0], stream, home, d1, items, following[1]))
        return [
            Offering(
                (self._block(zone1, code1, d1), self._block(zone2, slot2, d2)),
                self.request.target,
            )
            for zone1, code1, zone2, slot2, d1, d2 in found
        ]

    def _lower_bounds(self) -> list[Entry]:
        """One entry per stream of splits, keyed by a bound no split of the stream beats.

        A stream is d1 (training-job: block 1 and block 2 in any zones) or d1 in one zone
        (hyperpod-cluster). Its best conceivable split has block 1 at its earliest end
        and block 2 right after it, so the bound is (that end + d2, that start, ...),
        with -1 standing for the zones it does not fix.
        """
        grid, days = self.grid, self.grid.days
        bounds: list[Entry] = []
        if self.request.target == "hyperpod-cluster":
            for zone in self.zones:
                codes, ends = self.codes[zone.index], self.ends[zone.index]
                for d1 in range(1, days):
                    if codes[d1] == NO_START:
                        continue
                    key = (ends[d1] + days - d1, grid.start_us(codes[d1]), abs(days - 2 * d1))
                    bound = (*key, d1, zone.index, -1)
                    bounds.append((bound, len(bounds), zone, d1, None, None))
        else:
            ends = list(map(min, *self.ends)) if len(self.ends) > 1 else self.ends[0]
            codes = list(map(min, *self.codes)) if len(self.codes) > 1 else self.codes[0]
            for d1 in range(1, days):
                if codes[d1] == NO_START:
                    continue
                key = (ends[d1] + days - d1, grid.start_us(codes[d1]), abs(days - 2 * d1))
                bounds.append(((*key, d1, -1, -1), len(bounds), None, d1, None, None))
        return bounds

    def _first_starts(self, zone: Zone) -> tuple[list[int], list[int]]:
        """Per d in 1..days: the earliest start code of a d-day first block in `zone`, its end."""
        grid, days = self.grid, self.grid.days
        codes = [NO_START] * (days + 1)
        ends = [NO_START] * (days + 1)
        covered = 0  # every d <= covered is settled
        if zone.partial >= 0:
            covered = min(days, zone.partial + grid.j1 - grid.j0)
            for d in range(1, min(covered, grid.eb - grid.j0) + 1):
                codes[d] = PARTIAL
                ends[d] = grid.j0 + d
        runs, slot = zone.runs, grid.j1
        while covered < days:
            found = runs.next_fit(slot, covered + 1)
            if found is None or found > grid.jmax or found + covered + 1 > grid.eb:
                break  # no later start helps: it would start too late or end too late
            reach = min(runs.at(found), days)
            for d in range(covered + 1, min(reach, grid.eb - found) + 1):
                codes[d] = found
                ends[d] = found + d
            covered = reach
            slot = found + 1
        return codes, ends

    def _next_start(self, zone: Zone, d1: int, code: int, end_by: int) -> int | None:
        """The next start after `code` of a d1-day first block in `zone` ending by `end_by`."""
        grid = self.grid
        found = zone.runs.next_fit(grid.j1 if code == PARTIAL else code + 1, d1)
        if found is None or found > min(grid.jmax, end_by - d1, grid.eb - d1):
            return None
        return found

    def _same_zone(self, zone: Zone, d1: int) -> Iterator[tuple[Key, Split]]:
        """The splits of d1 + d2 days with both blocks in `zone`, in rank order."""
        grid = self.grid
        d2 = grid.days - d1
        balance = abs(d1 - d2)
        first_code = self.codes[zone.index][d1]
        slot2: int | None = self.ends[zone.index][d1]
        while True:
            slot2 = zone.runs.next_fit(slot2, d2) if slot2 is not None else None
            if slot2 is None or slot2 + d2 > grid.eb:
                return
            code: int | None = first_code
            while code is not None:
                end1 = grid.start_slot(code) + d1
                if end1 > slot2:
                    break
                if end1 != slot2 or not self._cut(zone, code, d1, zone, slot2, d2):
                    key = (slot2 + d2, grid.start_us(code), balance, d1, zone.index, zone.index)
                    yield key, (zone, code, zone, slot2, d1, d2)
                code = self._next_start(zone, d1, code, slot2)
            slot2 += 1

    def _cross_zone(self, d1: int) -> Iterator[tuple[Key, Split]]:
        """The splits of d1 + d2 days, each block in any zone, in rank order."""
        grid, zones = self.grid, self.zones
        d2 = grid.days - d1
        balance = abs(d1 - d2)
        anywhere = self._anywhere()
        slot2: int | None = min(self.ends[zone.index][d1] for zone in zones)
        while True:
            slot2 = anywhere.next_fit(slot2, d2) if slot2 is not None else None
            if slot2 is None or slot2 + d2 > grid.eb:
                return
            seconds = [zone for zone in zones if zone.runs.at(slot2) >= d2]
            for code, zone1 in self._first_blocks(d1, slot2):
                end1 = grid.start_slot(code) + d1
                start1 = grid.start_us(code)
                for zone2 in seconds:
                    if (
                        end1 == slot2
                        and zone1 is zone2
                        and self._cut(zone1, code, d1, zone2, slot2, d2)
                    ):
                        continue
                    key = (slot2 + d2, start1, balance, d1, zone1.index, zone2.index)
                    yield key, (zone1, code, zone2, slot2, d1, d2)
            slot2 += 1

    def _first_blocks(self, d1: int, end_by: int) -> Iterator[tuple[int, Zone]]:
        """Every d1-day first block ending by `end_by`, any zone, by (start, zone)."""
        heads = [
            (self.codes[zone.index][d1], zone.index, zone)
            for zone in self.zones
            if self.ends[zone.index][d1] <= end_by
        ]
        heapify(heads)
        while heads:
            code, index, zone = heads[0]
            yield code, zone
            following = self._next_start(zone, d1, code, end_by)
            if following is None:
                heappop(heads)
            else:
                heapreplace(heads, (following, index, zone))

    def _anywhere(self) -> Runs:
        """Runs of slots where a block fits in at least one zone (training-job's block 2)."""
        request, zones = self.request, self.zones
        what = request.ultraserver_type or request.instance_type
        count = request.ultraserver_count or request.instance_count
        return self.calendar.derived(
            ("anywhere", what, count, request.instance_type),
            tuple(zone.stamp for zone in zones),
            lambda: combine([zone.runs for zone in zones], 1),
        )

    def _cut(self, zone1: Zone, code1: int, d1: int, zone2: Zone, slot2: int, d2: int) -> bool:
        """Whether back-to-back blocks in one zone use the very same pools (never offered)."""
        if zone1 is not zone2:
            return False
        if zone1.pool_key is not None:
            return True
        return self._choose(zone1, code1, d1) == self._choose(zone2, slot2, d2)

    # ------------------------------------------------------------ placements

    def _choose(self, zone: Zone, code: int, days: int) -> tuple[Server, ...]:
        """The UltraServers a block takes: the first ones by pool key free for all of it."""
        grid = self.grid
        if code == PARTIAL:
            full = grid.j0 + days - grid.j1
            free = [s for s in zone.servers if s.partial_free and s.runs.at(grid.j1) >= full]
        else:
            free = [s for s in zone.servers if s.runs.at(code) >= days]
        return tuple(free[: self.request.ultraserver_count or 0])

    def _block(self, zone: Zone, code: int, days: int) -> BlockPlacement:
        grid, request = self.grid, self.request
        start = grid.t0 if code == PARTIAL else slot_start(code)
        end = slot_start(grid.start_slot(code) + days)
        if zone.pool_key is not None:
            count = request.instance_count or 0
            return BlockPlacement(
                availability_zone=zone.name,
                instance_type=zone.instance_type,
                instance_count=count,
                start=start,
                end=end,
                pool_counts=((zone.pool_key, count),),
            )
        servers = self._choose(zone, code, days)
        return BlockPlacement(
            availability_zone=zone.name,
            instance_type=zone.instance_type,
            instance_count=sum(server.capacity for server in servers),
            start=start,
            end=end,
            pool_counts=tuple((server.key, server.capacity) for server in servers),
            ultraserver_type=request.ultraserver_type,
            ultraserver_count=len(servers),
        )


def search(calendar: Calendar, request: OfferingRequest) -> list[Offering]:
    """The offerings for `request` on `calendar`, best first (see the module docstring)."""
    check_request(request)
    grid = make_grid(request)
    zones = make_zones(calendar, request, grid)
    if not zones:
        return []
    run = _Search(calendar, request, grid, zones)
    offerings = run.contiguous()
    if len(offerings) < MAX_OFFERINGS and grid.days > 1:
        offerings += run.splits(MAX_OFFERINGS - len(offerings))
    return offerings


def fits_now(calendar: Calendar, offering: Offering) -> bool:
    """Whether every lease the offering would write still fits on the calendar."""
    return all(
        key in calendar and calendar[key].fits(block.start, block.end, count)
        for block in offering.blocks
        for key, count in block.pool_counts
    )


def book(calendar: Calendar, offering: Offering) -> list[tuple[str, Lease]]:
    """Write the offering's leases, all or none: OverbookedError if any no longer fits."""
    leases = [pair for block in offering.blocks for pair in block.leases()]
    missing = [key for key, _ in leases if key not in calendar]
    if missing:
        raise KeyError(f"offering uses pools not on the calendar: {', '.join(missing)}")
    added: list[tuple[str, Lease]] = []
    try:
        for key, lease in leases:
            calendar[key].add(lease)
            added.append((key, lease))
    except OverbookedError:
        for key, lease in reversed(added):
            calendar[key].remove(lease)
        raise
    return added
