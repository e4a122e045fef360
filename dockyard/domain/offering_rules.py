"""The rules a training-plan offering obeys (spec §3.1), and the shape of an offering.

Both offering searches (`offerings.search`, fast, and `offering_reference`, brute force)
and the services that validate and buy offerings read the rules from here, so the two
searches cannot drift apart on what a valid request, block or ranking is. The ranking
itself is documented in `dockyard.domain.offerings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from dockyard.domain.calendar import Lease

TARGETS = ("training-job", "hyperpod-cluster")
INSTANCE_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MIN_LEAD = timedelta(minutes=30)
MAX_ADVANCE = timedelta(days=56)
PAYMENT_LEAD = timedelta(minutes=5)
MAX_DAYS = 182
MAX_OFFERINGS = 3
# Every block ends at this time of day, UTC, on its last day.
BLOCK_END_TIME = time(11, 30)

DAY = timedelta(days=1)


class OfferingRuleError(ValueError):
    """A request that breaks a §3.1 rule; the message names the rule and the value."""


@dataclass(frozen=True)
class OfferingRequest:
    """A SearchTrainingPlanOfferings request, with the instant it is asked at."""

    now: datetime
    duration_hours: int
    target: str
    instance_type: str | None = None
    instance_count: int | None = None
    ultraserver_type: str | None = None
    ultraserver_count: int | None = None
    start_after: datetime | None = None
    end_before: datetime | None = None

    @property
    def days(self) -> int:
        return self.duration_hours // 24

    @property
    def wants_ultraservers(self) -> bool:
        return self.ultraserver_type is not None


def _aware(name: str, value: datetime | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        # The API layer always hands over aware instants; a naive one is a bug, not input.
        raise ValueError(f"{name} must be timezone-aware; got {value!r}")


def check_request(request: OfferingRequest) -> None:
    """Raise OfferingRuleError for the first §3.1 rule the request breaks."""
    for name in ("now", "start_after", "end_before"):
        _aware(name, getattr(request, name))
    _check_what(request)
    hours = request.duration_hours
    if hours % 24 or not 24 <= hours <= 24 * MAX_DAYS:
        raise OfferingRuleError(
            f"DurationHours must be a multiple of 24 between 24 and {24 * MAX_DAYS} "
            f"(whole days, 1 to {MAX_DAYS}); got {hours}"
        )
    if request.target not in TARGETS:
        raise OfferingRuleError(
            f"TargetResources must be one of {', '.join(TARGETS)}; got {request.target}"
        )
    latest = request.now + MAX_ADVANCE
    if request.start_after is not None and request.start_after > latest:
        raise OfferingRuleError(
            "StartTimeAfter must be at most 56 days from now (plans are bought at most 8 "
            f"weeks ahead: no later than {_iso(latest)}); got {_iso(request.start_after)}"
        )
    if request.end_before is not None:
        start = earliest_start(request)
        if request.end_before <= start:
            raise OfferingRuleError(
                "EndTimeBefore must be after the earliest possible start "
                f"({_iso(start)}: 30 minutes from now, or StartTimeAfter if later); "
                f"got {_iso(request.end_before)}"
            )
        end = block_end(start, request.days)
        if end > request.end_before:
            raise OfferingRuleError(
                f"EndTimeBefore leaves no room for {request.days} day(s): blocks end at 11:30 "
                f"UTC, so even one starting at the earliest possible start ({_iso(start)}) "
                f"ends at {_iso(end)}; got {_iso(request.end_before)}"
            )


def _check_what(request: OfferingRequest) -> None:
    """Instances or whole UltraServers: exactly one of the two, each with its count."""
    instance_count, ultraserver_count = request.instance_count, request.ultraserver_count
    wants_ultraservers = request.ultraserver_type is not None or ultraserver_count is not None
    if wants_ultraservers and instance_count is not None:
        raise OfferingRuleError(
            "Specify either InstanceType and InstanceCount, or UltraServerType and "
            f"UltraServerCount, not both; got InstanceCount {instance_count} and "
            f"UltraServerCount {ultraserver_count}"
        )
    if wants_ultraservers:
        if request.ultraserver_type is None:
            raise OfferingRuleError(
                f"UltraServerType is required with UltraServerCount; got {ultraserver_count}"
            )
        if ultraserver_count is None:
            raise OfferingRuleError(
                f"UltraServerCount is required with UltraServerType; got none for "
                f"{request.ultraserver_type}"
            )
        if ultraserver_count < 1:
            raise OfferingRuleError(
                "UltraServerCount must be at least 1 (whole UltraServers); "
                f"got {ultraserver_count}"
            )
        return
    if request.instance_type is None and instance_count is None:
        raise OfferingRuleError(
            "Specify either InstanceType and InstanceCount, or UltraServerType and "
            "UltraServerCount; got neither"
        )
    if request.instance_type is None:
        raise OfferingRuleError(
            f"InstanceType is required with InstanceCount; got {instance_count}"
        )
    if instance_count is None:
        raise OfferingRuleError(
            f"InstanceCount is required with InstanceType; got none for {request.instance_type}"
        )
    if instance_count not in INSTANCE_COUNTS:
        raise OfferingRuleError(
            f"InstanceCount must be one of {', '.join(map(str, INSTANCE_COUNTS))}; "
            f"got {instance_count}"
        )


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def block_end(start: datetime, days: int) -> datetime:
    """Where a block of `days` days starting at `start` ends: 11:30 UTC on its last day."""
    last_day: date = start.astimezone(UTC).date() + timedelta(days=days)
    return datetime.combine(last_day, BLOCK_END_TIME, UTC)


def earliest_start(request: OfferingRequest) -> datetime:
    """t0: 30 minutes from now (minimum lead time), or StartTimeAfter when that is later."""
    soonest = (request.now + MIN_LEAD).astimezone(UTC)
    if request.start_after is None:
        return soonest
    return max(soonest, request.start_after.astimezone(UTC))


def latest_first_start(request: OfferingRequest) -> datetime:
    """A plan's first block starts at most 56 days (8 weeks) from now; later blocks may not."""
    return (request.now + MAX_ADVANCE).astimezone(UTC)


