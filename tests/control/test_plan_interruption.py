"""Jobs on a training plan with the fake backend (SPEC §3.4): a job waits for its
plan's block, starts by itself, is interrupted when 30 minutes of the block remain
(its instances told to stop), waits Pending for the next block and restarts there on
fresh instances (attempt 2) with the MaxRuntime it has left; after the last block it
ends Stopped. Time on the plan is counted but never charged by the second."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select

from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.billing import Charge
from dockyard.domain.job_runtime import JobPhase
from dockyard.store.tables import ReservedCapacity
from tests.control.world import P5, World

CUTOFF = timedelta(minutes=30)
# Longer than a block: the agents (the fake's, here) would stop a job at MaxRuntime.
MAX_RUNTIME = 2 * 86400


def _plan(world: World) -> tuple[str, list[ReservedCapacity]]:
    """A plan of one instance: two 24-hour blocks from 11:30 today; paid on the next pass."""
    today = world.clock.now().replace(hour=11, minute=30)
    arn = world.buy_plan(
        "two-blocks",
        P5,
        1,
        DurationHours=48,
        StartTimeAfter=today,
        EndTimeBefore=today + timedelta(days=3),
        pick=lambda blocks: len(blocks) == 2,
    )
    with world.db.read_session() as session:
        blocks = list(session.scalars(select(ReservedCapacity).order_by(ReservedCapacity.ordinal)))
    return arn, blocks


def _started(world: World, name: str, attempt: int) -> None:
    world.instances.report(world.key(name), phase="training")
    world.pass_()
    job = world.job(name)
    assert job.secondary_status == "Training" and job.runtime.attempt == attempt


def _interrupt(world: World, name: str, at: datetime) -> None:
    """The clock reaches `at` (a block's last 30 minutes): the job's instances are told
    to stop, stop, and the job goes back to waiting."""
    world.clock.set(at)
    world.pass_()
    key = world.key(name)
    assert world.instances.stops and world.instances.stops[-1].startswith(key)
    assert world.job(name).runtime.phase is JobPhase.INTERRUPTING
    world.instances.obey_stops()
    world.passes(2)


def test_a_plan_job_is_interrupted_and_restarts_in_the_next_block(world: World) -> None:
    arn, (first, second) = _plan(world)
    world.create_job(
        "resumer", InstanceType=P5, TrainingPlanArn=arn, MaxRuntimeInSeconds=MAX_RUNTIME
    )
    world.pass_()
    job = world.job("resumer")
    assert job.secondary_status == "Pending"
    assert first.start_time.isoformat() in world.messages("resumer")[-1][1]
    assert world.instances.launched == []

    world.clock.set(first.start_time)  # the block starts: the job starts by itself
    world.pass_()
    job = world.job("resumer")
    assert job.runtime.placement is not None and job.runtime.placement.block == first.id
    assert world.messages("resumer")[-1] == (
        "Starting",
        plan_rules.starting_on_plan(first.availability_zone),
    )
    assert world.plan("two-blocks")["InUseInstanceCount"] == 1
    _started(world, "resumer", attempt=1)
    _interrupt(world, "resumer", first.end_time - CUTOFF)

    job = world.job("resumer")
    assert (job.status, job.secondary_status) == ("InProgress", "Pending")
    statuses = [status for status, _ in world.messages("resumer")]
    assert statuses[-2:] == ["Interrupted", "Pending"]
    assert ("Interrupted", plan_rules.INTERRUPTED) in world.messages("resumer")
    runtime = job.runtime
    assert runtime.phase is JobPhase.QUEUED and runtime.attempt == 2
    used = (first.end_time - CUTOFF - first.start_time).total_seconds()
    assert runtime.used_seconds == used
    assert world.plan("two-blocks")["InUseInstanceCount"] == 0

    world.clock.set(second.start_time)  # the next block: fresh instances, attempt 2
    world.pass_()
    job = world.job("resumer")
    assert job.runtime.placement is not None and job.runtime.placement.block == second.id
    assert world.messages("resumer")[-1] == (
        "Restarting",
        plan_rules.restarting(2, second.availability_zone),
    )
    assert len(world.instances.launched) == 2
    key, spec = world.instances.launched[-1]
    assert key == world.key("resumer") and spec.attempt == 2
    assert spec.max_runtime_seconds == MAX_RUNTIME - int(used)
    assert world.instances.agent_of(key).attempt == 2

    _started(world, "resumer", attempt=2)
    world.advance(minutes=10)
    world.instances.finish(key)
    world.pass_()
    job = world.job("resumer")
    assert job.status == "Completed"
    # The time run over both tries, by the instances' clocks; nothing charged for it.
    assert job.billable_seconds == int(used) + 600
    assert world.ledger(Charge.TRAINING.value) == []
    assert [entry.kind for entry in world.ledger()] == [Charge.PLAN_FEE.value]


def test_a_plan_job_still_running_after_the_last_block_ends_stopped(world: World) -> None:
    arn, (first, second) = _plan(world)
    world.clock.set(first.start_time)
    world.create_job(
        "too-long", InstanceType=P5, TrainingPlanArn=arn, MaxRuntimeInSeconds=4 * 86400
    )
    world.pass_()
    _started(world, "too-long", attempt=1)
    _interrupt(world, "too-long", first.end_time - CUTOFF)
    world.clock.set(second.start_time)
    world.pass_()
    _started(world, "too-long", attempt=2)
    _interrupt(world, "too-long", second.end_time - CUTOFF)
    job = world.job("too-long")
    assert (job.status, job.secondary_status) == ("Stopped", "Stopped")
    assert world.messages("too-long")[-1] == ("Stopped", plan_rules.PLAN_ENDED)
    assert job.runtime.phase is JobPhase.ENDED


def test_a_plan_job_whose_instance_died_restarts_on_the_same_block(world: World) -> None:
    arn, (first, _) = _plan(world)
    world.clock.set(first.start_time)
    world.create_job("fragile", InstanceType=P5, TrainingPlanArn=arn)
    world.pass_()
    _started(world, "fragile", attempt=1)
    world.advance(minutes=5)
    world.instances.kill(world.key("fragile"))
    world.look("fragile")  # the reconciler's look at its instances finds the agent gone
    world.passes(3)
    job = world.job("fragile")
    assert job.status == "InProgress"
    assert ("Interrupted", plan_rules.INSTANCE_LOST) in world.messages("fragile")
    # (Its try's run time is read against the wall clock: the agent reported no end.)
    assert job.runtime.attempt == 2 and job.runtime.placement is not None
    assert job.runtime.placement.block == first.id
    assert world.instances.launched[-1][1].attempt == 2
