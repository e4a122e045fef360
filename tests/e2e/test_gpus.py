"""GPUs on the local backend (issue 16): a fleet group lists the host's GPUs, each
instance runs on its own share of them, and inside it CUDA_VISIBLE_DEVICES, SM_NUM_GPUS
and the training environment's num_gpus say so - one 2-GPU host as two 1-GPU
instances, a warm pool keeping its GPU, an instance without GPUs seeing none."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_training_jobs import job_request
from tests.harness import DockyardServer

FLEET = """
[[fleet]]
instance_type = "ml.g5.xlarge"
availability_zone = "us-east-1a"
count = 2
gpus = [0, 1]

[[fleet]]
instance_type = "ml.m5.xlarge"
availability_zone = "us-east-1a"
count = 2
"""
# Prints what the instance was given (then, with SLEEP, stays up until stopped).
REPORT = (
    "import os,json,time as t;e=os.environ;print('GPUS',json.dumps([e.get('CUDA_VISIBLE_DEVICES'),"
    "e['SM_NUM_GPUS'],json.loads(e['SM_TRAINING_ENV'])['num_gpus']]),flush=1)"
)
SLEEP = ";t.sleep(600)"


@pytest.fixture
def gpu_server(tmp_path: Path) -> Iterator[DockyardServer]:
    config = tmp_path / "dockyard.toml"
    config.write_text(FLEET)
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--config", str(config)]
    server.start()
    yield server
    server.stop()


def request(
    name: str, instance_type: str, code: str = REPORT + SLEEP, **resources: Any
) -> dict[str, Any]:
    return job_request(
        name,
        code,
        OutputDataConfig={"S3OutputPath": "s3://dockyard-jobs/out"},
        ResourceConfig={
            "InstanceType": instance_type,
            "InstanceCount": 1,
            "VolumeSizeInGB": 10,
            **resources,
        },
    )


def reported(server: DockyardServer, name: str, timeout: float = 120) -> list[Any]:
    logs = server.client("logs")
    deadline = time.monotonic() + timeout
    while True:
        streams = logs.describe_log_streams(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{name}/"
        )["logStreams"]
        for stream in streams:
            events = logs.get_log_events(
                logGroupName="/aws/sagemaker/TrainingJobs",
                logStreamName=stream["logStreamName"],
                startFromHead=True,
            )["events"]
            for event in events:
                if event["message"].startswith("GPUS "):
                    return list(json.loads(event["message"].removeprefix("GPUS ")))
        assert time.monotonic() < deadline, f"{name} reported no GPUs"
        time.sleep(0.2)


def wait_status(server: DockyardServer, name: str, status: str, timeout: float = 120) -> None:
    client = server.client()
    deadline = time.monotonic() + timeout
    while client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] != status:
        assert time.monotonic() < deadline, name
        time.sleep(0.2)


def test_each_instance_runs_on_its_own_gpus(gpu_server: DockyardServer) -> None:
    server = gpu_server
    client = server.client()
    # Two 1-GPU instances of one 2-GPU host, at once: one GPU each.
    for name in ("gpu-a", "gpu-b"):
        client.create_training_job(**request(name, "ml.g5.xlarge"))
    seen = [reported(server, name) for name in ("gpu-a", "gpu-b")]
    assert sorted(seen) == [["0", "1", 1], ["1", "1", 1]]
    # An instance without GPUs sees none (not the host's).
    client.create_training_job(**request("cpu", "ml.m5.xlarge"))
    assert reported(server, "cpu") == ["", "0", 0]
    for name in ("gpu-a", "gpu-b", "cpu"):
        client.stop_training_job(TrainingJobName=name)
    for name in ("gpu-a", "gpu-b", "cpu"):
        wait_status(server, name, "Stopped")
    # A warm pool keeps its instance's GPU for the job that reuses it.
    client.create_training_job(
        **request("warm-1", "ml.g5.xlarge", REPORT, KeepAlivePeriodInSeconds=600)
    )
    first = reported(server, "warm-1")
    deadline = time.monotonic() + 120
    while (
        client.describe_training_job(TrainingJobName="warm-1")
        .get("WarmPoolStatus", {})
        .get("Status")
        != "Available"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    client.create_training_job(
        **request("warm-2", "ml.g5.xlarge", REPORT, KeepAlivePeriodInSeconds=600)
    )
    assert reported(server, "warm-2") == first
    warm = client.describe_training_job(TrainingJobName="warm-1")["WarmPoolStatus"]
    assert warm.get("ReusedByJob") == "warm-2"
