"""boto3 and the aws CLI against a live server: the first operations end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.fixtures import insert_training_jobs
from tests.harness import DockyardServer


def db_url(server: DockyardServer) -> str:
    return server.database_url or f"sqlite:///{server.data_dir / 'dockyard.db'}"


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[int, str, str]:
    response = excinfo.value.response
    return (
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Code"],
        response["Error"]["Message"],
    )


def test_list_training_jobs_starts_empty(server: DockyardServer) -> None:
    account, key = server.new_account("empty-list")
    response = server.client(key=key).list_training_jobs()
    assert response["TrainingJobSummaries"] == []
    assert "NextToken" not in response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["ResponseMetadata"]["RequestId"]


def test_describe_missing_job_is_resource_not_found(server: DockyardServer) -> None:
    client = server.client()
    with pytest.raises(client.exceptions.ResourceNotFound) as excinfo:
        client.describe_training_job(TrainingJobName="no-such-job")
    status, code, message = error_of(excinfo)
    assert (status, code) == (400, "ResourceNotFound")
    assert "no-such-job" in message


def test_describe_and_list_return_what_is_stored(server: DockyardServer) -> None:
    account, key = server.new_account("reader")
    insert_training_jobs(db_url(server), account, ["job-a", "job-b", "job-c"])
    client = server.client(key=key)
    job = client.describe_training_job(TrainingJobName="job-b")
    assert job["TrainingJobArn"] == f"arn:aws:sagemaker:us-east-1:{account}:training-job/job-b"
    assert job["TrainingJobStatus"] == "Completed"
    assert job["ResourceConfig"]["InstanceType"] == "ml.m5.xlarge"
    assert job["CreationTime"] == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)

    names = [s["TrainingJobName"] for s in client.list_training_jobs()["TrainingJobSummaries"]]
    assert names == ["job-a", "job-b", "job-c"]
    descending = client.list_training_jobs(SortBy="Name", SortOrder="Descending")
    assert [s["TrainingJobName"] for s in descending["TrainingJobSummaries"]] == [
        "job-c",
        "job-b",
        "job-a",
    ]
    only_b = client.list_training_jobs(NameContains="-B")["TrainingJobSummaries"]
    assert [s["TrainingJobName"] for s in only_b] == ["job-b"]
    after = client.list_training_jobs(CreationTimeAfter=datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    assert len(after["TrainingJobSummaries"]) == 2
    assert client.list_training_jobs(StatusEquals="Failed")["TrainingJobSummaries"] == []


def test_pagination_walks_every_job_once(server: DockyardServer) -> None:
    account, key = server.new_account("pager")
    names = [f"paged-{i:02d}" for i in range(23)]
    insert_training_jobs(db_url(server), account, names)
    client = server.client(key=key)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        kwargs = {"MaxResults": 10, **({"NextToken": token} if token else {})}
        response = client.list_training_jobs(**kwargs)
        seen += [s["TrainingJobName"] for s in response["TrainingJobSummaries"]]
        pages += 1
        token = response.get("NextToken")
        if not token:
            break
    assert seen == names and pages == 3
    paginated = client.get_paginator("list_training_jobs").paginate(
        PaginationConfig={"PageSize": 7}
    )
    assert [s["TrainingJobName"] for p in paginated for s in p["TrainingJobSummaries"]] == names


def test_next_token_from_another_query_is_refused(server: DockyardServer) -> None:
    account, key = server.new_account("tokens")
    insert_training_jobs(db_url(server), account, [f"t-{i}" for i in range(5)])
    client = server.client(key=key)
    token = client.list_training_jobs(MaxResults=2)["NextToken"]
    with pytest.raises(ClientError) as excinfo:
        client.list_training_jobs(MaxResults=2, NextToken=token, SortBy="Name")
    assert error_of(excinfo)[1] == "ValidationException"
    with pytest.raises(ClientError) as excinfo:
        client.list_training_jobs(NextToken="garbage!")
    assert error_of(excinfo)[1] == "ValidationException"


def test_one_account_never_sees_another(server: DockyardServer) -> None:
    alice, alice_key = server.new_account("alice")
    bob, bob_key = server.new_account("bob")
    insert_training_jobs(db_url(server), alice, ["alice-secret-job"])
    insert_training_jobs(db_url(server), bob, ["shared-name"])
    insert_training_jobs(
        db_url(server), alice, ["shared-name"], start=datetime(2026, 2, 1, tzinfo=UTC)
    )
    alice_client, bob_client = server.client(key=alice_key), server.client(key=bob_key)

    bob_names = [
        s["TrainingJobName"] for s in bob_client.list_training_jobs()["TrainingJobSummaries"]
    ]
    assert bob_names == ["shared-name"]
    with pytest.raises(bob_client.exceptions.ResourceNotFound):
        bob_client.describe_training_job(TrainingJobName="alice-secret-job")
    assert bob in bob_client.describe_training_job(TrainingJobName="shared-name")["TrainingJobArn"]
    assert (
        alice
        in alice_client.describe_training_job(TrainingJobName="shared-name")["TrainingJobArn"]
    )


def test_resources_are_per_region(server: DockyardServer) -> None:
    account, key = server.new_account("regional")
    insert_training_jobs(db_url(server), account, ["east-job"])
    west = server.client(key=key, region="us-west-2")
    assert west.list_training_jobs()["TrainingJobSummaries"] == []
    east = server.client(key=key, region="us-east-1")
    assert len(east.list_training_jobs()["TrainingJobSummaries"]) == 1


def aws(server: DockyardServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "aws"),
            *args,
            "--endpoint-url",
            server.endpoint,
            "--output",
            "json",
        ],
        env=server.aws_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_aws_cli_lists_and_describes(server: DockyardServer) -> None:
    result = aws(server, "sagemaker", "list-training-jobs")
    assert result.returncode == 0, result.stderr
    assert "TrainingJobSummaries" in json.loads(result.stdout)
    result = aws(server, "sagemaker", "describe-training-job", "--training-job-name", "nope")
    assert result.returncode != 0
    assert "ResourceNotFound" in result.stderr and "nope" in result.stderr
    result = aws(server, "sagemaker", "list-training-jobs", "--max-results", "0")
    assert result.returncode != 0
    assert "ValidationException" in result.stderr or "Invalid value" in result.stderr


def test_health_and_metrics(server: DockyardServer) -> None:
    import urllib.request

    with urllib.request.urlopen(server.endpoint + "/healthz") as response:
        assert json.loads(response.read())["status"] == "ok"
    server.client().list_training_jobs()
    with urllib.request.urlopen(server.endpoint + "/metrics") as response:
        text = response.read().decode()
    assert 'dockyard_api_requests_total{code="OK",operation="SageMaker.ListTrainingJobs"}' in text
