"""How jobs end, with the fake backend (SPEC §4.2-4.3): completed, failed with the
instance's reason, stopped by StopTrainingJob, MaxRuntime, an agent that died, and a
job whose steps keep failing given up on - each through the one ending path: the end
recorded, the capacity released."""

from __future__ import annotations

from typing import Any

from dockyard.domain.job_runtime import JobPhase
from tests.control.world import M5, World

DIED = "InternalServerError: an instance's agent exited unexpectedly"


def _training(world: World, name: str, **changes: Any) -> str:
    world.create_job(name, **changes)
    world.pass_()
    key = world.key(name)
    for run in world.instances.runs_of(key):
        world.instances.report(key, run.host, "training")
    world.pass_()
    assert world.job(name).secondary_status == "Training"
    return key


def _ended_cleanly(world: World, name: str) -> None:
    job = world.job(name)
    assert job.runtime.phase is JobPhase.ENDED and job.claim_owner is None
    assert world.leases("training-job") == []
    assert world.free(M5, "us-east-1a") == 2


def test_a_completed_job_records_its_end_and_final_metrics(world: World) -> None:
    key = _training(
        world,
        "done",
        AlgorithmSpecification={
            "TrainingImage": "python:3.11",
            "ContainerEntrypoint": ["python", "train.py"],
            "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        },
    )
    world.advance(minutes=5)
    world.instances.set_metrics(key, "algo-1", {"loss": (0.25, 1_000)})
    world.instances.report(key, phase="uploading")
    world.pass_()
    assert world.job("done").secondary_status == "Uploading"
    world.advance(seconds=30)
    world.instances.finish(key)
    world.pass_()
    job = world.job("done")
    assert (job.status, job.secondary_status, job.failure_reason) == (
        "Completed",
        "Completed",
        None,
    )
    assert job.training_end_time == world.clock.now()
    assert job.final_metrics is not None
    (metric,) = job.final_metrics["items"]
    assert (metric["MetricName"], metric["Value"]) == ("loss", 0.25)
    assert world.instances.stops == []
    _ended_cleanly(world, "done")


def test_a_job_fails_with_its_instances_failure_reason(world: World) -> None:
    key = _training(world, "buggy")
    world.instances.finish(key, "failed", failure_reason="AlgorithmError: loss is NaN")
    world.pass_()
    job = world.job("buggy")
    assert (job.status, job.failure_reason) == ("Failed", "AlgorithmError: loss is NaN")
    assert world.messages("buggy")[-1] == ("Failed", "AlgorithmError: loss is NaN")
    _ended_cleanly(world, "buggy")


def test_a_job_failed_by_one_instance_stops_the_others(world: World) -> None:
    key = _training(world, "pair", InstanceCount=2)
    world.instances.report(key, "algo-2", "failed", failure_reason="AlgorithmError: rank 1")
    world.passes(2)
    assert world.job("pair").status == "Failed"
    assert world.instances.handle(key, "algo-1") in world.instances.stops


def test_stop_training_job_stops_the_instances_then_the_job(world: World) -> None:
    key = _training(world, "halted")
    world.stop_job("halted")
    assert world.job("halted").status == "Stopping"
    world.pass_()
    assert world.instances.stops == [world.instances.handle(key, "algo-1")]
    assert world.job("halted").status == "Stopping"  # until its instance has stopped
    world.instances.obey_stops()
    world.pass_()
    job = world.job("halted")
    assert (job.status, job.secondary_status) == ("Stopped", "Stopped")
    _ended_cleanly(world, "halted")


def test_a_queued_job_stopped_ends_without_instances(world: World) -> None:
    world.create_job("too-big", InstanceCount=3)
    world.pass_()
    world.stop_job("too-big")
    world.pass_()
    job = world.job("too-big")
    assert (job.status, job.billable_seconds) == ("Stopped", None)
    assert world.instances.launched == []


def test_a_job_past_its_max_runtime_is_stopped_as_max_runtime_exceeded(world: World) -> None:
    key = _training(world, "slow", MaxRuntimeInSeconds=600)
    world.advance(seconds=600)
    world.instances.finish(key, "stopped", stop_reason="max_runtime")  # its agent stops it
    world.pass_()
    job = world.job("slow")
    assert (job.status, job.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    _ended_cleanly(world, "slow")


def test_a_job_whose_agent_died_fails_as_an_infrastructure_fault(world: World) -> None:
    key = _training(world, "orphan", KeepAlivePeriodInSeconds=600)
    world.instances.kill(key)
    world.look("orphan")  # no wake-up comes from a dead agent: the periodic look finds it
    world.pass_()
    job = world.job("orphan")
    assert (job.status, job.failure_reason) == ("Failed", DIED)
    # Instances that may be damaged are not kept as a warm pool (SPEC §5.1).
    assert world.warm_pools()[0].status == "Terminated"
    _ended_cleanly(world, "orphan")


def test_a_passing_backend_error_is_retried_and_a_lasting_one_given_up_on(
    world: World,
) -> None:
    world.jobs.queue.backoff_first_seconds = 0.0  # the tries follow each other here
    world.instances.fail_next("launch", OSError("no space left on device"))
    world.create_job("retried")
    world.passes(2)
    assert world.job("retried").status == "InProgress"
    assert world.instances.launched[-1][0] == world.key("retried")

    world.instances.fail_next("launch", *(ValueError("the backend is broken"),) * 3)
    world.create_job("hopeless")
    world.passes(3)
    job = world.job("hopeless")
    assert job.status == "Failed" and job.failure_reason is not None
    assert job.failure_reason.startswith("InternalServerError: dockyard could not run the job")
    assert "the backend is broken" in job.failure_reason
    assert [lease.holder for lease in world.leases("training-job")] == [world.job("retried").arn]
