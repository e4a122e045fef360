"""Managed warm pools with the fake backend (SPEC §5): a job with a keep-alive leaves
its instances Available; a matching next job is handed them (`assign` on the pool's
home, no launch), a different one is not; pools expire, are released by the user or
found unhealthy, and their instances are told to go until none runs."""

from __future__ import annotations

from datetime import timedelta

from dockyard.domain import warm_pools as rules
from tests.control.world import World

KEEP = 600


def _run_to_end(world: World, name: str, phase: str = "completed", **fields: str) -> None:
    key = world.key(name)
    world.instances.report(key, phase="training")
    world.pass_()
    world.advance(seconds=60)
    world.instances.finish(key, phase, **fields)  # type: ignore[arg-type]
    world.pass_()


def _kept(world: World, name: str = "first") -> None:
    world.create_job(name, KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    _run_to_end(world, name)


def test_a_completed_job_with_a_keep_alive_leaves_an_available_pool(world: World) -> None:
    _kept(world)
    job = world.job("first")
    assert (job.status, job.warm_pool_status) == ("Completed", "Available")
    (pool,) = world.warm_pools()
    assert (pool.status, pool.home, pool.job_id) == ("Available", world.key("first"), job.id)
    assert pool.deadline == world.clock.now() + timedelta(seconds=KEEP)
    # Its instances stay on the calendar as the pool's, and keep running.
    (lease,) = world.leases()
    assert (lease.kind, lease.count, lease.end_time) == ("warm-pool", 1, pool.deadline)
    assert world.instances.agent_of(world.key("first")).alive
    assert world.instances.releases == []


def test_a_matching_job_is_assigned_the_pools_instances_without_a_launch(
    world: World,
) -> None:
    _kept(world)
    home = world.key("first")
    world.advance(seconds=90)
    world.create_job("second", KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    second = world.job("second")
    assert world.instances.assigned == [(home, world.key("second"), "algo-1")]
    assert [key for key, _ in world.instances.launched] == [home]  # the first job's only
    assert second.runtime.home == home and second.warm_pool_status == "InUse"
    assert world.messages("second")[-1] == (
        "Starting",
        "Starting the training job using a warm pool (the instances of first).",
    )
    first = world.job("first")
    assert (first.warm_pool_status, first.warm_pool_reused_by) == ("Reused", "second")
    assert first.warm_pool_retained_seconds == 90
    (pool,) = world.warm_pools()
    assert (pool.status, pool.job_id) == ("InUse", second.id)
    (lease,) = world.leases()
    assert (lease.kind, lease.holder) == ("training-job", second.arn)

    # It runs on the pool's agent; when it ends the pool is Available again, for the
    # second job's own keep-alive, on the same instances.
    _run_to_end(world, "second")
    second = world.job("second")
    assert (second.status, second.warm_pool_status) == ("Completed", "Available")
    (pool,) = world.warm_pools()
    assert (pool.status, pool.job_id, pool.home) == ("Available", second.id, home)
    assert world.instances.agent_of(world.key("second")) is world.instances.agent_of(home)
    assert len(world.instances.launched) == 1


def test_a_job_that_does_not_match_starts_cold_and_leaves_the_pool(world: World) -> None:
    _kept(world)
    # Another RoleArn (SPEC §5.3: every listed field must be equal).
    world.create_job(
        "other-role", KeepAlivePeriodInSeconds=KEEP, RoleArn="arn:aws:iam::123456789012:role/x"
    )
    world.pass_()
    assert world.instances.assigned == []
    launched = [key for key, _ in world.instances.launched]
    assert world.key("other-role") in launched
    assert world.messages("other-role")[-1] == ("Starting", "Launching requested ML instances.")
    assert world.job("first").warm_pool_status == "Available"
    assert world.warm_pools()[0].status == "Available"


def test_a_pool_expires_and_its_instances_are_released(world: World) -> None:
    _kept(world)
    home = world.key("first")
    world.advance(seconds=KEEP - 1)
    world.pass_()
    assert world.warm_pools()[0].status == "Available"
    world.advance(seconds=1)
    world.pass_()
    (pool,) = world.warm_pools()
    assert (pool.status, pool.termination_reason) == ("Terminated", rules.EXPIRED)
    job = world.job("first")
    assert (job.warm_pool_status, job.warm_pool_retained_seconds) == ("Terminated", KEEP)
    assert world.leases() == []
    # Told to go: it was still running when told, so it is asked again next pass.
    assert world.instances.releases == [(home, ("algo-1",))]
    assert not pool.released
    world.pass_()
    assert world.warm_pools()[0].released
    assert world.instances.running_agents() == []
    world.passes(2)
    assert len(world.instances.releases) == 2  # released: never asked again


def test_a_keep_alive_set_to_zero_releases_the_pool_now(world: World) -> None:
    _kept(world)
    world.advance(seconds=30)
    world.update_keep_alive("first", 0)
    world.passes(2)
    (pool,) = world.warm_pools()
    assert (pool.status, pool.termination_reason, pool.released) == (
        "Terminated",
        rules.RELEASED,
        True,
    )
    assert world.job("first").warm_pool_retained_seconds == 30
    assert world.instances.running_agents() == []
    # A matching job now starts cold.
    world.create_job("later", KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    assert world.instances.assigned == []
    assert world.instances.launched[-1][0] == world.key("later")


def test_a_pool_whose_agent_died_is_terminated_as_unhealthy(world: World) -> None:
    world.create_job("first", KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    key = world.key("first")
    world.instances.report(key, phase="training")
    world.pass_()
    world.instances.finish(key)
    world.instances.kill(key)  # right after its last report
    world.pass_()
    (pool,) = world.warm_pools()
    assert (pool.status, pool.termination_reason) == ("Terminated", rules.UNHEALTHY)
    assert world.job("first").warm_pool_status == "Terminated"
    world.pass_()
    assert world.warm_pools()[0].released  # nothing runs: released at the first ask


def test_a_job_failed_by_the_infrastructure_keeps_nothing(world: World) -> None:
    world.create_job("broken", KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    _run_to_end(world, "broken", "failed", failure_reason="InternalServerError: disk gone")
    (pool,) = world.warm_pools()
    assert (pool.status, pool.termination_reason) == ("Terminated", rules.INFRASTRUCTURE)
    # An algorithm error keeps the instances (SPEC §5.1).
    world.create_job("buggy", KeepAlivePeriodInSeconds=KEEP)
    world.pass_()
    _run_to_end(world, "buggy", "failed", failure_reason="AlgorithmError: oops")
    assert world.job("buggy").warm_pool_status == "Available"
