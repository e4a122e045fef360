"""The capacity calendar: every hold on capacity is a lease on the calendar of one pool.

Reserved blocks, on-demand jobs and warm pools all hold instances for a while. Writing
each of them down as a `Lease` (a half-open interval [start, end) times an instance
count) on the calendar of the pool it draws from gives offering search, buying,
backfill and warm-pool retention one structure to read and write, and one invariant to
keep: at no instant may a pool's leases add up to more than its capacity (its healthy
instance count).

A pool is either the plain instances of one (instance type, AZ), or one UltraServer
(a set of instances in one AZ that is only ever bought whole).

A `PoolCalendar` keeps its leases as a step function (sorted breakpoints, the usage
level after each), so `max_usage` over any interval is a binary search and a slice max.
It also memoises values derived from it (`derived`) until its next change, which is how
offering search reuses its per-day tables on an unchanged calendar.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

T = TypeVar("T")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def to_us(instant: datetime) -> int:
    """Microseconds since the epoch: exact for any datetime, and cheap to compare."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"calendar instants must be timezone-aware; got {instant!r}")
    return (instant - EPOCH) // MICROSECOND


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


class OverbookedError(ValueError):
    """A lease would make some instant of a pool hold more than its capacity."""


@dataclass(frozen=True)
class Lease:
    """`count` instances of one pool held over [start, end)."""

    start: datetime
    end: datetime
    count: int

    def __post_init__(self) -> None:
        start, end = to_us(self.start), to_us(self.end)
        if start >= end:
            raise ValueError(f"a lease must end after it starts; got {self.start} .. {self.end}")
        if self.count < 1:
            raise ValueError(f"a lease holds at least one instance; got {self.count}")
        # One spelling per instant, so equal leases print alike whatever zone they came in.
        object.__setattr__(self, "start", self.start.astimezone(UTC))
        object.__setattr__(self, "end", self.end.astimezone(UTC))


@dataclass(frozen=True)
class Pool:
    """Capacity that leases draw from: plain instances of one (type, AZ), or one UltraServer."""

    key: str
    instance_type: str
    availability_zone: str
    capacity: int
    ultraserver_id: str | None = None
    ultraserver_type: str | None = None

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError(f"pool {self.key}: capacity cannot be negative; got {self.capacity}")
        if (self.ultraserver_id is None) != (self.ultraserver_type is None):
            raise ValueError(
                f"pool {self.key}: an UltraServer pool needs both its id and its type"
            )

    @property
    def is_ultraserver(self) -> bool:
        return self.ultraserver_id is not None


