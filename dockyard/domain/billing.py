"""Billing (spec §6): what each kind of charge is, which seconds count, what they cost.

Pure rules, no database: the ledger (`services.ledger`) records what these decide, and
each kind of charge has one caller - a training job's seconds when it ends
(`control.jobs.ending`), a warm pool's retained seconds when its Available period
closes (`services.warm_pools`), a plan's upfront fee when it is paid
(`services.training_plans`).

The plan rule, in one place: capacity a training plan holds was paid for by the plan's
upfront fee (the price table x its instances x its hours), so time spent on it - a
job's training seconds and a warm pool's retained seconds alike - is counted (the API
reports it) but not charged again by the second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum

# Per-second charges are kept to a hundredth of a cent; fees to the cent.
AMOUNT = Decimal("0.0001")
CENT = Decimal("0.01")


class Charge(StrEnum):
    """The ledger's kinds of entry."""

    TRAINING = "training-job-instance-seconds"
    WARM_POOL = "warm-pool-instance-seconds"
    PLAN_FEE = "training-plan-upfront-fee"


def price(prices: Mapping[str, Decimal], instance_type: str) -> Decimal:
    """An instance type's price per instance-hour (a type the table lacks is free)."""
    return prices.get(instance_type, Decimal(0))


def instance_seconds_cost(price_per_hour: Decimal, count: int, seconds: int) -> Decimal:
    return (price_per_hour * seconds * count / 3600).quantize(AMOUNT)


def upfront_fee(price_per_hour: Decimal, instances: int, duration: timedelta) -> Decimal:
    """A plan's fee: price table x instances x hours (to the minute), rounded to cents."""
    hours = Decimal(int(duration.total_seconds() // 60)) / Decimal(60)
    return (price_per_hour * instances * hours).quantize(CENT, ROUND_HALF_UP)


def started_seconds(start: datetime, end: datetime) -> int:
    """Seconds from `start` to `end` where a started second counts."""
    return max(0, math.ceil((end - start).total_seconds()))


def retained_seconds(since: datetime, until: datetime) -> int:
    """A warm pool's retained time: whole seconds Available."""
    return max(0, int((until - since).total_seconds()))


@dataclass(frozen=True)
class Bill:
    """One period of instance time: its seconds (per instance, as the API reports
    them) and what they cost; `amount` None when nothing is charged for them."""

    charge: Charge
    seconds: int
    count: int
    amount: Decimal | None


def training_bill(
    *,
    on_plan: bool,
    count: int,
    price_per_hour: Decimal,
    start: datetime,
    end: datetime,
    earlier_run_seconds: float = 0.0,
    run_seconds: float = 0.0,
) -> Bill:
    """A job's BillableTimeInSeconds and charge when it ends (spec §4.9).

    Per instance, as AWS defines it (the SDK multiplies by the instance count itself).
    On demand: from TrainingStartTime to the end, a started second counting. On a plan:
    the time its instances actually ran, over every try (`earlier_run_seconds` of the
    tries before, `run_seconds` of this one), which the plan has paid for.
    """
    if on_plan:
        seconds = math.ceil(earlier_run_seconds + run_seconds)
        return Bill(Charge.TRAINING, seconds, count, None)
    seconds = started_seconds(start, end)
    return Bill(
        Charge.TRAINING, seconds, count, instance_seconds_cost(price_per_hour, count, seconds)
    )


def retained_bill(
    *, on_plan: bool, count: int, price_per_hour: Decimal, since: datetime, until: datetime
) -> Bill:
    """A warm pool's ResourceRetainedBillableTimeInSeconds for one Available period, and
    its charge (none inside a plan's block: the plan paid for the capacity)."""
    seconds = retained_seconds(since, until)
    amount = None if on_plan else instance_seconds_cost(price_per_hour, count, seconds)
    return Bill(Charge.WARM_POOL, seconds, count, amount)


def payment_refusal(
    fee: Decimal, budget: Decimal | None, spent: Decimal, currency: str
) -> str | None:
    """Why a plan's upfront fee cannot be paid from the account's budget (its
    StatusMessage), or None when it can (no budget: unlimited)."""
    if budget is None or spent + fee <= budget:
        return None
    left = max(budget - spent, Decimal(0))
    return (
        f"Payment failed: the upfront fee of {fee} {currency} exceeds the "
        f"account's remaining budget of {left} {currency}"
    )
