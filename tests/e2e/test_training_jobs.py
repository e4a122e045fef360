"""Training jobs really run on the local backend: boto3 against a live server."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.harness import DockyardServer

ROLE = "arn:aws:iam::123456789012:role/training"


def job_request(name: str, code: str, **overrides: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-c", textwrap.dedent(code)],
        },
        "RoleArn": ROLE,
        "OutputDataConfig": {"S3OutputPath": "s3://results/out"},
        "ResourceConfig": {
            "InstanceType": "ml.m5.xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 10,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    request.update(overrides)
    return request


def script_job(
    server: DockyardServer, name: str, code: str, requirements: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """A script-mode job, as the SageMaker SDK sends one: train.py in a tar.gz on S3."""
    archive = s3_path(server, f"s3://data/code/{name}.tar.gz")
    archive.parent.mkdir(parents=True, exist_ok=True)
    files = {"train.py": textwrap.dedent(code)}
    if requirements is not None:
        files["requirements.txt"] = requirements
    with tarfile.open(archive, "w:gz") as tar:
        for file_name, text in files.items():
            body = text.encode()
            info = tarfile.TarInfo(file_name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    request = job_request(name, "", **overrides)
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]
    request["HyperParameters"] = {
        **overrides.get("HyperParameters", {}),
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": f'"s3://data/code/{name}.tar.gz"',
    }
    return request


def wait_for(client: Any, name: str, statuses: set[str], timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = client.describe_training_job(TrainingJobName=name)
        if job["TrainingJobStatus"] in statuses:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} stayed {job['TrainingJobStatus']}: {job}")
        time.sleep(0.2)


def s3_path(server: DockyardServer, uri: str) -> Path:
    return server.data_dir / "s3" / uri.removeprefix("s3://")


@pytest.fixture(autouse=True)
def buckets(server: DockyardServer) -> None:
    """Local S3 buckets are directories under <data-dir>/s3; results land in `results`."""
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)


def test_a_job_reads_channels_and_writes_a_model(server: DockyardServer) -> None:
    for channel, files in {"train": {"a.txt": "1\n2\n"}, "test": {"b.txt": "3\n"}}.items():
        for file_name, body in files.items():
            path = s3_path(server, f"s3://data/{channel}/{file_name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
    code = """
        import json, os, pathlib
        train = pathlib.Path(os.environ["SM_CHANNEL_TRAIN"])
        test = pathlib.Path(os.environ["SM_CHANNEL_TEST"])
        files = [f for p in (train, test) for f in sorted(p.iterdir())]
        numbers = [int(x) for f in files for x in f.read_text().split()]
        print("loss=0.25", flush=True)
        hps = json.loads(os.environ["SM_HPS"])
        model = pathlib.Path(os.environ["SM_MODEL_DIR"]) / "model.json"
        model.write_text(json.dumps({"sum": sum(numbers), "lr": hps["lr"]}))
    """
    channels = [
        {
            "ChannelName": name,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": f"s3://data/{name}",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
        }
        for name in ("train", "test")
    ]
    client = server.client()
    arn = client.create_training_job(
        **script_job(
            server, "reads-channels", code, InputDataConfig=channels, HyperParameters={"lr": "0.5"}
        )
    )["TrainingJobArn"]
    assert arn.endswith(":training-job/reads-channels")
    job = wait_for(client, "reads-channels", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses[0] == "Starting" and statuses[-1] == "Completed"
    for step in ("Downloading", "Training", "Uploading"):
        assert step in statuses
    messages = [t["StatusMessage"] for t in job["SecondaryStatusTransitions"]]
    assert "Starting the training job." in messages and "Training job completed" in messages
    artifacts = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert artifacts == "s3://results/out/reads-channels/output/model.tar.gz"
    with tarfile.open(s3_path(server, artifacts)) as archive:
        model = archive.extractfile("model.json")
        assert model is not None
        assert model.read() == b'{"sum": 6, "lr": 0.5}'
    assert job["TrainingStartTime"] <= job["TrainingEndTime"]
    assert job["BillableTimeInSeconds"] >= 0
    with pytest.raises(client.exceptions.ResourceInUse):
        client.create_training_job(**job_request("reads-channels", "pass"))


def test_a_deleted_jobs_name_starts_from_nothing(server: DockyardServer) -> None:
    # Issue 12: a job created again under a deleted job's name once came back Completed
    # at once, with the old job's logs, model and start time.
    client, logs = server.client(), server.client("logs")
    client.create_training_job(**job_request("reborn", "print('first life', flush=True)"))
    old = wait_for(client, "reborn", {"Completed", "Failed", "Stopped"})
    assert old["TrainingJobStatus"] == "Completed", old.get("FailureReason")
    client.delete_training_job(TrainingJobName="reborn")
    code = "import time; time.sleep(2); print('second life', flush=True)"
    client.create_training_job(**job_request("reborn", code))
    again = client.describe_training_job(TrainingJobName="reborn")
    assert again["TrainingJobStatus"] == "InProgress"
    assert "TrainingStartTime" not in again or again["TrainingStartTime"] > old["TrainingEndTime"]
    new = wait_for(client, "reborn", {"Completed", "Failed", "Stopped"})
    assert new["TrainingJobStatus"] == "Completed", new.get("FailureReason")
    assert new["TrainingStartTime"] > old["TrainingEndTime"]
    streams = logs.describe_log_streams(
        logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="reborn/"
    )["logStreams"]
    assert len(streams) == 1
    events = logs.get_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs",
        logStreamName=streams[0]["logStreamName"],
        startFromHead=True,
    )["events"]
    lines = [event["message"] for event in events]
    assert "second life" in lines and "first life" not in lines


def test_names_that_differ_only_in_case_are_one_job(server: DockyardServer) -> None:
    # Issue 12: HoldCap and holdcap were two jobs with one (lower-cased) ARN, and one's
    # end freed the other's capacity lease.
    client = server.client()
    arn = client.create_training_job(**job_request("HoldCap", "pass"))["TrainingJobArn"]
    assert arn.endswith(":training-job/holdcap")
    for name in ("holdcap", "HOLDCAP", "holdCap"):
        with pytest.raises(client.exceptions.ResourceInUse) as refused:
            client.create_training_job(**job_request(name, "pass"))
        assert arn in refused.value.response["Error"]["Message"]
    listed = client.list_training_jobs(NameContains="holdcap", MaxResults=100)
    assert [j["TrainingJobName"] for j in listed["TrainingJobSummaries"]] == ["HoldCap"]


def test_a_failing_job_reports_its_failure_file(server: DockyardServer) -> None:
    code = """
        import os, pathlib, sys
        out = pathlib.Path(os.environ["SM_OUTPUT_DIR"]) / "failure"
        out.write_text("ValueError: the data had no rows")
        sys.exit(3)
    """
    client = server.client()
    client.create_training_job(**script_job(server, "fails", code))
    job = wait_for(client, "fails", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"] == "AlgorithmError: ValueError: the data had no rows"
    assert job["SecondaryStatus"] == "Failed"


def test_stop_a_running_job(server: DockyardServer) -> None:
    client = server.client()
    client.create_training_job(
        **job_request("sleeper", "import time; print('up', flush=True); time.sleep(300)")
    )
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName="sleeper")["SecondaryStatus"] != "Training":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    client.stop_training_job(TrainingJobName="sleeper")
    assert client.describe_training_job(TrainingJobName="sleeper")["TrainingJobStatus"] in (
        "Stopping",
        "Stopped",
    )
    job = wait_for(client, "sleeper", {"Stopped", "Failed", "Completed"})
    assert job["TrainingJobStatus"] == "Stopped" and job["SecondaryStatus"] == "Stopped"
    with pytest.raises(ClientError) as excinfo:
        client.stop_training_job(TrainingJobName="sleeper")
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"


def test_max_runtime(server: DockyardServer) -> None:
    client = server.client()
    client.create_training_job(
        **job_request(
            "overtime",
            "import time; time.sleep(300)",
            StoppingCondition={"MaxRuntimeInSeconds": 2},
        )
    )
    job = wait_for(client, "overtime", {"Stopped", "Failed", "Completed"})
    assert job["TrainingJobStatus"] == "Stopped"
    assert job["SecondaryStatus"] == "MaxRuntimeExceeded"


def test_a_job_that_cannot_fit_waits(server: DockyardServer) -> None:
    client = server.client()
    client.create_training_job(
        **job_request(
            "too-big",
            "pass",
            ResourceConfig={
                "InstanceType": "ml.m5.xlarge",
                "InstanceCount": 5,
                "VolumeSizeInGB": 10,
            },
        )
    )
    deadline = time.monotonic() + 30
    while True:
        job = client.describe_training_job(TrainingJobName="too-big")
        if job["SecondaryStatus"] == "Pending":
            break
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    assert "Waiting for capacity" in job["SecondaryStatusTransitions"][-1]["StatusMessage"]
    client.stop_training_job(TrainingJobName="too-big")
    assert wait_for(client, "too-big", {"Stopped"})["TrainingJobStatus"] == "Stopped"


def test_jobs_dockyard_cannot_run_are_refused(server: DockyardServer) -> None:
    client = server.client()
    request = job_request("no-entrypoint", "pass")
    del request["AlgorithmSpecification"]["ContainerEntrypoint"]
    with pytest.raises(ClientError) as excinfo:
        client.create_training_job(**request)
    assert "ContainerEntrypoint" in excinfo.value.response["Error"]["Message"]
    request = job_request("no-such-type", "pass")
    request["ResourceConfig"]["InstanceType"] = "ml.c5.xlarge"
    with pytest.raises(ClientError) as excinfo:
        client.create_training_job(**request)
    assert "no ml.c5.xlarge" in excinfo.value.response["Error"]["Message"]


@pytest.mark.parametrize("isolated", [True, False])
def test_network_isolation(server: DockyardServer, isolated: bool) -> None:
    """Neither kind of job reaches the server's port; only a job without isolation has a
    way out (a default route; test_requirements_are_installed_first uses it for PyPI)."""
    code = """
        import json, os, socket, subprocess
        verdicts = {}
        for where in ("127.0.0.1", "10.0.2.2"):  # this host's loopback, slirp's gateway
            try:
                socket.create_connection((where, int(os.environ["SERVER_PORT"])), timeout=3)
                verdicts[where] = "reached"
            except OSError:
                verdicts[where] = "refused"
        routes = open("/proc/net/route").read().splitlines()[1:]
        verdicts["default route"] = any(line.split()[1] == "00000000" for line in routes)
        open(os.path.join(os.environ["SM_MODEL_DIR"], "verdict"), "w").write(json.dumps(verdicts))
    """
    name = f"isolation-{str(isolated).lower()}"
    client = server.client()
    request = script_job(
        server,
        name,
        code,
        EnableNetworkIsolation=isolated,
        Environment={"SERVER_PORT": str(server.port)},
    )
    client.create_training_job(**request)
    job = wait_for(client, name, {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["EnableNetworkIsolation"] is isolated
    with tarfile.open(s3_path(server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
        member = archive.extractfile("verdict")
        assert member is not None
        assert json.loads(member.read()) == {
            "127.0.0.1": "refused",
            "10.0.2.2": "refused",
            "default route": not isolated,
        }


def test_requirements_are_installed_first(server: DockyardServer) -> None:
    code = """
        import os, tomli_w
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.toml"), "w") as out:
            out.write(tomli_w.dumps({"ok": True}))
    """
    name = "with-requirements"
    request = script_job(server, name, code, requirements="tomli-w==1.0.0\n")
    client = server.client()
    client.create_training_job(**request)
    job = wait_for(client, name, {"Completed", "Failed", "Stopped"}, timeout=180)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    with tarfile.open(s3_path(server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
        member = archive.extractfile("model.toml")
        assert member is not None and member.read() == b"ok = true\n"


def test_the_job_sees_its_tree_at_opt_ml(server: DockyardServer) -> None:
    code = """
        import json, os
        assert os.environ["SM_MODEL_DIR"] == "/opt/ml/model", os.environ["SM_MODEL_DIR"]
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
        assert "/opt/ml" in mounts, mounts
        config = json.load(open("/opt/ml/input/config/resourceconfig.json"))
        with open("/opt/ml/model/where.txt", "w") as out:
            out.write(config["current_host"] + " " + os.getcwd())
    """
    client = server.client()
    client.create_training_job(**script_job(server, "opt-ml", code))
    job = wait_for(client, "opt-ml", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    with tarfile.open(s3_path(server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
        member = archive.extractfile("where.txt")
        assert member is not None
        host, cwd = member.read().decode().split()
        assert host == "algo-1" and cwd.endswith("/opt/ml/code")
