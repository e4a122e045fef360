"""What a request is checked against: every resource it names, however it names it, and
every instance type it names."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dockyard.api.authorise import authorise, request_context, resource_arns
from dockyard.services.errors import AccessDeniedException

ACCOUNT = "123456789012"
REGION = "us-east-1"
GROUP = "/aws/sagemaker/TrainingJobs"
GROUP_ARN = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{GROUP}"


class Lookup:
    def cluster_arn(self, name: str) -> str | None:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc123" if name == "mine" else None

    def offering_instance_types(self, offering_id: str) -> list[str]:
        return ["ml.p5.48xlarge"] if offering_id == "tpo-1" else []


@pytest.mark.parametrize(
    "named",
    [{"logGroupName": GROUP}, {"logGroupIdentifier": GROUP}, {"logGroupIdentifier": GROUP_ARN}],
)
def test_a_log_group_is_one_resource_whichever_way_it_is_named(named: dict[str, Any]) -> None:
    stream = f"{GROUP_ARN}:log-stream:job/algo-1-1"
    assert resource_arns("logs", REGION, ACCOUNT, {**named, "logStreamName": "job/algo-1-1"}) == [
        stream
    ]
    assert resource_arns(
        "logs", REGION, ACCOUNT, {**named, "logStreamNames": ["job/algo-1-1"]}
    ) == [
        GROUP_ARN,
        stream,
    ]
    assert resource_arns("logs", REGION, ACCOUNT, named) == [GROUP_ARN]


def test_clusters_are_their_arns_and_plans_they_run_on_are_named_too() -> None:
    lookup = Lookup()
    mine = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc123"
    assert resource_arns("sagemaker", REGION, ACCOUNT, {"ClusterName": "mine"}, lookup) == [mine]
    assert resource_arns("sagemaker", REGION, ACCOUNT, {"ClusterName": mine}, lookup) == [mine]
    assert resource_arns("sagemaker", REGION, ACCOUNT, {"ClusterName": "new"}, lookup) == [
        f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/*"
    ]
    plan = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p"
    job = {"TrainingJobName": "J", "ResourceConfig": {"TrainingPlanArn": plan}}
    assert resource_arns("sagemaker", REGION, ACCOUNT, job, lookup) == [
        f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/j",
        plan,
    ]
    assert resource_arns("sagemaker", REGION, ACCOUNT, {}, lookup) == ["*"]


def test_every_instance_type_a_request_names_fills_the_condition_key() -> None:
    cluster = {
        "InstanceGroups": [
            {"InstanceType": "ml.g5.xlarge"},
            {"InstanceType": "ml.m5.xlarge"},
        ]
    }
    assert request_context(REGION, cluster)["sagemaker:InstanceTypes"] == [
        "ml.g5.xlarge",
        "ml.m5.xlarge",
    ]
    search = {"InstanceType": "ml.p5.48xlarge"}
    assert request_context(REGION, search)["sagemaker:InstanceTypes"] == ["ml.p5.48xlarge"]
    buy = {"TrainingPlanOfferingId": "tpo-1"}
    context = request_context(REGION, buy, "CreateTrainingPlan", Lookup())
    assert context["sagemaker:InstanceTypes"] == ["ml.p5.48xlarge"]
    assert "sagemaker:InstanceTypes" not in request_context(REGION, {"TrainingJobName": "j"})


def test_the_request_is_allowed_only_if_every_resource_is() -> None:
    policy = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Action": "*", "Resource": "*"},
                {
                    "Sid": "NotThatOne",
                    "Effect": "Deny",
                    "Action": "logs:*",
                    "Resource": f"{GROUP_ARN}:log-stream:secret/*",
                },
            ],
        }
    )
    params = {"logGroupIdentifier": GROUP_ARN, "logStreamNames": ["open/1", "secret/1"]}
    with pytest.raises(AccessDeniedException) as refused:
        authorise(policy, "logs", "FilterLogEvents", REGION, ACCOUNT, params)
    assert "log-stream:secret/1" in refused.value.message and "NotThatOne" in refused.value.message
    authorise(
        policy,
        "logs",
        "FilterLogEvents",
        REGION,
        ACCOUNT,
        {**params, "logStreamNames": ["open/1"]},
    )
    # No resource at all is "*", which an Allow on one group alone does not cover.
    narrow = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "logs:*", "Resource": GROUP_ARN}],
        }
    )
    with pytest.raises(AccessDeniedException):
        authorise(narrow, "logs", "FilterLogEvents", REGION, ACCOUNT, {}, resources=[])


def test_ecr_requests_name_their_repositories() -> None:
    repo = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository"
    assert resource_arns("ecr", REGION, ACCOUNT, {"repositoryName": "team/a"}) == [
        f"{repo}/team/a"
    ]
    assert resource_arns("ecr", REGION, ACCOUNT, {"repositoryNames": ["a", "b", "a"]}) == [
        f"{repo}/a",
        f"{repo}/b",
    ]
    assert resource_arns("ecr", REGION, ACCOUNT, {"resourceArn": f"{repo}/x"}) == [f"{repo}/x"]
    # Listing every repository acts on all of them; a login on none.
    assert resource_arns("ecr", REGION, ACCOUNT, {}, operation="DescribeRepositories") == [
        f"{repo}/*"
    ]
    assert resource_arns("ecr", REGION, ACCOUNT, {}, operation="GetAuthorizationToken") == ["*"]
    only_team = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "ecr:*", "Resource": f"{repo}/team/*"}],
        }
    )
    authorise(only_team, "ecr", "DeleteRepository", REGION, ACCOUNT, {"repositoryName": "team/a"})
    with pytest.raises(AccessDeniedException, match="repository/other"):
        authorise(
            only_team, "ecr", "DeleteRepository", REGION, ACCOUNT, {"repositoryName": "other"}
        )
