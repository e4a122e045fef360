"""Managed warm pools (spec §5) with boto3 against a manual-clock server.

The development account (the server's default key) starts with a warm pool quota, as
on `make run`; accounts made here start with none, as on AWS.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.plan_helpers import settle
from tests.e2e.test_service_quotas import aws, quota_codes
from tests.e2e.test_training_jobs import job_request, script_job, wait_for
from tests.harness import GATE, UID, WAIT_FOR_GATE, DockyardServer, open_gate, run_cli

KEEP = {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10}

# Prints which instance ran it (its /opt/ml is the instance's own directory, the same
# inode for every job the instance runs) and the pool's cache contents.
CODE = """
    import os, pathlib, time
    cache = pathlib.Path(os.environ["SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"])
    print("instance", os.stat("/opt/ml").st_ino, flush=True)
    print("cache", cache, sorted(p.name for p in cache.iterdir()), flush=True)
    (cache / os.environ["NOTE"]).write_text("kept")
    gate = pathlib.Path(os.environ.get("GATE", "/nonexistent"))
    while os.environ.get("GATE") and not gate.exists():
        time.sleep(0.02)
"""


@pytest.fixture(autouse=True)
def buckets(manual_server: DockyardServer) -> None:
    for bucket in ("results", "data"):
        (manual_server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)


def advance(server: DockyardServer, duration: str) -> None:
    run_cli(
        "clock", "advance", duration, "--endpoint-url", server.endpoint, data_dir=server.data_dir
    )


def warm_job(
    server: DockyardServer, name: str, keep_alive: int = 600, code: str = CODE, **overrides: Any
) -> dict[str, Any]:
    resources = {**KEEP, "KeepAlivePeriodInSeconds": keep_alive, **overrides.pop("rc", {})}
    request = script_job(server, name, code, ResourceConfig=resources, **overrides)
    request["Environment"] = {"NOTE": f"{name}.txt", **overrides.get("Environment", {})}
    return request


def job_output(server: DockyardServer, name: str) -> list[str]:
    logs = server.client("logs")
    streams = logs.describe_log_streams(
        logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{name}/"
    )["logStreams"]
    return [
        event["message"]
        for stream in streams
        for event in logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"]
        )["events"]
    ]


def wait_warm(client: Any, name: str, status: str, server: DockyardServer) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        job = client.describe_training_job(TrainingJobName=name)
        if job.get("WarmPoolStatus", {}).get("Status") == status:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: warm pool not {status}: {job.get('WarmPoolStatus')}")
        settle(server)


def cache_dir(server: DockyardServer, first_job: str) -> Path:
    homes = list((server.data_dir / "instances").glob(f"*-{first_job}-{UID}/algo-1"))
    assert len(homes) == 1
    return homes[0] / "opt" / "ml" / "sagemaker" / "warmpoolcache"


def ledger(server: DockyardServer, kind: str) -> list[tuple[str, str]]:
    with sqlite3.connect(server.data_dir / "dockyard.db") as db:
        return db.execute(
            "select resource_arn, amount from ledger_entries where kind = ?", (kind,)
        ).fetchall()


def test_a_pool_is_kept_reused_chained_and_terminated(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**warm_job(server, "first", keep_alive=600))
    first = wait_for(client, "first", {"Completed", "Failed", "Stopped"})
    assert first["TrainingJobStatus"] == "Completed", first.get("FailureReason")
    first = wait_warm(client, "first", "Available", server)
    assert first["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] < 5

    advance(server, "5m")
    first = client.describe_training_job(TrainingJobName="first")
    assert first["WarmPoolStatus"]["Status"] == "Available"
    assert 300 <= first["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] < 305
    assert [
        j["TrainingJobName"]
        for j in client.list_training_jobs(WarmPoolStatusEquals="Available")[
            "TrainingJobSummaries"
        ]
    ] == ["first"]

    client.create_training_job(
        **warm_job(server, "second", keep_alive=120, Environment={"GATE": GATE})
    )
    deadline = time.monotonic() + 30
    while client.describe_training_job(TrainingJobName="second")["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert client.describe_training_job(TrainingJobName="second")["WarmPoolStatus"] == {
        "Status": "InUse"
    }
    assert (
        client.describe_training_job(TrainingJobName="first")["WarmPoolStatus"]["Status"]
        == "Reused"
    )
    open_gate(server, "second")
    second = wait_for(client, "second", {"Completed", "Failed", "Stopped"})
    assert second["TrainingJobStatus"] == "Completed", second.get("FailureReason")
    starting = [t for t in second["SecondaryStatusTransitions"] if t["Status"] == "Starting"]
    assert any("warm pool" in t["StatusMessage"] for t in starting), starting
    assert not any("Launching" in t["StatusMessage"] for t in starting)

    first = client.describe_training_job(TrainingJobName="first")
    assert first["WarmPoolStatus"]["Status"] == "Reused"
    assert first["WarmPoolStatus"]["ReusedByJob"] == "second"
    assert 300 <= first["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] < 305

    # Same instance, and the cache the first job wrote.
    out_first, out_second = job_output(server, "first"), job_output(server, "second")
    instance = [line for line in out_first if line.startswith("instance")]
    assert instance and instance == [line for line in out_second if line.startswith("instance")]
    assert "'first.txt'" in next(line for line in out_second if line.startswith("cache"))

    second = wait_warm(client, "second", "Available", server)
    cache = cache_dir(server, "first")
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "first.txt",
        "second.txt",
    ]
    advance(server, "119s")
    assert (
        client.describe_training_job(TrainingJobName="second")["WarmPoolStatus"]["Status"]
        == "Available"
    )
    advance(server, "2s")
    second = client.describe_training_job(TrainingJobName="second")
    assert second["WarmPoolStatus"]["Status"] == "Terminated"
    assert 120 <= second["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] < 125
    deadline = time.monotonic() + 30
    while cache.exists() and time.monotonic() < deadline:
        settle(server)
        time.sleep(0.2)
    assert not cache.exists()

    billed = dict(ledger(server, "warm-pool-instance-seconds"))
    assert set(billed) == {first["TrainingJobArn"], second["TrainingJobArn"]}
    assert all(Decimal(amount) > 0 for amount in billed.values())


def quick_job(name: str, keep_alive: int = 0, code: str = "print('hi')", **overrides: Any) -> dict:
    """A ContainerEntrypoint job (no code upload): cheap to run many of."""
    resources = {**KEEP, **({"KeepAlivePeriodInSeconds": keep_alive} if keep_alive else {})}
    resources.update(overrides.pop("rc", {}))
    return job_request(name, code, ResourceConfig=resources, **overrides)


def started_warm(job: dict[str, Any]) -> bool:
    return any(
        t["Status"] == "Starting" and "warm pool" in t["StatusMessage"]
        for t in job["SecondaryStatusTransitions"]
    )


MISMATCHES: dict[str, dict[str, Any]] = {
    "role": {"RoleArn": "arn:aws:iam::123456789012:role/other"},
    "count": {"rc": {"InstanceCount": 2}},
    "type": {"rc": {"InstanceType": "ml.g5.xlarge"}},
    "kms": {"rc": {"VolumeKmsKeyId": "arn:aws:kms:us-east-1:123456789012:key/abc"}},
    "volume": {"rc": {"VolumeSizeInGB": 20}},
    "groups": {"VpcConfig": {"SecurityGroupIds": ["sg-2"], "Subnets": ["subnet-1"]}},
    "subnets": {"VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-2"]}},
    "encryption": {"EnableInterContainerTrafficEncryption": True},
    "isolation": {"EnableNetworkIsolation": True},
    "chaining": {"SessionChainingConfig": {"EnableSessionTagChaining": True}},
}
SLEEPER = "import time; print('up', flush=True); time.sleep(300)"
VPC = {"VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]}}


def test_only_a_job_matching_every_field_reuses_a_pool(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**quick_job("pool", keep_alive=3600, **VPC))
    wait_for(client, "pool", {"Completed"})
    wait_warm(client, "pool", "Available", server)
    for label, change in MISMATCHES.items():
        overrides = {**VPC, **{k: v for k, v in change.items()}}
        client.create_training_job(**quick_job(f"other-{label}", **overrides))
        job = wait_for(client, f"other-{label}", {"Completed", "Failed"})
        assert job["TrainingJobStatus"] == "Completed", (label, job.get("FailureReason"))
        assert not started_warm(job), label
        assert "WarmPoolStatus" not in job, label
        pool = client.describe_training_job(TrainingJobName="pool")["WarmPoolStatus"]
        assert pool["Status"] == "Available", label
    client.create_training_job(**quick_job("same", **VPC))
    job = wait_for(client, "same", {"Completed"})
    assert started_warm(job)
    pool = client.describe_training_job(TrainingJobName="pool")["WarmPoolStatus"]
    assert (pool["Status"], pool["ReusedByJob"]) == ("Reused", "same")
    # "same" asked for no keep-alive: the pool ends with it.
    assert wait_warm(client, "same", "Terminated", server)


def test_which_endings_keep_a_pool(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    # Algorithm error: kept.
    client.create_training_job(**quick_job("algo", 600, "raise SystemExit(3)"))
    assert wait_for(client, "algo", {"Failed"})["FailureReason"].startswith("AlgorithmError")
    wait_warm(client, "algo", "Available", server)
    # Client error (a program that does not exist): kept.
    bad = quick_job("client", 600)
    bad["AlgorithmSpecification"]["ContainerEntrypoint"] = ["no-such-program"]
    client.create_training_job(**bad)
    assert "ClientError" in wait_for(client, "client", {"Failed"})["FailureReason"]
    wait_warm(client, "client", "Available", server)
    # Stopped once training: kept.
    client.create_training_job(**quick_job("stopped", 600, SLEEPER))
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName="stopped")["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    client.stop_training_job(TrainingJobName="stopped")
    assert wait_for(client, "stopped", {"Stopped"})
    wait_warm(client, "stopped", "Available", server)
    # Stopped before any instance launched (waiting for capacity): nothing to keep.
    client.create_training_job(**quick_job("never", 600, rc={"InstanceCount": 5}))
    deadline = time.monotonic() + 30
    while client.describe_training_job(TrainingJobName="never")["SecondaryStatus"] != "Pending":
        assert time.monotonic() < deadline
        settle(server)
    client.stop_training_job(TrainingJobName="never")
    never = wait_for(client, "never", {"Stopped"})
    settle(server)
    assert "WarmPoolStatus" not in client.describe_training_job(TrainingJobName="never"), never
    # Infrastructure failure (the instance's agent dies): not kept.
    client.create_training_job(**quick_job("infra", 600, SLEEPER))
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName="infra")["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    home = next((server.data_dir / "instances").glob(f"*-infra-{UID}/algo-1"))
    state = json.loads((home / "state.json").read_text())
    os.kill(int((home / "agent.pid").read_text()), signal.SIGKILL)
    os.killpg(int(state["pid"]), signal.SIGKILL)
    failed = wait_for(client, "infra", {"Failed"})
    assert failed["FailureReason"].startswith("InternalServerError")
    assert wait_warm(client, "infra", "Terminated", server)


def test_update_training_job_changes_or_ends_the_keep_alive(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**quick_job("kept", 300))
    wait_for(client, "kept", {"Completed"})
    wait_warm(client, "kept", "Available", server)
    client.update_training_job(
        TrainingJobName="kept", ResourceConfig={"KeepAlivePeriodInSeconds": 1800}
    )
    job = client.describe_training_job(TrainingJobName="kept")
    assert job["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    advance(server, "10m")  # past the first 300 s, inside the new 1800
    assert (
        client.describe_training_job(TrainingJobName="kept")["WarmPoolStatus"]["Status"]
        == "Available"
    )

    listed = run_cli(
        "pools", "ls", "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    assert "kept" in listed and "Available" in listed and "20m00s" in listed
    released = run_cli(
        "pools", "release", "kept", "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    assert "Terminated" in released
    job = client.describe_training_job(TrainingJobName="kept")
    assert job["WarmPoolStatus"]["Status"] == "Terminated"
    assert 600 <= job["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] < 605

    # Only an Available pool can be changed.
    for name, seconds in (("kept", 60), ("kept", 0)):
        with pytest.raises(ClientError) as error:
            client.update_training_job(
                TrainingJobName=name, ResourceConfig={"KeepAlivePeriodInSeconds": seconds}
            )
        assert error.value.response["Error"]["Code"] == "ValidationException"
        assert "Terminated" in error.value.response["Error"]["Message"]
    client.create_training_job(**quick_job("running", 60, SLEEPER))
    with pytest.raises(ClientError) as error:
        client.update_training_job(
            TrainingJobName="running", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
        )
    assert error.value.response["Error"]["Code"] == "ValidationException"
    client.stop_training_job(TrainingJobName="running")
    with pytest.raises(ClientError) as error:
        client.update_training_job(
            TrainingJobName="nobody", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
        )
    assert error.value.response["Error"]["Code"] == "ResourceNotFound"
    with pytest.raises(ClientError) as error:
        client.update_training_job(
            TrainingJobName="kept", ResourceConfig={"KeepAlivePeriodInSeconds": 7200}
        )
    assert error.value.response["Error"]["Code"] == "ValidationException"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rc": {"KeepAlivePeriodInSeconds": 3601}}, "at most 3600"),
        ({"EnableManagedSpotTraining": True}, "spot"),
        (
            {
                "rc": {
                    "InstanceGroups": [
                        {
                            "InstanceType": "ml.m5.xlarge",
                            "InstanceCount": 1,
                            "InstanceGroupName": "a",
                        }
                    ]
                }
            },
            "heterogeneous",
        ),
    ],
)
def test_warm_pools_are_refused_where_they_cannot_be(
    server: DockyardServer, change: dict[str, Any], words: str
) -> None:
    request = quick_job("refused", 600, **change)
    with pytest.raises(ClientError) as error:
        server.client().create_training_job(**request)
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert words in error.value.response["Error"]["Message"]


def test_a_pool_lives_28_days_at_most(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**quick_job("long", 3600, WAIT_FOR_GATE))
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName="long")["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    advance(server, "27d23h50m")  # the job runs (on the server's clock) for almost 28 days
    open_gate(server, "long")
    wait_for(client, "long", {"Completed"})
    job = wait_warm(client, "long", "Available", server)
    advance(server, "9m")
    assert (
        client.describe_training_job(TrainingJobName="long")["WarmPoolStatus"]["Status"]
        == "Available"
    )
    advance(server, "2m")  # 28 days since the instances launched, long before the hour
    job = client.describe_training_job(TrainingJobName="long")
    assert job["WarmPoolStatus"]["Status"] == "Terminated"


def test_a_pool_survives_a_server_crash(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**warm_job(server, "before", keep_alive=900))
    wait_for(client, "before", {"Completed"})
    wait_warm(client, "before", "Available", server)
    server.kill()
    server.start()
    client = server.client()
    assert (
        client.describe_training_job(TrainingJobName="before")["WarmPoolStatus"]["Status"]
        == "Available"
    )
    client.create_training_job(**warm_job(server, "after", keep_alive=900))
    after = wait_for(client, "after", {"Completed", "Failed"})
    assert after["TrainingJobStatus"] == "Completed", after.get("FailureReason")
    assert started_warm(after)
    lines = job_output(server, "before"), job_output(server, "after")
    instances = [[line for line in out if line.startswith("instance")] for out in lines]
    assert instances[0] and instances[0] == instances[1]
    assert "'before.txt'" in next(line for line in lines[1] if line.startswith("cache"))


def run_state(server: DockyardServer, name: str) -> dict[str, Any]:
    run = next((server.data_dir / "instances").glob(f"*-{name}-{UID}/algo-1"))
    return dict(json.loads((run / "state.json").read_text()))


def test_the_environment_is_reused_and_reinstalled_only_on_change(
    manual_server: DockyardServer,
) -> None:
    server = manual_server
    client = server.client()
    code = """
        import sys, tomli_w
        print("python", sys.executable, flush=True)
        print(tomli_w.dumps({"ok": True}), flush=True)
    """
    marker = None
    for name, requirements in (
        ("env-1", "tomli-w==1.0.0\n"),
        ("env-2", "tomli-w==1.0.0\n"),
        ("env-3", "# changed\ntomli-w==1.0.0\n"),
    ):
        request = script_job(server, name, code, requirements=requirements)
        request["ResourceConfig"] = {**KEEP, "KeepAlivePeriodInSeconds": 600}
        client.create_training_job(**request)
        job = wait_for(client, name, {"Completed", "Failed"})
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        wait_warm(client, name, "Available", server)
        # The agent's record of what the instance's venv holds.
        record = cache_dir(server, "env-1").parent.parent.parent.parent / "venv.json"
        current = record.stat().st_mtime_ns
        if name == "env-1":
            assert run_state(server, name)["interpreter"] == "started"
        elif name == "env-2":
            # Same requirements: nothing installed, the parked interpreter ran it.
            assert current == marker
            assert run_state(server, name)["interpreter"] == "parked"
        else:
            assert current != marker  # installed again, into the same environment
        marker = current
        assert any("ok = true" in line for line in job_output(server, name))
    # uv's cache lives in the pool's persistent cache.
    assert (cache_dir(server, "env-1") / ".dockyard" / "uv").is_dir()


def test_quota_zero_keeps_nothing_until_an_increase_is_approved(
    manual_server: DockyardServer,
) -> None:
    server = manual_server
    account_id, key = server.new_account("no-warm-quota")
    client = server.client(key=key)
    # Its jobs write to a bucket of its own (the server's `results` is another account's).
    out = {"S3OutputPath": server.own_bucket("no-warm-quota-results", key=key) + "/out"}
    client.create_training_job(**quick_job("unkept", 600, OutputDataConfig=out))
    job = wait_for(client, "unkept", {"Completed"})
    job = wait_warm(client, "unkept", "Terminated", server)
    assert job["WarmPoolStatus"].get("ResourceRetainedBillableTimeInSeconds", 0) == 0
    # The instance went: nothing runs for it any more.
    home = next((server.data_dir / "instances").glob(f"*-unkept-{UID}/algo-1"))
    pid = int((home / "agent.pid").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        settle(server)
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()

    code = quota_codes(server.client("service-quotas", key=key))[
        "ml.m5.xlarge for training warm pool usage"
    ]
    request_id = aws(
        server,
        key,
        "service-quotas",
        "request-service-quota-increase",
        "--service-code",
        "sagemaker",
        "--quota-code",
        code,
        "--desired-value",
        "2",
    )["RequestedQuota"]["Id"]
    run_cli(
        "quotas",
        "approve",
        request_id,
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    )
    client.create_training_job(**quick_job("kept", 600, OutputDataConfig=out))
    wait_for(client, "kept", {"Completed"})
    wait_warm(client, "kept", "Available", server)
    # Two instances kept now: a third would be over the quota of 2 and is not kept.
    client.create_training_job(
        **quick_job("two", 600, rc={"InstanceCount": 2}, OutputDataConfig=out)
    )
    wait_for(client, "two", {"Completed"})
    wait_warm(client, "two", "Terminated", server)
    assert (
        client.describe_training_job(TrainingJobName="kept")["WarmPoolStatus"]["Status"]
        == "Available"
    )
    del account_id


def test_maintenance_terminates_the_pools_on_its_instances(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    client.create_training_job(**quick_job("before-patch", 3600))
    wait_for(client, "before-patch", {"Completed"})
    wait_warm(client, "before-patch", "Available", server)

    def operator(*args: str) -> str:
        return run_cli(*args, "--endpoint-url", server.endpoint, data_dir=server.data_dir).stdout

    out = operator("maintenance", "start", "--instance-type", "ml.m5.xlarge")
    assert "12 instance(s) now Maintenance" in out and "terminated 1 warm pool" in out
    job = client.describe_training_job(TrainingJobName="before-patch")
    assert job["WarmPoolStatus"]["Status"] == "Terminated"
    assert "out of service" in operator("fleet", "--instance-type", "ml.m5.xlarge")
    # Nothing new is placed on them meanwhile.
    client.create_training_job(**quick_job("during-patch"))
    waiting = wait_for_secondary(server, client, "during-patch", "Pending")
    assert "Waiting for capacity" in waiting["SecondaryStatusTransitions"][-1]["StatusMessage"]
    operator("maintenance", "end", "--instance-type", "ml.m5.xlarge")
    assert wait_for(client, "during-patch", {"Completed"})


def wait_for_secondary(
    server: DockyardServer, client: Any, name: str, status: str
) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job = client.describe_training_job(TrainingJobName=name)
        if job["SecondaryStatus"] == status:
            return job
        assert time.monotonic() < deadline, job["SecondaryStatusTransitions"]
        settle(server)


def test_a_pool_gives_way_to_a_plan_block_sold_for_its_instances(
    manual_server: DockyardServer,
) -> None:
    from tests.e2e.plan_helpers import search, set_clock, tomorrow_at

    server = manual_server
    client = server.client()
    d0 = tomorrow_at(6)
    block_start = d0.replace(hour=11, minute=30)
    set_clock(server, d0)
    # Every p5 of every AZ is sold from 11:30 for a day.
    for index, offering in enumerate(
        search(
            client,
            InstanceType="ml.p5.48xlarge",
            InstanceCount=8,
            DurationHours=24,
            StartTimeAfter=block_start,
            EndTimeBefore=block_start + timedelta(days=1),
        )
    ):
        client.create_training_plan(
            TrainingPlanName=f"sold-{index}",
            TrainingPlanOfferingId=offering["TrainingPlanOfferingId"],
        )
    set_clock(server, block_start - timedelta(minutes=40))
    client.create_training_job(
        **quick_job("before-block", 3600, rc={"InstanceType": "ml.p5.48xlarge"})
    )
    wait_for(client, "before-block", {"Completed"})
    wait_warm(client, "before-block", "Available", server)
    set_clock(server, block_start - timedelta(minutes=1))
    assert (
        client.describe_training_job(TrainingJobName="before-block")["WarmPoolStatus"]["Status"]
        == "Available"
    )
    set_clock(server, block_start)  # the block starts: the pool has already ended
    job = client.describe_training_job(TrainingJobName="before-block")
    assert job["WarmPoolStatus"]["Status"] == "Terminated"
    assert 38 * 60 <= job["WarmPoolStatus"]["ResourceRetainedBillableTimeInSeconds"] <= 40 * 60
