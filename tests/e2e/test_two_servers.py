"""Two servers, one PostgreSQL database, one data dir: every job runs exactly once.

Issue 13: the jobs reconciler of each server claims a job for each step (store/claims.py),
so servers sharing a database never act on the same job at once. Both servers take
jobs from one queue (more jobs than instances, so they compete for every instance that
frees), and afterwards each job was placed once, ran once, and was billed once.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.harness import DockyardServer, instance_root

JOBS = 200
FLEET = """
[quotas]
training_instances_per_type = 1000

[[fleet]]
instance_type = "ml.m5.xlarge"
availability_zone = "us-east-1a"
count = 24
"""


@pytest.fixture
def two_servers(tmp_path: Path, postgres_url: str) -> Iterator[list[DockyardServer]]:
    config = tmp_path / "dockyard.toml"
    config.write_text(FLEET)
    servers = []
    try:
        for name in ("a", "b"):
            server = DockyardServer(tmp_path / "data", database_url=postgres_url)
            server.log_path = tmp_path / f"server-{name}.log"
            server.extra_args = ["--config", str(config)]
            servers.append(server.start())
        (tmp_path / "data" / "s3" / "results").mkdir(parents=True, exist_ok=True)
        yield servers
    finally:
        for server in servers:
            server.stop()


def _request(index: int) -> dict[str, object]:
    return {
        "TrainingJobName": f"once-{index:03d}",
        "AlgorithmSpecification": {
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-c", "print('ran')"],
        },
        "RoleArn": "arn:aws:iam::123456789012:role/two-servers",
        "OutputDataConfig": {"S3OutputPath": "s3://results/once"},
        "ResourceConfig": {
            "InstanceType": "ml.m5.xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 1,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def test_two_servers_on_one_database_run_each_job_exactly_once(
    two_servers: list[DockyardServer], postgres_url: str
) -> None:
    clients = [server.client() for server in two_servers]
    # Half the jobs through each server, several at a time.
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: clients[i % 2].create_training_job(**_request(i)), range(JOBS)))
    deadline = time.monotonic() + 600
    while True:
        statuses: dict[str, str] = {}
        for page in clients[0].get_paginator("list_training_jobs").paginate(MaxResults=100):
            for job in page["TrainingJobSummaries"]:
                statuses[job["TrainingJobName"]] = job["TrainingJobStatus"]
        if len(statuses) == JOBS and "InProgress" not in statuses.values():
            break
        assert time.monotonic() < deadline, statuses
        time.sleep(1)
    failed = {
        name: clients[0].describe_training_job(TrainingJobName=name).get("FailureReason")
        for name, status in statuses.items()
        if status != "Completed"
    }
    assert not failed

    # Placed once: each server logs the jobs it placed; together, each job once.
    placed: list[str] = []
    for server in two_servers:
        ours = re.findall(r"training job (once-\d+) placed", server.log_path.read_text())
        assert ours, f"server {server.port} placed no job: both must take part"
        placed += ours
    assert sorted(placed) == sorted(statuses)

    for index in range(JOBS):
        name = f"once-{index:03d}"
        job = clients[index % 2].describe_training_job(TrainingJobName=name)
        steps = [(t["Status"], t["StatusMessage"]) for t in job["SecondaryStatusTransitions"]]
        assert len(steps) == len(set(steps)), (name, steps)  # no step recorded twice
        # Ran once: one run of the job's code printed one line into its log.
        log = instance_root(two_servers[0], name) / "logs" / "output.jsonl"
        lines = [json.loads(line)["m"] for line in log.read_text().splitlines()]
        assert lines == ["ran"], (name, lines)

    # Billed once.
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            charges = connection.execute(
                text(
                    "SELECT resource_arn, COUNT(*) FROM ledger_entries "
                    "WHERE kind = 'training-job-instance-seconds' GROUP BY resource_arn"
                )
            ).all()
    finally:
        engine.dispose()
    assert len(charges) == JOBS and {count for _, count in charges} == {1}
