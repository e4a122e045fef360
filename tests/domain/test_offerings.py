"""Training-plan offerings: the §3.1 rules, the documented ranking, and search == reference."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import replace
from datetime import UTC, datetime, time, timedelta, timezone

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dockyard.domain.calendar import Calendar, Lease, OverbookedError, Pool
from dockyard.domain.offerings import (
    INSTANCE_COUNTS,
    MAX_ADVANCE,
    TARGETS,
    Offering,
    OfferingRequest,
    OfferingRuleError,
    block_end,
    book,
    check_request,
    earliest_start,
    fits_now,
    reference_search,
    search,
)

NOW = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)  # so t0 = 09:30, before 11:30
P5 = "ml.p5.48xlarge"
GB200 = "ml.p6e-gb200.36xlarge"
ULTRA = "ml.u-p6e-gb200x72"
DAY = timedelta(days=1)


def day(n: int, hour: int = 11, minute: int = 30) -> datetime:
    """`hour:minute` UTC on NOW's date plus n days."""
    return datetime.combine(NOW.date() + timedelta(days=n), time(hour, minute), UTC)


def plain(zone: str, capacity: int, instance_type: str = P5) -> Pool:
    return Pool(f"{instance_type}@{zone}", instance_type, zone, capacity)


def ultraserver(zone: str, name: str, capacity: int = 18) -> Pool:
    return Pool(f"us:{name}", GB200, zone, capacity, name, ULTRA)


def instances(
    count: int, days: int, target: str = "training-job", **extra: object
) -> OfferingRequest:
    return OfferingRequest(
        now=NOW,
        duration_hours=24 * days,
        target=target,
        instance_type=P5,
        instance_count=count,
        **extra,  # type: ignore[arg-type]
    )


def blocks(offering: Offering) -> list[tuple[str, datetime, datetime]]:
    return [(b.availability_zone, b.start, b.end) for b in offering.blocks]


# ---------------------------------------------------------------- §3.1 rules, one each

RULE_BREAKS = {
    "instance-count": (dict(instance_count=3), "InstanceCount must be one of 1, 2, 4"),
    "neither": (
        dict(instance_type=None, instance_count=None),
        "either InstanceType and InstanceCount, or UltraServerType",
    ),
    "both": (dict(ultraserver_type=ULTRA, ultraserver_count=1), "not both"),
    "count-without-type": (dict(instance_type=None), "InstanceType is required"),
    "type-without-count": (dict(instance_count=None), "InstanceCount is required"),
    "ultraserver-count-without-type": (
        dict(instance_type=None, instance_count=None, ultraserver_count=1),
        "UltraServerType is required",
    ),
    "ultraserver-type-without-count": (
        dict(instance_type=None, instance_count=None, ultraserver_type=ULTRA),
        "UltraServerCount is required",
    ),
    "ultraserver-count": (
        dict(instance_count=None, ultraserver_type=ULTRA, ultraserver_count=0),
        "UltraServerCount must be at least 1",
    ),
    "duration-not-whole-days": (dict(duration_hours=30), "DurationHours must be a multiple of 24"),
    "duration-zero": (dict(duration_hours=0), "DurationHours must be a multiple of 24"),
    "duration-over-182-days": (dict(duration_hours=4392), "between 24 and 4368"),
    "target": (dict(target="endpoint"), "TargetResources must be one of"),
    "start-over-56-days": (
        dict(start_after=NOW + MAX_ADVANCE + timedelta(seconds=1)),
        "StartTimeAfter must be at most 56 days from now",
    ),
    "end-not-after-start": (
        dict(end_before=NOW + timedelta(minutes=30)),
        "EndTimeBefore must be after the earliest possible start",
    ),
    "window-too-short": (
        # t0 09:30 on day 0: two days end at 11:30 on day 2, a minute too late.
        dict(duration_hours=48, end_before=day(2, 11, 29)),
        "EndTimeBefore leaves no room for 2 day",
    ),
}


@pytest.mark.parametrize("name", list(RULE_BREAKS))
def test_each_rule_broken_is_refused_with_a_message_naming_it(name: str) -> None:
    changes, message = RULE_BREAKS[name]
    request = replace(instances(8, 1), **changes)  # type: ignore[arg-type]
    with pytest.raises(OfferingRuleError, match=message):
        check_request(request)
    with pytest.raises(OfferingRuleError, match=message):
        search(Calendar(), request)
    with pytest.raises(OfferingRuleError, match=message):
        reference_search(Calendar(), request)


