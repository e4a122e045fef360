"""Training jobs on training plans (spec §3.4) with boto3 against a manual-clock server."""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.plan_helpers import GB200, search, set_clock, settle, tomorrow_at, ultraserver_plan
from tests.e2e.test_training_jobs import s3_path, script_job, wait_for
from tests.e2e.test_warm_pools import wait_warm
from tests.harness import UID, WAIT_FOR_GATE, DockyardServer, open_gate, run_cli

P5 = "ml.p5.48xlarge"

# Counts STEPS steps of a deterministic computation, checkpointing every EVERY steps
# (and at SIGTERM's grace it simply dies: the last checkpoint is what survives).
STEPPER = """
    import json, os, pathlib, time
    checkpoints = pathlib.Path("/opt/ml/checkpoints")
    checkpoints.mkdir(parents=True, exist_ok=True)
    saved = checkpoints / "state.json"
    steps, every = int(os.environ["SM_HP_STEPS"]), int(os.environ["SM_HP_EVERY"])
    state = json.loads(saved.read_text()) if saved.exists() else {"step": 0, "x": 7}
    print("restart", os.environ["SM_RESTART_COUNT"], "from", state["step"], flush=True)
    step, x = state["step"], state["x"]
    while step < steps:
        x = (x * 31 + step) % 1000003
        step += 1
        if step % every == 0:
            saved.write_text(json.dumps({"step": step, "x": x}))
            print("checkpoint", step, flush=True)
        time.sleep(float(os.environ["SM_HP_PAUSE"]))
    model = pathlib.Path(os.environ["SM_MODEL_DIR"]) / "model.json"
    model.write_text(json.dumps({"x": x}))
    print("done", x, flush=True)
"""


def at(day0: datetime, days: int, hour: int = 11, minute: int = 30) -> datetime:
    return day0.replace(hour=hour, minute=minute) + timedelta(days=days)


@pytest.fixture(autouse=True)
def buckets(manual_server: DockyardServer) -> None:
    for bucket in ("results", "data"):
        (manual_server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)


def buy(client: Any, name: str, offering: dict[str, Any]) -> str:
    return str(
        client.create_training_plan(
            TrainingPlanName=name, TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )["TrainingPlanArn"]
    )


def stepper(
    server: DockyardServer, name: str, plan_arn: str | None, steps: int = 60, **hps: str
) -> dict[str, Any]:
    request = script_job(
        server,
        name,
        STEPPER,
        HyperParameters={"steps": str(steps), "every": "5", "pause": "0.02", **hps},
        CheckpointConfig={"S3Uri": f"s3://results/checkpoints/{name}"},
    )
    if plan_arn:
        request["ResourceConfig"] = {
            "InstanceType": P5,
            "InstanceCount": 1,
            "VolumeSizeInGB": 10,
            "TrainingPlanArn": plan_arn,
        }
    return request