def next_block_end_time(after: datetime) -> datetime:
    """The first 11:30 UTC strictly after `after`: a block's next possible start after t0."""
    candidate = datetime.combine(after.astimezone(UTC).date(), BLOCK_END_TIME, UTC)
    return candidate if candidate > after else candidate + DAY


def hours_minutes(length: timedelta) -> tuple[int, int]:
    """DurationHours and DurationMinutes as the API reports them: whole hours, then minutes."""
    return divmod(length // timedelta(minutes=1), 60)


@dataclass(frozen=True)
class BlockPlacement:
    """One reserved-capacity block of an offering, and the leases that buying it writes."""

    availability_zone: str
    instance_type: str
    instance_count: int
    start: datetime
    end: datetime
    # (pool key, instances) to lease over [start, end): one plain pool, or one entry per
    # UltraServer holding that UltraServer's whole capacity.
    pool_counts: tuple[tuple[str, int], ...]
    ultraserver_type: str | None = None
    ultraserver_count: int | None = None

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    @property
    def duration_hours_minutes(self) -> tuple[int, int]:
        return hours_minutes(self.duration)

    @property
    def days(self) -> int:
        """The whole days bought: a block ends at 11:30 on `start`'s date plus this many days."""
        return (self.end.date() - self.start.astimezone(UTC).date()).days

    @property
    def reserved_capacity_type(self) -> str:
        return "UltraServer" if self.ultraserver_type is not None else "Instance"

    def leases(self) -> list[tuple[str, Lease]]:
        return [(key, Lease(self.start, self.end, count)) for key, count in self.pool_counts]


@dataclass(frozen=True)
class Offering:
    """A training-plan offering: one block, or two blocks in time order (a split)."""

    blocks: tuple[BlockPlacement, ...]
    target: str

    @property
    def start(self) -> datetime:
        return self.blocks[0].start

    @property
    def end(self) -> datetime:
        return self.blocks[-1].end

    @property
    def is_split(self) -> bool:
        return len(self.blocks) > 1

    @property
    def duration(self) -> timedelta:
        """The time actually reserved: the blocks' real lengths, gaps not counted."""
        return sum((block.duration for block in self.blocks), timedelta())

    @property
    def duration_hours_minutes(self) -> tuple[int, int]:
        return hours_minutes(self.duration)


def contiguous_rank(offering: Offering) -> tuple[datetime, str]:
    """How one-block offerings are ordered (see `dockyard.domain.offerings`)."""
    (block,) = offering.blocks
    return (block.start, block.availability_zone)


def split_rank(offering: Offering) -> tuple[datetime, datetime, int, int, str, str]:
    """How two-block offerings are ordered (see `dockyard.domain.offerings`)."""
    first, second = offering.blocks
    return (
        second.end,
        first.start,
        abs(first.days - second.days),
        first.days,
        first.availability_zone,
        second.availability_zone,
    )


def is_cut_block(first: BlockPlacement, second: BlockPlacement) -> bool:
    """Whether two blocks are one block cut in two: back to back on the very same pools.

    Such a split is never offered: its capacity, held without a break on the same
    instances, is a single block, which is offered as one (and earlier, see the ranking).
    """
    return second.start == first.end and [key for key, _ in first.pool_counts] == [
        key for key, _ in second.pool_counts
    ]