def test_the_error_message_carries_the_value_given() -> None:
    with pytest.raises(OfferingRuleError) as caught:
        check_request(replace(instances(8, 1), duration_hours=30))
    assert str(caught.value) == (
        "DurationHours must be a multiple of 24 between 24 and 4368 (whole days, 1 to 182); got 30"
    )


@pytest.mark.parametrize(
    "changes",
    [
        dict(instance_count=None, ultraserver_type=ULTRA, ultraserver_count=2),  # + InstanceType
        dict(start_after=NOW + MAX_ADVANCE),
        dict(duration_hours=48, end_before=day(2)),  # exactly long enough
        dict(duration_hours=4368),
        dict(target="hyperpod-cluster"),
    ],
    ids=["ultraserver-with-instance-type", "start-at-56-days", "exact-window", "182-days", "hp"],
)
def test_requests_on_the_edge_of_the_rules_are_accepted(changes: dict[str, object]) -> None:
    check_request(replace(instances(8, 1), **changes))  # type: ignore[arg-type]


def test_naive_instants_are_a_bug_not_input() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        check_request(instances(8, 1, start_after=datetime(2026, 6, 2)))


# ---------------------------------------------------------------- times


@pytest.mark.parametrize(
    ("start", "length"),
    [
        (day(0, 11, 30), timedelta(hours=48)),
        (day(0, 14, 7), timedelta(hours=48) - timedelta(hours=2, minutes=37)),
        (day(0, 3, 0), timedelta(hours=48) + timedelta(hours=8, minutes=30)),
    ],
    ids=["11:30", "14:07", "03:00"],
)
def test_every_block_ends_at_1130_utc_on_its_last_day(start: datetime, length: timedelta) -> None:
    assert block_end(start, 2) == start + length
    assert block_end(start, 2).time() == time(11, 30)


def test_block_end_counts_days_from_the_utc_date() -> None:
    # 21:00 on day 0 in UTC-8 is 05:00 on day 1 in UTC.
    start = datetime.combine(NOW.date(), time(21), timezone(timedelta(hours=-8)))
    assert block_end(start, 1) == day(2)


def test_earliest_start_is_30_minutes_from_now_or_start_after_if_later() -> None:
    assert earliest_start(instances(1, 1)) == NOW + timedelta(minutes=30)
    assert earliest_start(instances(1, 1, start_after=NOW)) == NOW + timedelta(minutes=30)
    assert earliest_start(instances(1, 1, start_after=day(3, 2))) == day(3, 2)


def test_real_lengths_are_reported_as_hours_and_minutes() -> None:
    calendar = Calendar([])
    calendar.add_pool(plain("us-east-1a", 8))
    request = instances(8, 2, start_after=day(0, 14, 7))
    (first, *_) = search(calendar, request)
    assert first.blocks[0].duration_hours_minutes == (45, 23)
    assert first.duration_hours_minutes == (45, 23)
    assert first.blocks[0].reserved_capacity_type == "Instance"


def test_a_block_from_1130_lasts_whole_days_and_a_split_reports_its_blocks_total() -> None:
    calendar = Calendar()
    calendar.add_pool(plain("us-east-1a", 8)).add(Lease(day(1), day(2), 1))
    request = replace(instances(8, 3, "hyperpod-cluster"), now=day(0, 11, 0))  # t0 = 11:30
    whole, split, later = search(calendar, request)
    assert blocks(whole) == [("us-east-1a", day(2), day(5))]
    assert whole.duration_hours_minutes == (72, 0)
    # Then splits by their end; halves of the day-2 block back to back are not offered.
    assert blocks(split) == [("us-east-1a", day(0), day(1)), ("us-east-1a", day(2), day(4))]
    assert blocks(later) == [("us-east-1a", day(0), day(1)), ("us-east-1a", day(3), day(5))]
    assert [b.duration_hours_minutes for b in split.blocks] == [(24, 0), (48, 0)]
    assert split.duration_hours_minutes == (72, 0)
    assert (split.start, split.end, split.is_split) == (day(0), day(4), True)
    assert reference_search(calendar, request) == [whole, split, later]


# ---------------------------------------------------------------- ranking examples