class PoolCalendar:
    """The leases of one pool, kept so that no instant holds more than the pool's capacity."""

    def __init__(self, pool: Pool, leases: Iterable[Lease] = ()) -> None:
        self.pool = pool
        self.version = 0
        self._leases: Counter[Lease] = Counter()
        # Step function: usage is _levels[i] on [_times[i], _times[i+1]) and 0 before
        # _times[0]; the last level is always 0 because every lease ends. _refs counts
        # the lease ends at each breakpoint, so a breakpoint goes when its last lease does
        # and the step function stays canonical however leases come and go.
        self._times: list[int] = []
        self._levels: list[int] = []
        self._refs: dict[int, int] = {}
        self._derived: dict[Hashable, Any] = {}
        self._load(list(leases))

    def __repr__(self) -> str:
        return f"PoolCalendar({self.pool.key!r}, {sum(self._leases.values())} leases)"

    # ------------------------------------------------------------------ changes

    def add(self, lease: Lease) -> None:
        """Hold `lease.count` instances over the lease's interval, or raise OverbookedError."""
        start, end = to_us(lease.start), to_us(lease.end)
        usage = self._max_usage(start, end)
        if usage + lease.count > self.pool.capacity:
            raise OverbookedError(
                f"pool {self.pool.key}: {lease.count} more instance(s) over "
                f"{lease.start.isoformat()} .. {lease.end.isoformat()} would exceed its "
                f"capacity of {self.pool.capacity} ({usage} already held then)"
            )
        first = self._open_breakpoint(start)
        last = self._open_breakpoint(end)
        count = lease.count
        self._levels[first:last] = [level + count for level in self._levels[first:last]]
        self._leases[lease] += 1
        self._changed()

    def remove(self, lease: Lease) -> None:
        """Give back one lease equal to `lease`; KeyError if there is none."""
        if self._leases[lease] == 0:
            raise KeyError(f"pool {self.pool.key} holds no lease {lease}")
        self._leases[lease] -= 1
        if self._leases[lease] == 0:
            del self._leases[lease]
        start, end = to_us(lease.start), to_us(lease.end)
        first = bisect_left(self._times, start)
        last = bisect_left(self._times, end)
        count = lease.count
        self._levels[first:last] = [level - count for level in self._levels[first:last]]
        # The later breakpoint first, so the earlier one's index stays valid.
        self._close_breakpoint(last, end)
        self._close_breakpoint(first, start)
        self._changed()

    def set_capacity(self, capacity: int) -> None:
        """Follow the pool's health. Lowering it may leave it over-booked: `fits` then says so."""
        if capacity < 0:
            raise ValueError(f"pool {self.pool.key}: capacity cannot be negative; got {capacity}")
        self.pool = Pool(
            key=self.pool.key,
            instance_type=self.pool.instance_type,
            availability_zone=self.pool.availability_zone,
            capacity=capacity,
            ultraserver_id=self.pool.ultraserver_id,
            ultraserver_type=self.pool.ultraserver_type,
        )
        self._changed()

    # ------------------------------------------------------------------ reads

    def usage_at(self, instant: datetime) -> int:
        index = bisect_right(self._times, to_us(instant)) - 1
        return self._levels[index] if index >= 0 else 0

    def max_usage(self, start: datetime, end: datetime) -> int:
        """The most instances held at any instant of [start, end); 0 for an empty interval."""
        return self._max_usage(to_us(start), to_us(end))

    def fits(self, start: datetime, end: datetime, count: int) -> bool:
        """Whether `count` more instances can be held over [start, end)."""
        return self._max_usage(to_us(start), to_us(end)) + count <= self.pool.capacity

    def fits_until(self, start: datetime, end: datetime, count: int) -> datetime:
        """The latest instant in [start, end] up to which `count` more instances can be
        held from `start` on (`start` itself if not even an instant fits).

        A warm pool keeps its instances until its deadline or until capacity sold for
        later (a plan's block) needs them, whichever comes first.
        """
        s, e = to_us(start), to_us(end)
        ceiling = self.pool.capacity - count
        index = bisect_right(self._times, s) - 1
        if (self._levels[index] if index >= 0 else 0) > ceiling:
            return start
        index += 1
        while index < len(self._times) and self._times[index] < e:
            if self._levels[index] > ceiling:
                return from_us(self._times[index])
            index += 1
        return end

    def leases(self) -> list[Lease]:
        return sorted(self._leases.elements(), key=lambda x: (x.start, x.end, x.count))

    def step_function(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(breakpoints in microseconds since the epoch, usage from each breakpoint on).

        Usage is 0 before the first breakpoint and from the last one on. For code that
        derives tables from the whole calendar at once (offering search).
        """
        return self.derived(("step_function",), lambda: (tuple(self._times), tuple(self._levels)))

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, memoised under `key` until this calendar next changes."""
        try:
            value: T = self._derived[key]
        except KeyError:
            value = self._derived[key] = compute()
        return value

    def drop_derived(self) -> None:
        """Forget every memoised value (what a change does, without the change)."""
        self._derived.clear()

    # ------------------------------------------------------------------ internals

    def _load(self, leases: list[Lease]) -> None:
        # One sweep instead of one add per lease: loading a pool's calendar from storage
        # is then O(n log n). Some instant is over-booked at the end exactly when some
        # add in sequence would have refused, so this raises in the same cases.
        deltas: dict[int, int] = {}
        for lease in leases:
            start, end = to_us(lease.start), to_us(lease.end)
            deltas[start] = deltas.get(start, 0) + lease.count
            deltas[end] = deltas.get(end, 0) - lease.count
            self._refs[start] = self._refs.get(start, 0) + 1
            self._refs[end] = self._refs.get(end, 0) + 1
        self._times = sorted(deltas)
        level = 0
        for at in self._times:
            level += deltas[at]
            self._levels.append(level)
        peak = max(self._levels, default=0)
        if peak > self.pool.capacity:
            at = self._times[self._levels.index(peak)]
            raise OverbookedError(
                f"pool {self.pool.key}: its leases hold {peak} instances at "
                f"{from_us(at).isoformat()}, over its capacity of {self.pool.capacity}"
            )
        self._leases.update(leases)

    def _changed(self) -> None:
        self.version += 1
        self._derived.clear()

    def _max_usage(self, start: int, end: int) -> int:
        if start >= end:
            return 0
        times, levels = self._times, self._levels
        first = bisect_right(times, start) - 1
        last = bisect_left(times, end)
        if first < 0:
            # [start, first breakpoint) is unused, so 0 is part of the maximum.
            return max(levels[:last], default=0)
        return max(levels[first:last])

    def _open_breakpoint(self, at: int) -> int:
        times = self._times
        index = bisect_left(times, at)
        if index < len(times) and times[index] == at:
            self._refs[at] += 1
            return index
        times.insert(index, at)
        self._levels.insert(index, self._levels[index - 1] if index else 0)
        self._refs[at] = 1
        return index

    def _close_breakpoint(self, index: int, at: int) -> None:
        refs = self._refs[at] - 1
        if refs:
            self._refs[at] = refs
            return
        # No lease starts or ends here any more, so the level does not change here either.
        del self._refs[at]
        del self._times[index]
        del self._levels[index]


class Calendar:
    """The pool calendars of one region, by pool key."""

    def __init__(self, calendars: Iterable[PoolCalendar] = ()) -> None:
        self._calendars: dict[str, PoolCalendar] = {}
        self._plain: dict[tuple[str, str], str] = {}
        self._ultraserver_instance_types: dict[str, str] = {}
        self._by_type: dict[str, list[PoolCalendar]] = {}
        self._derived: dict[Hashable, tuple[Hashable, Any]] = {}
        for calendar in calendars:
            self._admit(calendar)

    def add_pool(self, pool: Pool, leases: Iterable[Lease] = ()) -> PoolCalendar:
        calendar = PoolCalendar(pool, leases)
        self._admit(calendar)
        return calendar

    def __getitem__(self, key: str) -> PoolCalendar:
        return self._calendars[key]

    def __contains__(self, key: object) -> bool:
        return key in self._calendars

    def __iter__(self) -> Iterator[PoolCalendar]:
        return iter(self._calendars.values())

    def __len__(self) -> int:
        return len(self._calendars)

    def pools(self) -> list[Pool]:
        return [calendar.pool for calendar in self._calendars.values()]

    def calendars_of_type(self, name: str) -> list[PoolCalendar]:
        """Plain pools of instance type `name`, or UltraServers of UltraServer type `name`."""
        return list(self._by_type.get(name, ()))

    def derived(self, key: Hashable, stamp: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, memoised under `key` while `stamp` stays equal.

        For values derived from several pools: the stamp is what they were derived from
        (their keys and versions), so one entry per key is kept and a change replaces it.
        """
        entry = self._derived.get(key)
        if entry is not None and entry[0] == stamp:
            value: T = entry[1]
            return value
        value = compute()
        self._derived[key] = (stamp, value)
        return value

    def drop_derived(self) -> None:
        """Forget every memoised value, here and on every pool (cold-cache measurements)."""
        self._derived.clear()
        for calendar in self._calendars.values():
            calendar.drop_derived()

    def _admit(self, calendar: PoolCalendar) -> None:
        pool = calendar.pool
        if pool.key in self._calendars:
            raise ValueError(f"pool {pool.key} is already on the calendar")
        if pool.ultraserver_type is None:
            # Plain instances of one (type, AZ) are one pool, so a block there is one lease.
            place = (pool.instance_type, pool.availability_zone)
            if place in self._plain:
                raise ValueError(
                    f"pool {pool.key}: {place[0]} in {place[1]} is already "
                    f"pool {self._plain[place]}"
                )
            self._plain[place] = pool.key
        else:
            # A block of UltraServers reports one instance type, so a type has one.
            known = self._ultraserver_instance_types.setdefault(
                pool.ultraserver_type, pool.instance_type
            )
            if known != pool.instance_type:
                raise ValueError(
                    f"pool {pool.key}: UltraServer type {pool.ultraserver_type} holds {known}, "
                    f"not {pool.instance_type}"
                )
        self._calendars[pool.key] = calendar
        self._by_type.setdefault(pool.ultraserver_type or pool.instance_type, []).append(calendar)
