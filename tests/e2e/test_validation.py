"""Invalid input over the wire: every violation is a 400 naming the member and the rule."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.harness import DockyardServer, signed_post

VALID_JOB = {
    "TrainingJobName": "valid-job",
    "AlgorithmSpecification": {"TrainingImage": "python:3.11", "TrainingInputMode": "File"},
    "RoleArn": "arn:aws:iam::123456789012:role/training",
    "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
    "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
}


def with_change(path: str, value: object) -> dict:
    body = json.loads(json.dumps(VALID_JOB))
    *parents, leaf = path.split(".")
    node = body
    for part in parents:
        node = node.setdefault(part, {})
    if value is KeyError:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return body


CASES = [
    (
        "ListTrainingJobs",
        {"MaxResults": 0},
        "Value '0' at 'MaxResults'",
        "greater than or equal to 1",
    ),
    ("ListTrainingJobs", {"MaxResults": 101}, "at 'MaxResults'", "less than or equal to 100"),
    ("ListTrainingJobs", {"MaxResults": "ten"}, "at 'MaxResults'", "integer"),
    (
        "ListTrainingJobs",
        {"SortBy": "Size"},
        "at 'SortBy'",
        "enum value set: [Name, CreationTime, Status]",
    ),
    ("ListTrainingJobs", {"StatusEquals": "Done"}, "at 'StatusEquals'", "enum value set"),
    (
        "ListTrainingJobs",
        {"NameContains": "bad_name"},
        "at 'NameContains'",
        "regular expression pattern",
    ),
    (
        "ListTrainingJobs",
        {"CreationTimeAfter": "yesterday"},
        "at 'CreationTimeAfter'",
        "timestamp",
    ),
    ("ListTrainingJobs", {"Colour": "blue"}, "Colour", "nknown"),
    ("DescribeTrainingJob", {}, "at 'TrainingJobName'", "must not be null"),
    (
        "DescribeTrainingJob",
        {"TrainingJobName": "my_job"},
        "at 'TrainingJobName'",
        "regular expression pattern",
    ),
    (
        "DescribeTrainingJob",
        {"TrainingJobName": "x" * 64},
        "at 'TrainingJobName'",
        "length less than or equal to 63",
    ),
    (
        "CreateTrainingJob",
        with_change("ResourceConfig.InstanceCount", -1),
        "at 'ResourceConfig.InstanceCount'",
        "greater than or equal to 0",
    ),
    (
        "CreateTrainingJob",
        with_change("ResourceConfig.InstanceType", "ml.fake.large"),
        "at 'ResourceConfig.InstanceType'",
        "enum value set",
    ),
    (
        "CreateTrainingJob",
        with_change("AlgorithmSpecification.TrainingInputMode", "Stream"),
        "at 'AlgorithmSpecification.TrainingInputMode'",
        "enum value set",
    ),
    (
        "CreateTrainingJob",
        with_change("StoppingCondition.MaxRuntimeInSeconds", 0),
        "at 'StoppingCondition.MaxRuntimeInSeconds'",
        "greater than or equal to 1",
    ),
    ("CreateTrainingJob", with_change("RoleArn", KeyError), "at 'RoleArn'", "must not be null"),
    (
        "CreateTrainingJob",
        with_change("HyperParameters", {"lr": "1" * 2600}),
        "at 'HyperParameters['lr']'",
        "length less than or equal to 2500",
    ),
    (
        "CreateTrainingJob",
        with_change("Tags", [{"Value": "v"}]),
        "at 'Tags[0].Key'",
        "must not be null",
    ),
    (
        "CreateTrainingJob",
        with_change(
            "InputDataConfig",
            [
                {
                    "ChannelName": "train",
                    "DataSource": {
                        "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/train"}
                    },
                },
                {
                    "ChannelName": "bad channel!",
                    "DataSource": {
                        "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/test"}
                    },
                },
            ],
        ),
        "at 'InputDataConfig[1].ChannelName'",
        "regular expression pattern",
    ),
    (
        "CreateTrainingJob",
        with_change(
            "InputDataConfig",
            [
                {
                    "ChannelName": "train",
                    "DataSource": {"S3DataSource": {"S3DataType": "Folder", "S3Uri": "s3://b/t"}},
                }
            ],
        ),
        "at 'InputDataConfig[0].DataSource.S3DataSource.S3DataType'",
        "enum value set",
    ),
    (
        "CreateTrainingJob",
        with_change("ResourceConfig", [1, 2]),
        "at 'ResourceConfig'",
        "JSON object",
    ),
    # NUL bytes would reach a job's argv or environment and fail there (issue 12).
    (
        "CreateTrainingJob",
        with_change("HyperParameters", {"lr": "0.1\u0000"}),
        "at 'HyperParameters['lr']'",
        "null characters",
    ),
    (
        "CreateTrainingJob",
        with_change("Environment", {"A\u0000B": "1"}),
        "at 'Environment'",
        "null characters",
    ),
    (
        "CreateTrainingJob",
        with_change("AlgorithmSpecification.ContainerArguments", ["--x=\u0000"]),
        "at 'AlgorithmSpecification.ContainerArguments[0]'",
        "null characters",
    ),
]


@pytest.mark.parametrize(
    ("operation", "body", "where", "rule"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_invalid_input_is_a_precise_validation_exception(
    server: DockyardServer, operation: str, body: dict, where: str, rule: str
) -> None:
    status, error = signed_post(server, f"SageMaker.{operation}", json.dumps(body).encode())
    assert status == 400, error
    assert error["__type"] == "ValidationException"
    assert where in error["message"] and rule in error["message"], error["message"]


def test_boto3_without_client_validation_gets_the_same_errors(server: DockyardServer) -> None:
    client = server.client(parameter_validation=False)
    with pytest.raises(ClientError) as excinfo:
        client.list_training_jobs(MaxResults=500, SortOrder="Sideways")
    error = excinfo.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "2 validation errors detected" in error["Message"]
    assert "'MaxResults'" in error["Message"] and "'SortOrder'" in error["Message"]


def test_several_errors_are_all_reported(server: DockyardServer) -> None:
    body = with_change("ResourceConfig.InstanceCount", -1)
    body["StoppingCondition"]["MaxRuntimeInSeconds"] = 0
    status, error = signed_post(server, "SageMaker.CreateTrainingJob", json.dumps(body).encode())
    assert status == 400 and error["message"].startswith("2 validation errors detected")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", "SerializationException"),
        (b"[1, 2, 3]", "ValidationException"),
        (b'"just a string"', "ValidationException"),
        (b'{"MaxResults": NaN}', "ValidationException"),
        (b"[" * 5000 + b"]" * 5000, "SerializationException"),
    ],
)
def test_malformed_bodies(server: DockyardServer, body: bytes, code: str) -> None:
    status, error = signed_post(server, "SageMaker.ListTrainingJobs", body)
    assert status == 400 and error["__type"] in (
        code,
        "SerializationException",
        "ValidationException",
    )
    assert error["__type"] == code, error


def test_unknown_operation(server: DockyardServer) -> None:
    status, error = signed_post(server, "SageMaker.FlyToTheMoon", b"{}")
    assert (status, error["__type"]) == (400, "UnknownOperationException")
    assert "SageMaker.FlyToTheMoon" in error["message"]
    status, error = signed_post(server, "NoSuchService.ListThings", b"{}")
    assert (status, error["__type"]) == (400, "UnknownOperationException")


def test_operation_not_implemented_yet(server: DockyardServer) -> None:
    body = {"EndpointName": "e", "EndpointConfigName": "c"}
    status, error = signed_post(server, "SageMaker.CreateEndpoint", json.dumps(body).encode())
    assert (status, error["__type"]) == (400, "NotImplementedException")
    assert "does not implement SageMaker.CreateEndpoint yet" in error["message"]
    client = server.client()
    with pytest.raises(ClientError) as excinfo:
        client.list_endpoints()
    assert excinfo.value.response["Error"]["Code"] == "NotImplementedException"