def test_free_fleet_offers_each_zone_from_t0_then_a_split() -> None:
    calendar = Calendar()
    for zone in ("us-east-1b", "us-east-1a"):
        calendar.add_pool(plain(zone, 8))
    t0 = NOW + timedelta(minutes=30)
    found = search(calendar, instances(8, 2))
    assert [blocks(o) for o in found] == [
        [("us-east-1a", t0, day(2))],
        [("us-east-1b", t0, day(2))],
        # Back to back in one zone would be the first offering cut in two; across zones
        # it is a different plan (training jobs may move between AZs).
        [("us-east-1a", t0, day(1)), ("us-east-1b", day(1), day(2))],
    ]
    assert found == reference_search(calendar, instances(8, 2))


def test_hyperpod_splits_stay_in_one_zone_and_never_cut_a_block_in_two() -> None:
    calendar = Calendar()
    calendar.add_pool(plain("us-east-1a", 8))
    t0 = NOW + timedelta(minutes=30)
    request = instances(8, 2, "hyperpod-cluster")
    found = search(calendar, request)
    assert [blocks(o) for o in found] == [
        [("us-east-1a", t0, day(2))],
        [("us-east-1a", t0, day(1)), ("us-east-1a", day(2), day(3))],
        [("us-east-1a", day(0), day(1)), ("us-east-1a", day(2), day(3))],
    ]
    assert found == reference_search(calendar, request)


def test_when_no_block_fits_whole_every_offering_is_a_split() -> None:
    calendar = Calendar()
    pool = calendar.add_pool(plain("us-east-1a", 8))
    # One instance is taken on day 1, and from day 3 to day 70 (past the 56-day limit).
    pool.add(Lease(day(1), day(2), 1))
    pool.add(Lease(day(3), day(70), 1))
    request = instances(8, 2, "hyperpod-cluster")
    found = search(calendar, request)
    assert found == reference_search(calendar, request)
    assert [blocks(o) for o in found] == [
        # (end of block 2, start of block 1, |d1 - d2|, d1) decides.
        [("us-east-1a", NOW + timedelta(minutes=30), day(1)), ("us-east-1a", day(2), day(3))],
        [("us-east-1a", day(0), day(1)), ("us-east-1a", day(2), day(3))],
        [("us-east-1a", NOW + timedelta(minutes=30), day(1)), ("us-east-1a", day(70), day(71))],
    ]


def test_a_first_block_starts_within_56_days_but_a_second_may_start_later() -> None:
    calendar = Calendar()
    pool = calendar.add_pool(plain("us-east-1a", 8))
    pool.add(Lease(NOW, day(55), 8))
    pool.add(Lease(day(56), day(70), 8))
    found = search(calendar, instances(8, 2, "hyperpod-cluster"))
    assert found == reference_search(calendar, instances(8, 2, "hyperpod-cluster"))
    assert [blocks(o) for o in found][0] == [
        ("us-east-1a", day(55), day(56)),
        ("us-east-1a", day(70), day(71)),
    ]
    pool.add(Lease(day(55), day(56), 1))
    assert search(calendar, instances(8, 2)) == []


def test_end_before_bounds_every_block() -> None:
    calendar = Calendar()
    calendar.add_pool(plain("us-east-1a", 8)).add(Lease(day(0), day(10), 8))
    assert search(calendar, instances(8, 1, end_before=day(10))) == []
    assert search(calendar, instances(8, 2, end_before=day(11))) == []
    assert blocks(search(calendar, instances(8, 1, end_before=day(11)))[0]) == [
        ("us-east-1a", day(10), day(11))
    ]


def test_ultraservers_are_offered_whole_first_free_by_key() -> None:
    calendar = Calendar()
    calendar.add_pool(ultraserver("us-east-1a", "a1"))
    calendar.add_pool(ultraserver("us-east-1a", "a2", capacity=17))  # one unhealthy
    calendar.add_pool(ultraserver("us-east-1a", "a3"))
    calendar["us:a1"].add(Lease(day(0), day(5), 1))  # one instance taken: not whole
    request = OfferingRequest(
        NOW, 48, "hyperpod-cluster", ultraserver_type=ULTRA, ultraserver_count=2
    )
    first = search(calendar, request)[0]
    assert not first.is_split
    (block,) = first.blocks
    assert block.pool_counts == (("us:a2", 17), ("us:a3", 18))
    assert (block.instance_count, block.ultraserver_count) == (35, 2)
    assert (block.instance_type, block.ultraserver_type) == (GB200, ULTRA)
    assert block.reserved_capacity_type == "UltraServer"
    assert search(calendar, request) == reference_search(calendar, request)
    for extra in (dict(instance_type=GB200), dict(instance_type=P5)):
        narrowed = replace(request, **extra)  # type: ignore[arg-type]
        assert search(calendar, narrowed) == reference_search(calendar, narrowed)
    assert search(calendar, replace(request, instance_type=P5)) == []


