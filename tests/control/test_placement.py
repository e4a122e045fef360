"""Placing jobs on demand (SPEC §2.2-2.3): instances of one AZ free for the whole
MaxRuntime, leased and launched once; a job that does not fit waits, saying why, and
starts by itself, first come first served, when capacity frees."""

from __future__ import annotations

from datetime import timedelta

from dockyard.services import capacity
from tests.control.world import M5, World

WAITING = (
    "Waiting for capacity: no 2 x ml.m5.xlarge free in one availability zone of us-east-1 "
    "for 3600 seconds"
)


def _complete(world: World, name: str) -> None:
    key = world.key(name)
    world.instances.report(key, phase="training")
    world.instances.finish(key)
    # The pass that ends it frees its capacity; the next (soon after) places on it.
    world.passes(2)


def test_an_on_demand_job_is_leased_for_its_max_runtime_and_launched_once(
    world: World,
) -> None:
    world.create_job("first", InstanceCount=2, MaxRuntimeInSeconds=1800)
    world.pass_()
    job = world.job("first")
    placement = job.runtime.placement
    assert placement is not None and placement.az == "us-east-1a"
    assert world.messages("first")[-1] == ("Starting", "Launching requested ML instances.")
    (lease,) = world.leases("training-job")
    assert (lease.holder, lease.count, lease.pool_key) == (job.arn, 2, placement.pool)
    assert lease.end_time - lease.start_time == timedelta(seconds=1800)
    # One instance per host, told where it runs and for how long.
    launched = world.instances.launched
    assert [(key, spec.host) for key, spec in launched] == [
        (world.key("first"), "algo-1"),
        (world.key("first"), "algo-2"),
    ]
    spec = launched[0][1]
    assert (spec.pool, spec.availability_zone, spec.max_runtime_seconds) == (
        placement.pool,
        "us-east-1a",
        1800,
    )
    assert spec.hosts == ["algo-1", "algo-2"] and spec.attempt == 1
    # Stepped again (its agents report): never launched twice.
    world.instances.report(world.key("first"), "algo-1", "downloading")
    world.passes(2)
    assert len(world.instances.launched) == 2
    assert world.job("first").secondary_status == "Starting"  # algo-2 has not started yet
    world.instances.report(world.key("first"), "algo-2", "downloading")
    world.pass_()
    assert world.job("first").secondary_status == "Downloading"


def test_a_job_that_does_not_fit_waits_pending_and_starts_when_capacity_frees(
    world: World,
) -> None:
    for name in ("a", "b", "c", "d"):
        world.create_job(name, InstanceCount=2)
    world.pass_()
    # Two instances in each AZ: a and b take them; c and d wait, saying why.
    assert world.job("a").runtime.placement.az == "us-east-1a"  # type: ignore[union-attr]
    assert world.job("b").runtime.placement.az == "us-east-1b"  # type: ignore[union-attr]
    for name in ("c", "d"):
        job = world.job(name)
        assert (job.status, job.secondary_status) == ("InProgress", "Pending")
        assert world.messages(name)[-1] == ("Pending", WAITING)
        assert job.runtime.placement is None
    assert {key for key, _ in world.instances.launched} == {world.key("a"), world.key("b")}
    assert world.free(M5, "us-east-1a") == world.free(M5, "us-east-1b") == 0
    # Passes while nothing changes leave them waiting.
    world.passes(2)
    assert world.job("c").secondary_status == "Pending"

    # a ends: its instances are the first waiting job's, c's - never d's first.
    _complete(world, "a")
    assert world.job("a").status == "Completed"
    c = world.job("c")
    assert c.runtime.placement is not None and c.runtime.placement.az == "us-east-1a"
    assert world.messages("c")[-2:] == [
        ("Pending", WAITING),
        ("Starting", "Launching requested ML instances."),
    ]
    assert world.job("d").secondary_status == "Pending"
    assert world.instances.launched[-1][0] == world.key("c")

    _complete(world, "b")
    assert world.job("d").runtime.placement.az == "us-east-1b"  # type: ignore[union-attr]


def test_a_job_larger_than_any_zone_waits_without_holding_up_smaller_ones(
    world: World,
) -> None:
    world.create_job("huge", InstanceCount=3)
    world.create_job("small", InstanceCount=1)
    world.pass_()
    huge = world.job("huge")
    assert huge.secondary_status == "Pending" and huge.runtime.placement is None
    assert "no 3 x ml.m5.xlarge free in one availability zone" in world.messages("huge")[-1][1]
    assert world.job("small").runtime.placement is not None


def test_on_demand_jobs_backfill_only_around_a_later_reservation(world: World) -> None:
    """Capacity reserved from 2 hours from now on every ml.m5.xlarge instance: a job
    that ends before then starts now; one that would run into it waits."""
    now = world.clock.now()
    with world.db.session() as session:
        capacity.lock(session)
        pools = capacity.load_calendar(session, now, instance_type=M5).pools()
        capacity.reserve(
            session,
            [(pool.key, pool.capacity) for pool in pools],
            now + timedelta(hours=2),
            now + timedelta(hours=5),
            kind="reserved-capacity",
            holder="rc-test",
            account_id=None,
        )
    world.create_job("long", MaxRuntimeInSeconds=3 * 3600)
    world.create_job("short", MaxRuntimeInSeconds=3600)
    world.pass_()
    assert world.job("long").secondary_status == "Pending"
    assert "for 10800 seconds" in world.messages("long")[-1][1]
    short = world.job("short")
    assert short.runtime.placement is not None
    (lease,) = world.leases("training-job")
    assert lease.end_time <= now + timedelta(hours=2)

    # Past the reservation the long job fits: it starts by itself.
    world.advance(hours=5)
    world.pass_()
    assert world.job("long").runtime.placement is not None
