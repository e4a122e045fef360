"""Billing rules (spec §6): billable seconds, what they cost, the plan rule, budgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain import billing
from dockyard.domain.billing import Charge

START = datetime(2026, 12, 1, 9, tzinfo=UTC)
PRICE = Decimal("3.60")  # per instance-hour: a tenth of a cent per instance-second


def test_a_started_second_counts_and_time_never_runs_backwards() -> None:
    assert billing.started_seconds(START, START + timedelta(seconds=10, milliseconds=1)) == 11
    assert billing.started_seconds(START, START + timedelta(seconds=10)) == 10
    assert billing.started_seconds(START, START - timedelta(seconds=5)) == 0


def test_an_on_demand_job_is_charged_its_instance_seconds() -> None:
    bill = billing.training_bill(
        on_plan=False,
        count=3,
        price_per_hour=PRICE,
        start=START,
        end=START + timedelta(seconds=99.5),
    )
    # BillableTimeInSeconds is per instance; the charge is for every instance.
    assert (bill.charge, bill.seconds, bill.count) == (Charge.TRAINING, 100, 3)
    assert bill.amount == Decimal("0.3000")


def test_a_plan_job_counts_the_time_it_ran_over_every_try_and_is_not_charged() -> None:
    bill = billing.training_bill(
        on_plan=True,
        count=2,
        price_per_hour=PRICE,
        start=START,
        end=START + timedelta(hours=5),  # the control plane's clock: not what ran
        earlier_run_seconds=120.25,
        run_seconds=30.5,
    )
    assert bill.seconds == 151
    assert bill.amount is None  # the plan's upfront fee paid for its capacity


def test_a_warm_pool_is_charged_its_retained_seconds_except_inside_a_plan() -> None:
    until = START + timedelta(seconds=120, milliseconds=900)
    on_demand = billing.retained_bill(
        on_plan=False, count=2, price_per_hour=PRICE, since=START, until=until
    )
    assert (on_demand.charge, on_demand.seconds, on_demand.amount) == (
        Charge.WARM_POOL,
        120,
        Decimal("0.2400"),
    )
    on_plan = billing.retained_bill(
        on_plan=True, count=2, price_per_hour=PRICE, since=START, until=until
    )
    # Still counted (ResourceRetainedBillableTimeInSeconds), not charged again.
    assert (on_plan.seconds, on_plan.amount) == (120, None)


def test_a_type_missing_from_the_price_table_is_free() -> None:
    assert billing.price({"ml.m5.xlarge": PRICE}, "ml.m5.xlarge") == PRICE
    assert billing.price({}, "ml.m5.xlarge") == Decimal(0)


def test_the_upfront_fee_is_price_times_instances_times_hours_to_the_minute() -> None:
    fee = billing.upfront_fee(Decimal("10"), 4, timedelta(hours=2, minutes=30, seconds=59))
    assert fee == Decimal("100.00")


def test_a_fee_over_the_remaining_budget_is_refused_saying_what_is_left() -> None:
    fee = Decimal("100.00")
    assert billing.payment_refusal(fee, None, Decimal("1e9"), "USD") is None
    assert billing.payment_refusal(fee, Decimal("150"), Decimal("50"), "USD") is None
    refusal = billing.payment_refusal(fee, Decimal("150"), Decimal("60"), "USD")
    assert refusal is not None
    assert "upfront fee of 100.00 USD" in refusal and "budget of 90 USD" in refusal
    overspent = billing.payment_refusal(fee, Decimal("10"), Decimal("60"), "USD")
    assert overspent is not None and "budget of 0 USD" in overspent


@given(
    seconds=st.integers(min_value=0, max_value=10**7),
    count=st.integers(min_value=1, max_value=512),
    cents=st.integers(min_value=0, max_value=10**6),
)
def test_a_charge_is_exact_and_splits_by_instance(seconds: int, count: int, cents: int) -> None:
    """Charging n instances costs what charging one n times does (to the 1/100 cent)."""
    price = Decimal(cents) / 100
    whole = billing.instance_seconds_cost(price, count, seconds)
    one = billing.instance_seconds_cost(price, 1, seconds)
    assert whole >= 0
    assert abs(whole - one * count) <= Decimal("0.0001") * count
    assert whole == whole.quantize(billing.AMOUNT)