def test_plain_requests_ignore_ultraservers_of_the_same_instance_type() -> None:
    calendar = Calendar()
    calendar.add_pool(ultraserver("us-east-1a", "a1"))
    request = OfferingRequest(NOW, 24, "training-job", instance_type=GB200, instance_count=1)
    assert search(calendar, request) == []


def test_book_writes_every_lease_or_none() -> None:
    calendar = Calendar()
    calendar.add_pool(plain("us-east-1a", 8)).add(Lease(day(1), day(2), 8))
    calendar.add_pool(plain("us-east-1b", 8)).add(Lease(day(0), day(1), 8))
    request = instances(8, 2, end_before=day(2))
    split, later = search(calendar, request)
    assert blocks(later)[0][1] == day(0)
    assert blocks(split) == [
        ("us-east-1a", NOW + timedelta(minutes=30), day(1)),
        ("us-east-1b", day(1), day(2)),
    ]
    calendar["ml.p5.48xlarge@us-east-1b"].add(Lease(day(1, 20), day(1, 21), 1))
    assert not fits_now(calendar, split)
    before = {pool.key: calendar[pool.key].leases() for pool in calendar.pools()}
    with pytest.raises(OverbookedError):
        book(calendar, split)
    assert {pool.key: calendar[pool.key].leases() for pool in calendar.pools()} == before
    calendar["ml.p5.48xlarge@us-east-1b"].remove(Lease(day(1, 20), day(1, 21), 1))
    assert fits_now(calendar, split)
    assert book(calendar, split) == [
        ("ml.p5.48xlarge@us-east-1a", Lease(NOW + timedelta(minutes=30), day(1), 8)),
        ("ml.p5.48xlarge@us-east-1b", Lease(day(1), day(2), 8)),
    ]
    assert search(calendar, request) == []


# ---------------------------------------------------------------- properties

TYPES = (P5, "ml.trn2.48xlarge", "ml.p4d.24xlarge")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@st.composite
def fleets(draw: st.DrawFn) -> Calendar:
    """1-3 instance types in 1-4 AZs, and a few UltraServers, of random capacities."""
    calendar = Calendar()
    types = TYPES[: draw(st.integers(1, 3))]
    zones = ZONES[: draw(st.integers(1, 4))]
    for instance_type in types:
        for zone in zones:
            if draw(st.integers(0, 4)):
                calendar.add_pool(plain(zone, draw(st.integers(0, 8)), instance_type))
    for zone in zones:
        for number in range(draw(st.integers(0, 3))):
            calendar.add_pool(ultraserver(zone, f"{zone}-{number}", draw(st.integers(0, 3))))
    return calendar


@st.composite
def nows(draw: st.DrawFn) -> datetime:
    if draw(st.integers(0, 4)) == 0:
        return NOW + timedelta(hours=2)  # t0 exactly at 11:30
    return NOW + draw(st.integers(0, 3 * 24 * 60)) * MINUTE


def foreign_leases(draw: st.DrawFn, calendar: Calendar, now: datetime) -> None:
    """Leases of other kinds (jobs, warm pools): any instant, any length; over-books skipped."""
    pools = calendar.pools()
    for pool in pools:
        if draw(st.integers(0, 2)) == 0:
            # A rhythm: the whole pool for 2 hours every `period` days until day 70, so no
            # block longer than `period` days fits here, while shorter ones (splits) do.
            period = draw(st.integers(2, 4))
            first = datetime.combine(now.date(), time(draw(st.integers(0, 23))), UTC)
            for number in range(0, 70, period):
                start = first + number * DAY
                with suppress(OverbookedError):
                    calendar[pool.key].add(Lease(start, start + 2 * HOUR, max(1, pool.capacity)))
    for _ in range(draw(st.integers(0, 30)) if pools else 0):
        pool = pools[draw(st.integers(0, len(pools) - 1))]
        if draw(st.booleans()):
            # A wall: the whole pool for a few days soon, so whole blocks often do not fit.
            start = now + draw(st.integers(0, 20 * 24 * 60)) * MINUTE
            length = draw(st.integers(12 * 60, 6 * 24 * 60)) * MINUTE
            count = max(1, pool.capacity)
        else:
            # Mostly in the next few weeks, where searches look first; sometimes far out.
            horizon = draw(st.sampled_from([20, 20, 20, 70])) * 24 * 60
            start = now + draw(st.integers(-24 * 60, horizon)) * MINUTE
            length = draw(st.integers(1, 12 * 24 * 60)) * MINUTE
            count = draw(st.integers(1, max(1, pool.capacity)))
        with suppress(OverbookedError):
            calendar[pool.key].add(Lease(start, start + length, count))


