"""Access-key policies (SPEC §5.8): boto3 against a live server, keys made by the CLI."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.harness import DockyardServer, run_cli

# Exactly the seed's example: CreateTrainingJob only, and only with a short keep-alive.
SEED_POLICY = (
    '{"Version":"2012-10-17","Statement":[{"Sid":"EnforceKeepAlivePeriodLimit",'
    '"Effect":"Allow","Action":["sagemaker:CreateTrainingJob"],"Resource":"*",'
    '"Condition":{"NumericLessThanIfExists":{"sagemaker:KeepAlivePeriod":1800}}}]}'
)
DENY_LONG_KEEP_ALIVE = {
    "Version": "2012-10-17",
    "Statement": [
        {"Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"},
        {
            "Sid": "ShortKeepAliveOnly",
            "Effect": "Deny",
            "Action": "sagemaker:Create*",
            "Resource": "*",
            "Condition": {"NumericGreaterThan": {"sagemaker:KeepAlivePeriod": 600}},
        },
    ],
}


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    """A server of this module's own, so kept-alive instances hold no one else's capacity."""
    instance = DockyardServer(tmp_path_factory.mktemp("policies")).start()
    (instance.data_dir / "s3" / "results").mkdir(parents=True, exist_ok=True)
    yield instance
    instance.stop()


def job_request(name: str, keep_alive: int | None = None, account_id: str = "") -> dict[str, Any]:
    resource_config: dict[str, Any] = {
        "InstanceType": "ml.m5.xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
    }
    if keep_alive is not None:
        resource_config["KeepAlivePeriodInSeconds"] = keep_alive
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-c", textwrap.dedent("print('done')")],
        },
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {
            "S3OutputPath": f"s3://results-{account_id}/out" if account_id else "s3://results/out"
        },
        "ResourceConfig": resource_config,
        "StoppingCondition": {"MaxRuntimeInSeconds": 60},
    }


@pytest.fixture
def account(
    policy_server: DockyardServer, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Any]]:
    """A fresh account and an unrestricted client of it that stops its jobs afterwards."""
    account_id, key = policy_server.new_account(f"policies-{request.node.name[:40]}")
    free = policy_server.client(key=key)
    # Its jobs write to a bucket of its own (the server's `results` is another account's).
    policy_server.own_bucket(f"results-{account_id}", key=key)
    yield account_id, free
    for job in free.list_training_jobs()["TrainingJobSummaries"]:
        if job["TrainingJobStatus"] in ("InProgress", "Stopping"):
            try:
                free.stop_training_job(TrainingJobName=job["TrainingJobName"])
            except ClientError:
                pass  # it finished between the list and the stop


def denied(call: Any, **params: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    response: dict[str, Any] = caught.value.response
    assert response["Error"]["Code"] == "AccessDeniedException"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return response["Error"]


def test_seed_policy_limits_keep_alive(
    policy_server: DockyardServer, account: tuple[str, Any], tmp_path: Path
) -> None:
    account_id, _ = account
    key = policy_server.new_key(account_id, SEED_POLICY)
    client = policy_server.client(key=key)

    error = denied(
        client.create_training_job,
        **job_request("too-long", keep_alive=3600, account_id=account_id),
    )
    assert "sagemaker:CreateTrainingJob" in error["Message"]
    assert f"arn:aws:iam::{account_id}:user/{key[0]}" in error["Message"]
    assert "training-job/too-long" in error["Message"]
    assert "no identity-based policy allows" in error["Message"]

    assert "TrainingJobArn" in client.create_training_job(
        **job_request("short", keep_alive=1200, account_id=account_id)
    )
    assert "TrainingJobArn" in client.create_training_job(
        **job_request("no-keep-alive", account_id=account_id)
    )

    error = denied(client.list_training_jobs)
    assert "sagemaker:ListTrainingJobs" in error["Message"]
    assert "on resource: *" in error["Message"]


def test_deny_statement_beats_allow_everything(
    policy_server: DockyardServer, account: tuple[str, Any], tmp_path: Path
) -> None:
    account_id, _ = account
    key = policy_server.new_key(account_id, json.dumps(DENY_LONG_KEEP_ALIVE))
    client = policy_server.client(key=key)

    error = denied(
        client.create_training_job, **job_request("long", keep_alive=900, account_id=account_id)
    )
    assert "sagemaker:CreateTrainingJob" in error["Message"]
    assert "explicit deny" in error["Message"] and "ShortKeepAliveOnly" in error["Message"]

    client.create_training_job(**job_request("short", keep_alive=300, account_id=account_id))
    client.create_training_job(
        **job_request("plain", account_id=account_id)
    )  # NumericGreaterThan: absent key -> no
    names = {j["TrainingJobName"] for j in client.list_training_jobs()["TrainingJobSummaries"]}
    assert names == {"short", "plain"}


def test_resource_and_region_conditions(
    policy_server: DockyardServer, account: tuple[str, Any], tmp_path: Path
) -> None:
    account_id, _ = account
    policy = {
        "Version": "2012-10-17",
        "Statement": {
            "Effect": "Allow",
            "Action": "sagemaker:DescribeTrainingJob",
            "Resource": "arn:aws:sagemaker:*:*:training-job/team-a-*",
            "Condition": {"StringEquals": {"aws:RequestedRegion": "us-east-1"}},
        },
    }
    key = policy_server.new_key(account_id, json.dumps(policy))
    client = policy_server.client(key=key)

    # Allowed, so the request reaches the service, which has no such job.
    with pytest.raises(ClientError) as caught:
        client.describe_training_job(TrainingJobName="team-a-missing")
    assert caught.value.response["Error"]["Code"] == "ResourceNotFound"

    denied(client.describe_training_job, TrainingJobName="team-b-job")
    elsewhere = policy_server.client(key=key, region="eu-west-1")
    denied(elsewhere.describe_training_job, TrainingJobName="team-a-missing")


def test_keys_without_policy_are_unrestricted(account: tuple[str, Any]) -> None:
    _, free = account
    assert free.list_training_jobs()["TrainingJobSummaries"] == []


def test_cli_refuses_an_invalid_policy(
    policy_server: DockyardServer, account: tuple[str, Any], tmp_path: Path
) -> None:
    account_id, _ = account
    file = tmp_path / "bad.json"
    file.write_text(
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": {
                    "Effect": "Allow",
                    "Action": "sagemaker:*",
                    "Resource": "*",
                    "Condition": {"NumericSmallerThan": {"sagemaker:KeepAlivePeriod": 1}},
                },
            }
        )
    )
    result = run_cli(
        "keys", "create", "--account", account_id, "--policy", str(file),
        data_dir=policy_server.data_dir, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "invalid policy" in result.stderr and "NumericSmallerThan" in result.stderr
    assert "aws_access_key_id" not in result.stdout

    result = run_cli(
        "keys", "create", "--account", account_id, "--policy", str(tmp_path / "missing.json"),
        data_dir=policy_server.data_dir, check=False,
    )  # fmt: skip
    assert result.returncode != 0 and "cannot read the policy file" in result.stderr
    assert "Traceback" not in result.stderr

    listed = run_cli("keys", "ls", "--account", account_id, data_dir=policy_server.data_dir)
    assert "yes" not in listed.stdout  # neither attempt made a key


def test_keys_ls_shows_which_keys_have_a_policy(
    policy_server: DockyardServer, account: tuple[str, Any], tmp_path: Path
) -> None:
    account_id, _ = account
    key = policy_server.new_key(account_id, SEED_POLICY)
    listed = run_cli("keys", "ls", "--account", account_id, data_dir=policy_server.data_dir)
    line = next(line for line in listed.stdout.splitlines() if key[0] in line)
    assert "yes" in line
