"""Access-key policies (spec §5.8): boto3 against a live server, keys made by the CLI."""

from __future__ import annotations

import json
import textwrap
import time
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


# -- every resource a request names, whichever way it names it (issue 25, round 2) --------

GROUP = "/aws/sagemaker/TrainingJobs"
M5_ONLY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "SmallOnly",
            "Effect": "Allow",
            "Action": "sagemaker:*",
            "Resource": "*",
            "Condition": {"ForAllValues:StringLike": {"sagemaker:InstanceTypes": ["ml.m5.*"]}},
        }
    ],
}


def allow_all_but(sid: str, action: str, *resources: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "*", "Resource": "*"},
                {"Sid": sid, "Effect": "Deny", "Action": action, "Resource": list(resources)},
            ],
        }
    )


def cluster_request(
    policy_server: DockyardServer, account_id: str, name: str, instance_type: str = "ml.m5.xlarge"
) -> dict[str, Any]:
    """CreateCluster's request for one node, its lifecycle script in a bucket of the
    account's own."""
    bucket = f"lifecycle-{account_id}"
    key = policy_server.new_key(account_id)
    policy_server.own_bucket(bucket, key=key)
    policy_server.client("s3", key=key).put_object(
        Bucket=bucket, Key="on_create.sh", Body=b"#!/bin/sh\ntrue\n"
    )
    return {
        "ClusterName": name,
        "InstanceGroups": [
            {
                "InstanceGroupName": "workers",
                "InstanceType": instance_type,
                "InstanceCount": 1,
                "LifeCycleConfig": {"SourceS3Uri": f"s3://{bucket}", "OnCreate": "on_create.sh"},
                "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod",
            }
        ],
    }


def test_a_stream_deny_holds_however_the_stream_is_named(
    policy_server: DockyardServer, account: tuple[str, Any]
) -> None:
    """Issue 25: Allow * with a Deny on one job's log streams was enforced for
    `logGroupName` but not for `logGroupIdentifier` (its ARN was checked without the
    stream), nor for FilterLogEvents naming the stream in `logStreamNames`."""
    account_id, free = account
    for name in ("victim-job", "other-job"):
        free.create_training_job(**job_request(name, account_id=account_id))
    logs = policy_server.client("logs", key=policy_server.new_key(account_id))
    deadline = time.monotonic() + 120
    while True:
        streams = {
            s["logStreamName"].split("/")[0]: s["logStreamName"]
            for s in logs.describe_log_streams(logGroupName=GROUP)["logStreams"]
        }
        if {"victim-job", "other-job"} <= set(streams):
            break
        assert time.monotonic() < deadline, streams
        time.sleep(0.2)
    victim, other = streams["victim-job"], streams["other-job"]
    key = policy_server.new_key(
        account_id,
        allow_all_but(
            "NoVictimJobLogs",
            "logs:*",
            f"arn:aws:logs:*:*:log-group:{GROUP}:log-stream:victim-job/*",
        ),
    )
    limited = policy_server.client("logs", key=key)
    group_arn = f"arn:aws:logs:us-east-1:{account_id}:log-group:{GROUP}"
    for named in (
        {"logGroupName": GROUP},
        {"logGroupIdentifier": group_arn},
        {"logGroupIdentifier": GROUP},
    ):
        error = denied(limited.get_log_events, **named, logStreamName=victim)
        assert f"log-stream:{victim}" in error["Message"] and "NoVictimJobLogs" in error["Message"]
        error = denied(limited.filter_log_events, **named, logStreamNames=[other, victim])
        assert f"log-stream:{victim}" in error["Message"]
        # A search naming no stream reads the victim's too, and so does a prefix of it.
        denied(limited.filter_log_events, **named)
        denied(limited.filter_log_events, **named, logStreamNamePrefix="victim")
        assert "events" in limited.get_log_events(**named, logStreamName=other)
        assert "events" in limited.filter_log_events(**named, logStreamNames=[other])
        assert "events" in limited.filter_log_events(**named, logStreamNamePrefix="other-job")


