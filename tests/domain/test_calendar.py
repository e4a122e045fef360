"""The capacity calendar: leases never over-book a pool, and usage reads are exact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dockyard.domain.calendar import Calendar, Lease, OverbookedError, Pool, PoolCalendar

BASE = datetime(2026, 6, 1, 11, 30, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return BASE + timedelta(minutes=minutes)


def lease(start: int, end: int, count: int) -> Lease:
    return Lease(at(start), at(end), count)


def pool(capacity: int = 4, key: str = "ml.p5.48xlarge@us-east-1a") -> Pool:
    return Pool(key, "ml.p5.48xlarge", "us-east-1a", capacity)


def brute_usage(leases: list[Lease], instant: datetime) -> int:
    return sum(x.count for x in leases if x.start <= instant < x.end)


def brute_max(leases: list[Lease], start: datetime, end: datetime) -> int:
    # Usage only changes at lease starts, so the peak over [start, end) is at start or
    # at a lease start inside the interval.
    instants = [start] + [x.start for x in leases if start < x.start < end]
    return max(brute_usage(leases, instant) for instant in instants) if start < end else 0


# ---------------------------------------------------------------- unit tests


def test_intervals_are_half_open_so_back_to_back_leases_share_capacity() -> None:
    calendar = PoolCalendar(pool(capacity=2))
    calendar.add(lease(0, 60, 2))
    calendar.add(lease(60, 120, 2))
    assert calendar.usage_at(at(59)) == 2
    assert calendar.usage_at(at(60)) == 2
    assert calendar.usage_at(at(120)) == 0
    assert calendar.max_usage(at(0), at(120)) == 2
    assert calendar.fits(at(120), at(180), 2)
    assert not calendar.fits(at(119), at(180), 1)


def test_add_refuses_an_over_booking_and_changes_nothing() -> None:
    calendar = PoolCalendar(pool(capacity=3))
    calendar.add(lease(0, 100, 2))
    version = calendar.version
    with pytest.raises(OverbookedError, match="capacity of 3"):
        calendar.add(lease(50, 150, 2))
    assert calendar.version == version
    assert calendar.leases() == [lease(0, 100, 2)]
    calendar.add(lease(100, 150, 3))  # starts exactly when the first ends


def test_remove_gives_back_one_equal_lease() -> None:
    calendar = PoolCalendar(pool(capacity=4))
    calendar.add(lease(0, 10, 1))
    calendar.add(lease(0, 10, 1))
    calendar.remove(lease(0, 10, 1))
    assert calendar.leases() == [lease(0, 10, 1)]
    assert calendar.usage_at(at(5)) == 1
    calendar.remove(lease(0, 10, 1))
    assert calendar.leases() == []
    assert calendar.step_function() == ((), ())
    with pytest.raises(KeyError):
        calendar.remove(lease(0, 10, 1))


def test_lower_capacity_may_leave_a_pool_over_booked_and_fits_says_so() -> None:
    calendar = PoolCalendar(pool(capacity=4), [lease(0, 100, 3)])
    calendar.set_capacity(2)
    assert calendar.pool.capacity == 2
    assert not calendar.fits(at(0), at(10), 0)
    assert calendar.fits(at(100), at(200), 2)
    with pytest.raises(OverbookedError):
        calendar.add(lease(50, 150, 1))
    with pytest.raises(ValueError):
        calendar.set_capacity(-1)


def test_loading_leases_at_once_refuses_an_over_booked_set() -> None:
    with pytest.raises(OverbookedError, match="hold 5 instances"):
        PoolCalendar(pool(capacity=4), [lease(0, 100, 3), lease(99, 200, 2)])
    loaded = PoolCalendar(pool(capacity=4), [lease(0, 100, 3), lease(100, 200, 4)])
    assert loaded.max_usage(at(0), at(200)) == 4


def test_every_change_bumps_the_version_and_forgets_derived_values() -> None:
    calendar = PoolCalendar(pool())
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert calendar.derived("k", compute) == 1
    assert calendar.derived("k", compute) == 1
    versions = [calendar.version]
    calendar.add(lease(0, 10, 1))
    versions.append(calendar.version)
    assert calendar.derived("k", compute) == 2
    calendar.remove(lease(0, 10, 1))
    versions.append(calendar.version)
    calendar.set_capacity(5)
    versions.append(calendar.version)
    assert versions == sorted(set(versions))


@pytest.mark.parametrize(
    ("start", "end", "count"),
    [(at(10), at(10), 1), (at(10), at(5), 1), (at(0), at(10), 0)],
    ids=["empty", "backwards", "no-instances"],
)
def test_a_lease_is_a_real_interval_of_at_least_one_instance(
    start: datetime, end: datetime, count: int
) -> None:
    with pytest.raises(ValueError):
        Lease(start, end, count)


def test_lease_instants_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Lease(datetime(2026, 6, 1), datetime(2026, 6, 2), 1)


def test_calendar_keeps_one_pool_per_key_and_per_instance_type_and_zone() -> None:
    calendar = Calendar()
    calendar.add_pool(pool())
    with pytest.raises(ValueError, match="already on the calendar"):
        calendar.add_pool(pool())
    with pytest.raises(ValueError, match="already pool"):
        calendar.add_pool(pool(key="another key"))
    ultra = Pool("us:a", "ml.p6e-gb200.36xlarge", "us-east-1a", 18, "a", "ml.u-p6e-gb200x72")
    calendar.add_pool(ultra)
    with pytest.raises(ValueError, match="holds ml.p6e-gb200.36xlarge"):
        calendar.add_pool(
            Pool("us:b", "ml.p5.48xlarge", "us-east-1a", 18, "b", ultra.ultraserver_type)
        )
    assert "us:a" in calendar and "us:b" not in calendar
    assert [p.key for p in calendar.pools()] == [pool().key, "us:a"]
    assert calendar["us:a"].pool is ultra
    with pytest.raises(ValueError, match="both its id and its type"):
        Pool("us:c", "ml.p5.48xlarge", "us-east-1a", 1, ultraserver_id="c")


# ---------------------------------------------------------------- properties

MINUTES = st.integers(min_value=0, max_value=240)
operations = st.lists(
    st.tuples(st.booleans(), MINUTES, st.integers(min_value=1, max_value=120), st.integers(1, 4)),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(min_value=0, max_value=6), ops=operations, data=st.data())
def test_random_adds_and_removes_never_over_book_and_reads_are_exact(
    capacity: int, ops: list[tuple[bool, int, int, int]], data: st.DataObject
) -> None:
    calendar = PoolCalendar(pool(capacity))
    held: list[Lease] = []
    for is_add, start, length, count in ops:
        if not is_add and held:
            gone = held.pop(data.draw(st.integers(0, len(held) - 1)))
            calendar.remove(gone)
        else:
            new = lease(start, start + length, count)
            over = brute_max(held, new.start, new.end) + count > capacity
            if over:
                with pytest.raises(OverbookedError):
                    calendar.add(new)
            else:
                calendar.add(new)
                held.append(new)
        assert sorted(calendar.leases(), key=repr) == sorted(held, key=repr)
        breakpoints = {x.start for x in held} | {x.end for x in held}
        for instant in breakpoints:
            assert calendar.usage_at(instant) == brute_usage(held, instant) <= capacity
        first, last = sorted(data.draw(st.tuples(MINUTES, MINUTES)))
        assert calendar.max_usage(at(first), at(last)) == brute_max(held, at(first), at(last))
    # Whatever the history, the same leases loaded at once give the same calendar.
    assert PoolCalendar(pool(capacity), held).step_function() == calendar.step_function()


@given(
    st.lists(st.tuples(st.integers(0, 48), st.integers(1, 24), st.integers(1, 4)), max_size=8),
    st.integers(0, 60),
    st.integers(1, 30),
    st.integers(1, 4),
)
def test_fits_until_is_the_latest_fitting_end(
    leases: list[tuple[int, int, int]], start_h: int, length_h: int, count: int
) -> None:
    """fits_until answers the latest end at which fits() still holds."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    calendar = PoolCalendar(Pool("p", "ml.x", "az", 4))
    for at, hours, n in leases:
        lease = Lease(base + at * hour, base + (at + hours) * hour, n)
        if calendar.fits(lease.start, lease.end, n):
            calendar.add(lease)
    start, end = base + start_h * hour, base + (start_h + length_h) * hour
    until = calendar.fits_until(start, end, count)
    assert start <= until <= end
    if until > start:
        assert calendar.fits(start, until, count)
    if until < end:
        assert not calendar.fits(start, until + timedelta(microseconds=1), count)