def lines(server: DockyardServer, name: str) -> list[str]:
    path = (
        next((server.data_dir / "instances").glob(f"*-{name}-{UID}/algo-1")) / "logs/output.jsonl"
    )
    try:
        return [json.loads(line)["m"] for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def wait_line(server: DockyardServer, name: str, prefix: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not any(line.startswith(prefix) for line in lines(server, name)):
        assert time.monotonic() < deadline, (name, prefix, lines(server, name))
        time.sleep(0.05)


def wait_secondary(
    server: DockyardServer, client: Any, name: str, status: str, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.describe_training_job(TrainingJobName=name)
        if job["SecondaryStatus"] == status:
            return job
        assert time.monotonic() < deadline, (name, status, job["SecondaryStatusTransitions"])
        settle(server)
        time.sleep(0.1)


def model_of(server: DockyardServer, name: str) -> dict[str, Any]:
    archive = s3_path(server, f"s3://results/out/{name}/output/model.tar.gz")
    with tarfile.open(archive) as tar:
        member = tar.extractfile("model.json")
        assert member is not None
        return dict(json.load(io.TextIOWrapper(member)))


def two_zone_plan(server: DockyardServer, d0: datetime) -> tuple[str, list[dict[str, Any]]]:
    """A 1-instance plan: a block on day 0 in one AZ and one on day 2 in another."""
    client = server.client()
    # Every AZ is full on day 1, and us-east-1a on day 2 as well.
    for day, zones in ((1, None), (2, {"us-east-1a"})):
        for offering in search(
            client,
            InstanceType=P5,
            InstanceCount=8,
            DurationHours=24,
            StartTimeAfter=at(d0, day),
            EndTimeBefore=at(d0, day + 1),
        ):
            zone = offering["ReservedCapacityOfferings"][0]["AvailabilityZone"]
            if zones is None or zone in zones:
                buy(client, f"blocker-{day}-{zone}", offering)
    offerings = search(
        client,
        InstanceType=P5,
        InstanceCount=1,
        DurationHours=48,
        StartTimeAfter=at(d0, 0),
        EndTimeBefore=at(d0, 3),
    )
    split = next(
        o
        for o in offerings
        if len({b["AvailabilityZone"] for b in o["ReservedCapacityOfferings"]}) == 2
    )
    blocks = split["ReservedCapacityOfferings"]
    assert [b["StartTime"] for b in blocks] == [at(d0, 0), at(d0, 2)]
    return buy(client, "two-zones", split), blocks


def test_a_job_queues_is_interrupted_twice_and_resumes_to_the_same_result(
    manual_server: DockyardServer,
) -> None:
    server = manual_server
    client = server.client()
    # The same job on demand, never interrupted: the result to match.
    client.create_training_job(**stepper(server, "reference", None))
    assert wait_for(client, "reference", {"Completed", "Failed"})["TrainingJobStatus"] == (
        "Completed"
    )
    expected = model_of(server, "reference")

    d0 = tomorrow_at(6)
    set_clock(server, d0)
    plan_arn, blocks = two_zone_plan(server, d0)
    # Slow enough on the plan for the clock to cut in while it runs.
    client.create_training_job(**stepper(server, "resumer", plan_arn, pause="0.25"))
    job = wait_secondary(server, client, "resumer", "Pending")
    assert at(d0, 0).isoformat() in job["SecondaryStatusTransitions"][-1]["StatusMessage"]
    listed = client.list_training_jobs(TrainingPlanArnEquals=plan_arn)["TrainingJobSummaries"]
    assert [j["TrainingJobName"] for j in listed] == ["resumer"]

    set_clock(server, at(d0, 0))  # the first block starts: the job starts by itself
    wait_secondary(server, client, "resumer", "Training")
    plan = client.describe_training_plan(TrainingPlanName="two-zones")
    assert (plan["InUseInstanceCount"], plan["AvailableInstanceCount"]) == (1, 0)
    wait_line(server, "resumer", "checkpoint 15")

    set_clock(server, at(d0, 1) - timedelta(minutes=30))  # 30 minutes left in block 1
    job = wait_secondary(server, client, "resumer", "Pending")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert "Interrupted" in statuses
    assert at(d0, 2).isoformat() in job["SecondaryStatusTransitions"][-1]["StatusMessage"]
    assert job["TrainingJobStatus"] == "InProgress"
    assert client.describe_training_plan(TrainingPlanName="two-zones")["InUseInstanceCount"] == 0

    set_clock(server, at(d0, 2))  # block 2, in the other AZ
    job = wait_secondary(server, client, "resumer", "Training")
    restarting = [t for t in job["SecondaryStatusTransitions"] if t["Status"] == "Restarting"]
    assert restarting and blocks[1]["AvailabilityZone"] in restarting[0]["StatusMessage"]
    wait_line(server, "resumer", "restart 1 from ")
    resumed_from = int(
        next(line for line in lines(server, "resumer") if line.startswith("restart 1")).split()[-1]
    )
    assert resumed_from >= 15

    # Second interruption: the instance dies; on reserved capacity the job restarts.
    deadline = time.monotonic() + 60
    while sum(line.startswith("checkpoint") for line in lines(server, "resumer")) < 6:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    home = next((server.data_dir / "instances").glob(f"*-resumer-{UID}/algo-1"))
    state = json.loads((home / "state.json").read_text())
    os.kill(int((home / "agent.pid").read_text()), signal.SIGKILL)
    os.killpg(int(state["pid"]), signal.SIGKILL)
    job = wait_for(client, "resumer", {"Completed", "Failed", "Stopped"}, timeout=120)
    assert job["TrainingJobStatus"] == "Completed", job["SecondaryStatusTransitions"]
    assert "restart 2 from" in " ".join(lines(server, "resumer"))
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]].count("Interrupted") == 2
    assert model_of(server, "resumer") == expected
    # Time actually run, not the two days the job spent on the plan: MaxRuntime and
    # billing count only the attempts (the third attempt's agent got the rest of 600 s).
    assert job["BillableTimeInSeconds"] < 120
    attempt = json.loads((home / "job.json").read_text())
    assert attempt["attempt"] == 3 and attempt["max_runtime_seconds"] < 600

    # A job still running when the last block ends stops with the plan.
    client.create_training_job(**stepper(server, "too-long", plan_arn, steps=100000))
    wait_secondary(server, client, "too-long", "Training")
    set_clock(server, at(d0, 3) - timedelta(minutes=30))
    job = wait_for(client, "too-long", {"Completed", "Failed", "Stopped"}, timeout=120)
    assert job["TrainingJobStatus"] == "Stopped"
    last = job["SecondaryStatusTransitions"][-1]
    assert last["Status"] == "Stopped" and "training plan" in last["StatusMessage"]

    shown = run_cli(
        "plans", "show", "two-zones", "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    assert "resumer" in shown and "too-long" in shown


def one_block_plan(server: DockyardServer, d0: datetime, name: str, **search_args: Any) -> str:
    client = server.client()
    offering = search(
        client,
        **{
            "InstanceType": P5,
            "InstanceCount": 1,
            "DurationHours": 24,
            "StartTimeAfter": at(d0, 0),
            "EndTimeBefore": at(d0, 1),
            **search_args,
        },
    )[0]
    return buy(client, name, offering)


def test_jobs_share_a_plan_first_come_first_served(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    d0 = tomorrow_at(6)
    set_clock(server, d0)
    plan_arn = one_block_plan(server, d0, "shared")
    first = stepper(server, "first", plan_arn, steps=5)
    first["AlgorithmSpecification"] = {
        **first["AlgorithmSpecification"],
        "ContainerEntrypoint": ["python3", "-c", WAIT_FOR_GATE],
    }
    client.create_training_job(**first)
    second = stepper(server, "second", plan_arn, steps=5)
    second["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 3600
    client.create_training_job(**second)
    set_clock(server, at(d0, 0))
    wait_secondary(server, client, "first", "Training")
    second = wait_secondary(server, client, "second", "Pending")
    assert (
        "0 of its instances are free" in second["SecondaryStatusTransitions"][-1]["StatusMessage"]
    )
    open_gate(server, "first")
    assert wait_for(client, "first", {"Completed"})
    assert (
        wait_for(client, "second", {"Completed", "Failed"}, timeout=120)["TrainingJobStatus"]
        == "Completed"
    )
    # Its warm pool sits in the block, and holds the block's one instance meanwhile.
    assert wait_warm(client, "second", "Available", server)
    assert client.describe_training_plan(TrainingPlanName="shared")["InUseInstanceCount"] == 1
    # Inside the block's last 30 minutes the pool ends with the block's working time,
    # and no new work starts; with no block after it, a new job ends at once.
    set_clock(server, at(d0, 1) - timedelta(minutes=30))
    pool = client.describe_training_job(TrainingJobName="second")["WarmPoolStatus"]
    assert pool["Status"] == "Terminated"
    client.create_training_job(**stepper(server, "late", plan_arn, steps=5))
    late = wait_for(client, "late", {"Completed", "Failed", "Stopped"})
    assert late["TrainingJobStatus"] == "Stopped"
    assert "training plan" in late["SecondaryStatusTransitions"][-1]["StatusMessage"]


def test_wrong_plans_are_refused(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    d0 = tomorrow_at(6)
    set_clock(server, d0)
    plan_arn = one_block_plan(server, d0, "mine")
    cluster_plan = one_block_plan(server, d0, "for-clusters", TargetResources=["hyperpod-cluster"])
    _, key = server.new_account("stranger")
    theirs = server.client(key=key)
    cases = [
        ("missing", plan_arn.replace("mine", "nothing"), {}, "is not a training plan"),
        ("cluster", cluster_plan, {}, "not for training jobs"),
        ("type", plan_arn, {"InstanceType": "ml.p4d.24xlarge"}, "reserves ml.p5.48xlarge"),
        ("count", plan_arn, {"InstanceCount": 2}, "holds 1 instances"),
    ]
    for label, arn, change, words in cases:
        request = stepper(server, f"wrong-{label}", arn)
        request["ResourceConfig"].update(change)
        with pytest.raises(ClientError) as error:
            client.create_training_job(**request)
        assert error.value.response["Error"]["Code"] == "ValidationException", label
        assert words in error.value.response["Error"]["Message"], label
    with pytest.raises(ClientError) as error:
        theirs.create_training_job(**stepper(server, "wrong-account", plan_arn))
    assert "is not a training plan of this account" in error.value.response["Error"]["Message"]


def _placed_instances(server: DockyardServer, name: str) -> list[str]:
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{server.data_dir / 'dockyard.db'}")
    try:
        with engine.connect() as connection:
            runtime = connection.execute(
                text("SELECT runtime FROM training_jobs WHERE name = :n"), {"n": name}
            ).scalar_one()
    finally:
        engine.dispose()
    runtime = json.loads(runtime) if isinstance(runtime, str) else runtime
    return list((runtime.get("placement") or {}).get("instances") or [])


def test_a_job_on_an_ultraserver_moves_to_the_spare_when_its_instance_fails(
    manual_server: DockyardServer,
) -> None:
    """spec §3.6: a failed instance is replaced from the UltraServer's spares; the job
    on it restarts from its checkpoints on healthy instances."""
    server = manual_server
    client = server.client()
    client.create_training_job(**stepper(server, "reference", None))
    assert wait_for(client, "reference", {"Completed", "Failed"})["TrainingJobStatus"] == (
        "Completed"
    )
    expected = model_of(server, "reference")
    plan_arn, start = ultraserver_plan(server, "nvl", spares=1)
    request = stepper(server, "on-nvl", None, pause="0.1")
    request["ResourceConfig"] = {
        "InstanceType": GB200,
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
        "TrainingPlanArn": plan_arn,
    }
    client.create_training_job(**request)
    set_clock(server, start)
    wait_line(server, "on-nvl", "checkpoint 15")
    [first] = _placed_instances(server, "on-nvl")
    run_cli("fleet", "fail", first, "--endpoint-url", server.endpoint, data_dir=server.data_dir)
    job = wait_for(client, "on-nvl", {"Completed", "Failed", "Stopped"}, timeout=120)
    assert job["TrainingJobStatus"] == "Completed", job["SecondaryStatusTransitions"]
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert "Interrupted" in statuses and "Restarting" in statuses
    interrupted = next(
        t for t in job["SecondaryStatusTransitions"] if t["Status"] == "Interrupted"
    )
    assert "instance" in interrupted["StatusMessage"]
    resumed = next(line for line in lines(server, "on-nvl") if line.startswith("restart 1"))
    assert int(resumed.split()[-1]) >= 15
    assert model_of(server, "on-nvl") == expected
    [second] = _placed_instances(server, "on-nvl")
    assert second != first  # the attempt that finished ran on another (healthy) instance
    servers = client.list_ultra_servers_by_reserved_capacity(
        ReservedCapacityArn=client.describe_training_plan(TrainingPlanName="nvl")[
            "ReservedCapacitySummaries"
        ][0]["ReservedCapacityArn"]
    )["UltraServers"]
    assert servers[0]["UnhealthyInstanceCount"] == 1


def test_a_warm_pool_on_an_ultraserver_ends_with_its_own_instance(
    manual_server: DockyardServer,
) -> None:
    """A warm pool kept on an UltraServer block holds its instances by id: another
    instance's failure leaves it be, its own ends it."""
    server = manual_server
    client = server.client()
    plan_arn, start = ultraserver_plan(server, "nvl-warm")
    set_clock(server, start)
    request = stepper(server, "kept", None, steps=5)
    request["ResourceConfig"] = {
        "InstanceType": GB200,
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
        "TrainingPlanArn": plan_arn,
        "KeepAlivePeriodInSeconds": 600,
    }
    client.create_training_job(**request)
    assert wait_for(client, "kept", {"Completed", "Failed"})["TrainingJobStatus"] == "Completed"
    wait_warm(client, "kept", "Available", server)
    [mine] = _placed_instances(server, "kept")
    other = mine[:-2] + ("18" if not mine.endswith("18") else "17")
    fail = ("fleet", "fail", "--endpoint-url", server.endpoint)
    run_cli(*fail[:2], other, *fail[2:], data_dir=server.data_dir)
    settle(server)
    status = client.describe_training_job(TrainingJobName="kept")["WarmPoolStatus"]["Status"]
    assert status == "Available"
    run_cli(*fail[:2], mine, *fail[2:], data_dir=server.data_dir)
    wait_warm(client, "kept", "Terminated", server)