def test_an_instance_type_limit_covers_clusters_and_plans(
    policy_server: DockyardServer, account: tuple[str, Any]
) -> None:
    """Issue 25: a key allowed `ml.m5.*` only (ForAllValues:StringLike on
    sagemaker:InstanceTypes) created an ml.g5.xlarge HyperPod cluster, searched p5
    offerings and bought a $1,399.85 ml.p5.48xlarge plan: the key was filled from
    ResourceConfig only."""
    account_id, free = account
    limited = policy_server.client(key=policy_server.new_key(account_id, json.dumps(M5_ONLY)))
    big = cluster_request(policy_server, account_id, "big", "ml.g5.xlarge")
    error = denied(limited.create_cluster, **big)
    assert "sagemaker:CreateCluster" in error["Message"]
    small = cluster_request(policy_server, account_id, "small")
    limited.create_cluster(**small)
    try:
        grown = {**big["InstanceGroups"][0], "InstanceGroupName": "gpus"}
        denied(
            limited.update_cluster,
            ClusterName="small",
            InstanceGroups=[small["InstanceGroups"][0], grown],
        )
        p5 = {
            "InstanceType": "ml.p5.48xlarge",
            "InstanceCount": 1,
            "DurationHours": 24,
            "TargetResources": ["training-job"],
        }
        denied(limited.search_training_plan_offerings, **p5)
        # An offering found by another key of the account: bought from its id alone.
        offering = free.search_training_plan_offerings(**p5)["TrainingPlanOfferings"][0]
        error = denied(
            limited.create_training_plan,
            TrainingPlanName="victim-plan",
            TrainingPlanOfferingId=offering["TrainingPlanOfferingId"],
        )
        assert "sagemaker:CreateTrainingPlan" in error["Message"]
        assert free.list_training_plans()["TrainingPlanSummaries"] == []
        assert [c["ClusterName"] for c in free.list_clusters()["ClusterSummaries"]] == ["small"]
    finally:
        free.delete_cluster(ClusterName="small")


def test_a_deny_on_cluster_arns_covers_every_cluster_operation(
    policy_server: DockyardServer, account: tuple[str, Any]
) -> None:
    """Issue 25: Allow sagemaker:* with a Deny on `cluster/*` still allowed
    DescribeCluster: cluster operations were checked against resource "*". A cluster's
    ARN holds its id, so its name is looked up; plans a job or a group would run on
    are checked too."""
    account_id, free = account
    free.create_cluster(**cluster_request(policy_server, account_id, "kept"))
    try:
        arn = free.describe_cluster(ClusterName="kept")["ClusterArn"]
        key = policy_server.new_key(
            account_id,
            allow_all_but(
                "KeepClustersAndPlans",
                "sagemaker:*",
                f"arn:aws:sagemaker:*:{account_id}:cluster/*",
                f"arn:aws:sagemaker:*:{account_id}:training-plan/*",
            ),
        )
        limited = policy_server.client(key=key)
        for call, params in (
            (limited.describe_cluster, {"ClusterName": "kept"}),
            (limited.describe_cluster, {"ClusterName": arn}),
            (limited.list_cluster_nodes, {"ClusterName": "kept"}),
            (
                limited.describe_cluster_node,
                {"ClusterName": "kept", "NodeId": "i-0123456789abcdef0"},
            ),
            (
                limited.batch_delete_cluster_nodes,
                {"ClusterName": "kept", "NodeIds": ["i-0123456789abcdef0"]},
            ),
            (limited.delete_cluster, {"ClusterName": "kept"}),
            (limited.list_tags, {"ResourceArn": arn}),
            (limited.add_tags, {"ResourceArn": arn, "Tags": [{"Key": "k", "Value": "v"}]}),
            (limited.create_cluster, cluster_request(policy_server, account_id, "new")),
            (limited.describe_training_plan, {"TrainingPlanName": "any"}),
        ):
            error = denied(call, **params)
            assert "KeepClustersAndPlans" in error["Message"], error
        error = denied(limited.describe_cluster, ClusterName="kept")
        assert f"on resource: {arn} " in error["Message"]
        request = cluster_request(policy_server, account_id, "kept")
        denied(
            limited.update_cluster, ClusterName="kept", InstanceGroups=request["InstanceGroups"]
        )
        # A job on a plan names the plan.
        on_plan = job_request("on-plan", account_id=account_id)
        on_plan["ResourceConfig"]["TrainingPlanArn"] = (
            f"arn:aws:sagemaker:us-east-1:{account_id}:training-plan/any"
        )
        error = denied(limited.create_training_job, **on_plan)
        assert "training-plan/any" in error["Message"]
        # What names no cluster nor plan is not held back.
        assert [c["ClusterName"] for c in limited.list_clusters()["ClusterSummaries"]] == ["kept"]
        assert limited.list_training_plans()["TrainingPlanSummaries"] == []
        assert free.describe_cluster(ClusterName="kept")["ClusterName"] == "kept"
    finally:
        free.delete_cluster(ClusterName="kept")