@st.composite
def requests(draw: st.DrawFn, now: datetime, calendar: Calendar) -> OfferingRequest:
    days = draw(st.integers(1, 6))
    start_after = None
    if draw(st.booleans()):
        start_after = now + draw(st.integers(-60, 57 * 24 * 60)) * MINUTE
    end_before = None
    if draw(st.integers(0, 2)) == 0:
        # Over a day of slack always leaves room for a block from t0 (which may run up
        # to a day past days x 24 h); now and then less, to hit "leaves no room".
        slack = draw(st.integers(26 * 60, 25 * 24 * 60)) - draw(
            st.sampled_from([0] * 5 + [30 * 60])
        )
        end_before = (start_after or now) + (days * 24 * 60 + slack) * MINUTE
    common = dict(
        now=now,
        duration_hours=24 * days,
        target=draw(st.sampled_from(TARGETS)),
        start_after=start_after,
        end_before=end_before,
    )
    if draw(st.integers(0, 3)) == 0:
        return OfferingRequest(
            **common,  # type: ignore[arg-type]
            ultraserver_type=ULTRA,
            ultraserver_count=draw(st.integers(1, 2)),
            instance_type=draw(st.sampled_from([None, GB200])),
        )
    present = sorted({pool.instance_type for pool in calendar.pools()} - {GB200})
    return OfferingRequest(
        **common,  # type: ignore[arg-type]
        instance_type=draw(st.sampled_from(present or [P5])),
        instance_count=draw(st.sampled_from(INSTANCE_COUNTS[:4])),
    )


def usage(calendar: Calendar, key: str, start: datetime, end: datetime) -> int:
    """Peak usage over [start, end) by scanning the pool's leases (no calendar index)."""
    leases = calendar[key].leases()
    instants = [start] + [x.start for x in leases if start < x.start < end]
    return max(sum(x.count for x in leases if x.start <= i < x.end) for i in instants)


def assert_never_over_booked(calendar: Calendar) -> None:
    for pool in calendar.pools():
        for lease in calendar[pool.key].leases():
            assert usage(calendar, pool.key, lease.start, lease.start + MINUTE) <= pool.capacity


def brute_fits(
    calendar: Calendar, request: OfferingRequest, zone: str, start: datetime, days: int
) -> bool:
    end = block_end(start, days)
    if request.end_before is not None and end > request.end_before:
        return False
    if request.ultraserver_type is None:
        key = f"{request.instance_type}@{zone}"
        if key not in calendar:
            return False
        return (
            usage(calendar, key, start, end) + (request.instance_count or 0)
            <= calendar[key].pool.capacity
        )
    free = [
        pool
        for pool in calendar.pools()
        if pool.ultraserver_type == request.ultraserver_type
        and pool.availability_zone == zone
        and request.instance_type in (None, pool.instance_type)
        and pool.capacity >= 1
        and usage(calendar, pool.key, start, end) == 0
    ]
    return len(free) >= (request.ultraserver_count or 0)


def first_starts(request: OfferingRequest) -> list[datetime]:
    t0 = earliest_start(request)
    starts = [t0]
    instant = block_end(t0, 0) if block_end(t0, 0) > t0 else block_end(t0, 1)
    while instant <= request.now + MAX_ADVANCE:
        starts.append(instant)
        instant += DAY
    return starts


def brute_contiguous(calendar: Calendar, request: OfferingRequest) -> bool:
    return any(
        brute_fits(calendar, request, zone, start, request.days)
        for zone in ZONES
        for start in first_starts(request)
    )


