"""Billing with the fake backend (SPEC §4.9, §6): BillableTimeInSeconds per instance
and one ledger entry per job of its instance-seconds; none for time on a plan (its fee
paid for it, once); a warm pool's retained seconds charged when its period closes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dockyard.compute.wire.state import Phase
from dockyard.domain.billing import Charge
from dockyard.store.tables import TrainingJob
from tests.control.test_plan_interruption import _plan
from tests.control.world import M5, P5, World


def _cost(world: World, instance_type: str, count: int, seconds: int) -> Decimal:
    price = world.plans.prices[instance_type]
    return (price * count * seconds / 3600).quantize(Decimal("0.0001"))


def _run(
    world: World, name: str, seconds: float, phase: Phase = "completed", **changes: Any
) -> TrainingJob:
    """A job created, trained for `seconds` on the clock and ended so."""
    world.create_job(name, **changes)
    world.pass_()
    key = world.key(name)
    for run in world.instances.runs_of(key):
        world.instances.report(key, run.host, "training")
    world.pass_()
    world.advance(seconds=seconds)
    reason = {"failure_reason": "AlgorithmError: x"} if phase == "failed" else {}
    world.instances.finish(key, phase, **reason)
    world.pass_()
    return world.job(name)


def test_a_job_bills_its_started_seconds_per_instance_once(world: World) -> None:
    job = _run(world, "pair", 600.4, InstanceCount=2)
    assert job.status == "Completed"
    assert job.billable_seconds == 601  # a started second counts
    (entry,) = world.ledger()
    assert (entry.kind, entry.resource_arn, entry.account_id) == (
        Charge.TRAINING.value,
        job.arn,
        world.account,
    )
    # Instance-seconds: the API's per-instance seconds times the instance count.
    assert Decimal(entry.amount) == _cost(world, M5, 2, 601)
    assert entry.description == "2 x 601 s of training job pair"
    world.passes(3)
    assert len(world.ledger()) == 1


def test_a_failed_job_is_billed_and_one_that_never_trained_is_not(world: World) -> None:
    failed = _run(world, "failed", 120, "failed")
    assert (failed.status, failed.billable_seconds) == ("Failed", 120)
    world.create_job("never", InstanceCount=3)  # too big for a zone: it never starts
    world.pass_()
    world.stop_job("never")
    world.pass_()
    assert world.job("never").billable_seconds is None
    assert [entry.resource_arn for entry in world.ledger()] == [failed.arn]


def test_time_on_a_plan_is_counted_not_charged(world: World) -> None:
    arn, (block, _) = _plan(world)
    world.pass_()  # the plan's upfront fee is paid
    world.clock.set(block.start_time)
    job = _run(world, "planned", 900, InstanceType=P5, TrainingPlanArn=arn)
    assert (job.status, job.billable_seconds) == ("Completed", 900)
    (fee,) = world.ledger()
    assert (fee.kind, fee.resource_arn) == (Charge.PLAN_FEE.value, arn)
    world.passes(2)
    assert len(world.ledger()) == 1  # the fee once, and nothing by the second


def test_a_warm_pools_retained_seconds_are_charged_when_it_is_reused(world: World) -> None:
    first = _run(world, "first", 60, KeepAlivePeriodInSeconds=600)
    world.advance(seconds=200)
    world.create_job("second", KeepAlivePeriodInSeconds=600)
    world.pass_()
    assert world.job("second").warm_pool_status == "InUse"
    first = world.job("first")
    assert first.warm_pool_retained_seconds == 200
    (retained,) = world.ledger(Charge.WARM_POOL.value)
    assert retained.resource_arn == first.arn
    assert Decimal(retained.amount) == _cost(world, M5, 1, 200)
    # The pool's next Available period, after the second job, is billed on it.
    key = world.key("second")
    world.instances.report(key, phase="training")
    world.pass_()
    world.instances.finish(key)
    world.pass_()
    world.advance(seconds=600)
    world.pass_()
    second = world.job("second")
    assert (second.warm_pool_status, second.warm_pool_retained_seconds) == ("Terminated", 600)
    charged = [(e.resource_arn, Decimal(e.amount)) for e in world.ledger(Charge.WARM_POOL.value)]
    assert charged == [
        (first.arn, _cost(world, M5, 1, 200)),
        (second.arn, _cost(world, M5, 1, 600)),
    ]
    assert world.leases() == []
