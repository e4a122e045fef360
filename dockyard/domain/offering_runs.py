"""Per-day "free run" tables: what makes offering search fast.

Blocks start at t0 or at 11:30 UTC, and end at 11:30 UTC. So apart from the first,
partial day [t0, next 11:30), a block is a whole number of *slots*, slot j being the
day [11:30 UTC of day j, 11:30 UTC of day j+1) (days counted from the epoch). Whether
`need` more instances fit in a pool over a block is then a question about the highest
usage in each slot, and whether a d-slot block fits from slot j is `run(j) >= d`, where
run(j) counts the consecutive slots from j that fit.

The slot grid does not depend on t0 or "now", so the tables are derived once per pool
version (`PoolCalendar.derived`) and serve every later search until the pool changes.
Usage is exact: a slot's maximum is taken over every step of the pool's step function
inside it, however leases of other kinds start and end within the day.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dockyard.domain.calendar import PoolCalendar, from_us

DAY_US = 86_400_000_000
SLOT_OFFSET_US = (11 * 3600 + 30 * 60) * 1_000_000  # 11:30 UTC
# A run length that stands for "free from here on": longer than any block can be.
FOREVER = 1 << 40


def slot_of(us: int) -> int:
    """The slot holding instant `us` (microseconds since the epoch)."""
    return (us - SLOT_OFFSET_US) // DAY_US


def slot_start_us(slot: int) -> int:
    return slot * DAY_US + SLOT_OFFSET_US


def slot_start(slot: int) -> datetime:
    return from_us(slot_start_us(slot))


class Runs:
    """run(j) for every slot j: how many slots from j on a block fits in, in a row.

    Stored for slots lo..hi only: after hi the pool is empty (every lease has ended), so
    the run is FOREVER; before lo it is empty too, so the run is lo - j + run(lo). With
    `ok` false nothing ever fits (the pool is smaller than the request).

    On one pool, a run shorter than wanted ends at a slot that does not fit, so
    `next_fit` jumps past it. Runs also describe a whole zone (`combine`): there at(j)
    is the longest block that fits from slot j on enough pools together, which need not
    shrink by one per slot, so `next_fit` walks next-greater pointers instead.
    """

    __slots__ = ("lo", "hi", "run", "nxt", "ok")

    def __init__(self, lo: int, run: list[int], ok: bool = True, combined: bool = False) -> None:
        self.lo = lo
        self.hi = lo + len(run) - 1
        self.run = run
        self.ok = ok
        self.nxt: list[int] | None = None
        if combined:
            # nxt[i]: the first index after i with a longer run (len(run): past hi).
            size = len(run)
            nxt = [size] * size
            stack: list[int] = []
            for index in range(size - 1, -1, -1):
                value = run[index]
                while stack and run[stack[-1]] <= value:
                    stack.pop()
                if stack:
                    nxt[index] = stack[-1]
                stack.append(index)
            self.nxt = nxt

    @classmethod
    def never(cls) -> Runs:
        return cls(0, [], ok=False)

    def at(self, slot: int) -> int:
        if not self.ok:
            return 0
        if slot > self.hi:
            return FOREVER
        if slot >= self.lo:
            return self.run[slot - self.lo]
        return self.lo - slot + self.run[0]

    def next_fit(self, slot: int, days: int) -> int | None:
        """The first slot >= `slot` from which `days` slots fit; None if there is none."""
        if not self.ok:
            return None
        if slot > self.hi:
            return slot
        lo = self.lo
        if slot < lo:
            if lo - slot + self.run[0] >= days:
                return slot
            slot = lo
        run, nxt, size = self.run, self.nxt, len(self.run)
        index = slot - lo
        if nxt is None:
            while index < size and run[index] < days:
                index += run[index] + 1
        else:
            while index < size and run[index] < days:
                index = nxt[index]
        return lo + index

    def values(self, lo: int, hi: int) -> list[int]:
        """at(j) for j in lo..hi (lo <= self.lo, hi >= self.hi), as one list."""
        if self.hi < self.lo:
            return [FOREVER] * (hi - lo + 1)
        first = self.run[0] + self.lo
        return (
            [first - slot for slot in range(lo, self.lo)] + self.run + [FOREVER] * (hi - self.hi)
        )


ALWAYS = Runs(0, [])


def day_maxima(calendar: PoolCalendar) -> tuple[int, list[int]]:
    """(lo, maxima): the highest usage in each slot lo, lo+1, ... while the pool has leases."""
    return calendar.derived(("day_maxima",), lambda: _day_maxima(calendar))


def _day_maxima(calendar: PoolCalendar) -> tuple[int, list[int]]:
    times, levels = calendar.step_function()
    if not times:
        return 0, []
    lo = slot_of(times[0])
    size = slot_of(times[-1] - 1) - lo + 1
    offset = SLOT_OFFSET_US + lo * DAY_US
    maxima = [0] * size
    # A slot's maximum is the highest level that starts inside it, or the level already
    # in force when it starts (`carried`, from the last step before it).
    current, carried = 0, 0
    # The last breakpoint only ends the last step (its level is 0).
    for at, level in zip(times[:-1], levels, strict=False):
        slot, into = divmod(at - offset, DAY_US)
        if slot != current:
            if carried:
                maxima[current + 1 : slot] = [carried] * (slot - current - 1)
                # Unless this step starts right at 11:30, the old level opens the slot.
                if into and maxima[slot] < carried:
                    maxima[slot] = carried
            current = slot
        if maxima[slot] < level:
            maxima[slot] = level
        carried = level
    maxima[current + 1 :] = [carried] * (size - current - 1)
    return lo, maxima


def pool_runs(calendar: PoolCalendar, need: int) -> Runs:
    """Runs of slots in which `need` more instances fit on this pool (cached per version)."""
    return calendar.derived(("runs", need), lambda: _pool_runs(calendar, need))


def _pool_runs(calendar: PoolCalendar, need: int) -> Runs:
    spare = calendar.pool.capacity - need
    if spare < 0:
        return Runs.never()
    lo, maxima = day_maxima(calendar)
    run = [0] * len(maxima)
    length = FOREVER  # after the last slot the pool is empty
    for index in range(len(maxima) - 1, -1, -1):
        length = length + 1 if maxima[index] <= spare else 0
        run[index] = length
    return Runs(lo, run)


def combine(members: Sequence[Runs], count: int) -> Runs:
    """Runs of a zone: at(j) is the longest block from j that `count` members fit together."""
    usable = [runs for runs in members if runs.ok]
    if len(usable) < count or count < 1:
        return Runs.never()
    spans = [runs for runs in usable if runs.hi >= runs.lo]
    if not spans:
        return ALWAYS
    lo = min(runs.lo for runs in spans)
    hi = max(runs.hi for runs in spans)
    columns = [runs.values(lo, hi) for runs in usable]
    if count == 1:
        combined = list(map(max, *columns)) if len(columns) > 1 else columns[0]
    else:
        combined = [
            sorted(column, reverse=True)[count - 1] for column in zip(*columns, strict=True)
        ]
    return Runs(lo, combined, combined=True)