def brute_split(calendar: Calendar, request: OfferingRequest) -> bool:
    """Some block 1 and some later block 2 fit (each block 1 taken at its earliest end)."""
    last_lease_end = max((x.end for p in calendar for x in p.leases()), default=request.now)
    for d1 in range(1, request.days):
        d2 = request.days - d1
        for zone1 in ZONES:
            start1 = next(
                (s for s in first_starts(request) if brute_fits(calendar, request, zone1, s, d1)),
                None,
            )
            if start1 is None:
                continue
            start2 = block_end(start1, d1)
            # From the first 11:30 after every lease has ended, nothing changes any more.
            settled = max(start2, block_end(last_lease_end, 1))
            while start2 <= settled:
                zones2 = [zone1] if request.target == "hyperpod-cluster" else ZONES
                if any(brute_fits(calendar, request, z, start2, d2) for z in zones2):
                    return True
                start2 += DAY
    return False


def assert_offerings_obey_the_rules(
    calendar: Calendar, request: OfferingRequest, found: list[Offering]
) -> None:
    t0 = earliest_start(request)
    assert len(found) <= 3
    for offering in found:
        first, *rest = offering.blocks
        assert len(offering.blocks) in (1, 2)
        assert offering.target == request.target
        assert sum(block.days for block in offering.blocks) == request.days
        assert t0 <= first.start <= request.now + MAX_ADVANCE
        if rest:
            assert rest[0].start >= first.end and rest[0].start.time() == time(11, 30)
            if request.target == "hyperpod-cluster":
                assert rest[0].availability_zone == first.availability_zone
        for block in offering.blocks:
            assert block.end.time() == time(11, 30) and block.end.tzinfo is not None
            assert block.end == block_end(block.start, block.days) and block.days >= 1
            assert request.end_before is None or block.end <= request.end_before
            pools = [calendar[key].pool for key, _ in block.pool_counts]
            assert {p.availability_zone for p in pools} == {block.availability_zone}
            if request.ultraserver_type is None:
                assert block.pool_counts == ((pools[0].key, request.instance_count),)
                assert pools[0].instance_type == request.instance_type == block.instance_type
                assert not pools[0].is_ultraserver
            else:
                assert block.ultraserver_count == request.ultraserver_count == len(pools)
                assert all(p.ultraserver_type == request.ultraserver_type for p in pools)
                assert [count for _, count in block.pool_counts] == [p.capacity for p in pools]
                assert block.instance_count == sum(p.capacity for p in pools)


SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_searching_and_buying_keep_every_promise(data: st.DataObject) -> None:
    calendar = data.draw(fleets())
    now = data.draw(nows())
    for _ in range(data.draw(st.integers(1, 4))):
        foreign_leases(data.draw, calendar, now)
        assert_never_over_booked(calendar)
        request = data.draw(requests(now, calendar))
        try:
            check_request(request)
        except OfferingRuleError:
            event("request breaks a rule")
            with pytest.raises(OfferingRuleError):
                search(calendar, request)
            continue
        found = search(calendar, request)
        event(f"offerings of {[len(offering.blocks) for offering in found]} blocks")
        assert found == reference_search(calendar, request)
        assert_offerings_obey_the_rules(calendar, request, found)
        if brute_contiguous(calendar, request):
            assert found and not found[0].is_split
        elif brute_split(calendar, request):
            assert found and all(offering.is_split for offering in found)
        else:
            assert found == []
        for offering in found:
            # Each one could be bought right now: buy it, check, and give it back.
            assert fits_now(calendar, offering)
            added = book(calendar, offering)
            assert_never_over_booked(calendar)
            for key, lease in added:
                calendar[key].remove(lease)
        if found and data.draw(st.booleans()):
            book(calendar, found[data.draw(st.integers(0, len(found) - 1))])
            assert_never_over_booked(calendar)
        now += data.draw(st.integers(0, 3 * 24 * 60)) * MINUTE


@settings(max_examples=150, deadline=None, suppress_health_check=SLOW)
@given(data=st.data())
def test_search_matches_reference_after_health_changes(data: st.DataObject) -> None:
    calendar = data.draw(fleets())
    now = data.draw(nows())
    foreign_leases(data.draw, calendar, now)
    for pool in calendar.pools():
        if data.draw(st.integers(0, 3)) == 0:
            # May leave the pool over-booked: it then offers nothing where it is.
            calendar[pool.key].set_capacity(data.draw(st.integers(0, 9)))
    for _ in range(3):
        request = data.draw(requests(now, calendar))
        try:
            check_request(request)
        except OfferingRuleError:
            continue
        found = search(calendar, request)
        assert found == reference_search(calendar, request)
        assert all(fits_now(calendar, offering) for offering in found)
