"""Training-plan rules: statuses, their transitions, and what the clock says they should be.

A plan is Active while one of its blocks is active, Scheduled before the first block
and in a gap between blocks, Expired after the last (spec §3.3). Pending lasts until
the upfront fee is paid; Failed when it cannot be.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from enum import StrEnum

# Re-exported: offerings price their blocks with it (its home is billing).
from dockyard.domain.billing import upfront_fee as upfront_fee
from dockyard.domain.transitions import Transitions


class PlanStatus(StrEnum):
    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    ACTIVE = "Active"
    EXPIRED = "Expired"
    FAILED = "Failed"


_P = PlanStatus
# Scheduled -> Expired directly: a clock that jumps past a whole block never sees it Active.
PLAN_TRANSITIONS = Transitions(
    "training plan",
    {
        _P.PENDING: frozenset({_P.SCHEDULED, _P.ACTIVE, _P.EXPIRED, _P.FAILED}),
        _P.SCHEDULED: frozenset({_P.ACTIVE, _P.EXPIRED}),
        _P.ACTIVE: frozenset({_P.SCHEDULED, _P.EXPIRED}),
        _P.EXPIRED: frozenset(),
        _P.FAILED: frozenset(),
    },
)
# Reserved capacities (blocks) have the same statuses but never go back from Active.
BLOCK_TRANSITIONS = Transitions(
    "reserved capacity",
    {
        _P.PENDING: frozenset({_P.SCHEDULED, _P.ACTIVE, _P.EXPIRED, _P.FAILED}),
        _P.SCHEDULED: frozenset({_P.ACTIVE, _P.EXPIRED}),
        _P.ACTIVE: frozenset({_P.EXPIRED}),
        _P.EXPIRED: frozenset(),
        _P.FAILED: frozenset(),
    },
)
TERMINAL = frozenset({_P.EXPIRED, _P.FAILED})


def block_status(start: datetime, end: datetime, now: datetime) -> PlanStatus:
    if now < start:
        return _P.SCHEDULED
    if now < end:
        return _P.ACTIVE
    return _P.EXPIRED


def plan_status(blocks: Iterable[PlanStatus]) -> PlanStatus:
    statuses = list(blocks)
    if any(s is _P.ACTIVE for s in statuses):
        return _P.ACTIVE
    if all(s is _P.EXPIRED for s in statuses):
        return _P.EXPIRED
    return _P.SCHEDULED


def hours_minutes(duration: timedelta) -> tuple[int, int]:
    minutes = int(duration.total_seconds() // 60)
    return minutes // 60, minutes % 60
