"""Model-driven request validation and response serialisation (dockyard.api.shapes)."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import Any

import botocore.session
import pytest
from botocore.model import ServiceModel, StructureShape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dockyard.api.linear_patterns import compile_pattern
from dockyard.api.patterns import translate_pattern
from dockyard.api.serialise import serialise_output
from dockyard.api.shapes import ValidationError, parse_input
from tests.strategies import random_body, valid_body

_SESSION = botocore.session.get_session()
SAGEMAKER: ServiceModel = _SESSION.get_service_model("sagemaker")
LOGS: ServiceModel = _SESSION.get_service_model("logs")
QUOTAS: ServiceModel = _SESSION.get_service_model("service-quotas")


def input_shape(operation: str, model: ServiceModel = SAGEMAKER) -> StructureShape:
    shape = model.operation_model(operation).input_shape
    assert shape is not None
    return shape


def output_shape(operation: str, model: ServiceModel = SAGEMAKER) -> StructureShape:
    shape = model.operation_model(operation).output_shape
    assert shape is not None
    return shape


def errors_of(operation: str, body: Any, model: ServiceModel = SAGEMAKER) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_input(input_shape(operation, model), body)
    return caught.value


CREATE_TRAINING_JOB: dict[str, Any] = {
    "TrainingJobName": "llama-finetune-1",
    "HyperParameters": {"lr": "0.0001", "epochs": "3"},
    "AlgorithmSpecification": {
        "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest",
        "TrainingInputMode": "File",
    },
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "InputDataConfig": [
        {
            "ChannelName": "train",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://bucket/train/",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "ContentType": "application/jsonlines",
        },
        {
            "ChannelName": "validation",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/v/"}},
        },
    ],
    "OutputDataConfig": {"S3OutputPath": "s3://bucket/out/"},
    "ResourceConfig": {
        "InstanceType": "ml.p4d.24xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 500,
    },
    "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
    "Tags": [{"Key": "team", "Value": "research"}, {"Key": "cost-centre", "Value": "42"}],
    "EnableManagedSpotTraining": False,
    "Environment": {"NCCL_DEBUG": "INFO"},
}


def changed(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of body with the dotted/indexed `path` set to value (or removed: DELETE)."""
    result = copy.deepcopy(body)
    steps: list[str | int] = [
        int(part) if part.isdigit() else part for part in re.findall(r"[^.\[\]]+", path)
    ]
    target: Any = result
    for step in steps[:-1]:
        target = target[step]
    if value is DELETE:
        del target[steps[-1]]
    else:
        target[steps[-1]] = value
    return result


DELETE = object()
LONG = "x" * 300

# (operation, body, expected error text); each body breaks exactly one rule.
INVALID: list[tuple[str, dict[str, Any] | Any, str]] = [
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "ResourceConfig.InstanceCount", -1),
        "Value '-1' at 'ResourceConfig.InstanceCount' failed to satisfy constraint: "
        "Member must have value greater than or equal to 0",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "ResourceConfig.KeepAlivePeriodInSeconds", 21601),
        "Value '21601' at 'ResourceConfig.KeepAlivePeriodInSeconds' failed to satisfy "
        "constraint: Member must have value less than or equal to 21600",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "ResourceConfig.InstanceCount", True),
        "Value 'true' at 'ResourceConfig.InstanceCount' failed to satisfy constraint: "
        "Member must be an integer",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "ResourceConfig.InstanceCount", 2**40),
        "Value '1099511627776' at 'ResourceConfig.InstanceCount' failed to satisfy "
        "constraint: Member must have value less than or equal to 2147483647",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "ResourceConfig.Foo", 1),
        "Unknown member 'Foo' at 'ResourceConfig'",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "AlgorithmSpecification.TrainingInputMode", DELETE),
        "Value null at 'AlgorithmSpecification.TrainingInputMode' failed to satisfy "
        "constraint: Member must not be null",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "AlgorithmSpecification.TrainingInputMode", "Stream"),
        "Value 'Stream' at 'AlgorithmSpecification.TrainingInputMode' failed to satisfy "
        "constraint: Member must satisfy enum value set: [Pipe, File, FastFile]",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "AlgorithmSpecification.TrainingImage", LONG),
        f"Value '{'x' * 100}...' at 'AlgorithmSpecification.TrainingImage' failed to "
        "satisfy constraint: Member must have length less than or equal to 255",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "InputDataConfig[1].ChannelName", "$$$"),
        "Value '$$$' at 'InputDataConfig[1].ChannelName' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: [A-Za-z0-9\\.\\-_]+",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "InputDataConfig[0].DataSource.S3DataSource.S3Uri", "ftp:x"),
        "Value 'ftp:x' at 'InputDataConfig[0].DataSource.S3DataSource.S3Uri' failed to "
        "satisfy constraint: Member must satisfy regular expression pattern: "
        "(https|s3)://([^/]+)/?(.*)",
    ),
    (
        "CreateTrainingJob",
        changed(
            CREATE_TRAINING_JOB, "InputDataConfig[1].DataSource.S3DataSource.S3DataType", DELETE
        ),
        "Value null at 'InputDataConfig[1].DataSource.S3DataSource.S3DataType' failed to "
        "satisfy constraint: Member must not be null",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "InputDataConfig", []),
        "Value '[]' at 'InputDataConfig' failed to satisfy constraint: "
        "Member must have length greater than or equal to 1",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "InputDataConfig[0]", None),
        "Value null at 'InputDataConfig[0]' failed to satisfy constraint: Member must not be null",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "InputDataConfig[0]", "train"),
        "Value 'train' at 'InputDataConfig[0]' failed to satisfy constraint: "
        "Member must be a JSON object",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "HyperParameters", {"k" * 257: "v"}),
        f"Map key '{'k' * 100}...' at 'HyperParameters' failed to satisfy constraint: "
        "Member must have length less than or equal to 256",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "HyperParameters.lr", 0.1),
        "Value '0.1' at 'HyperParameters['lr']' failed to satisfy constraint: "
        "Member must be a string",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "HyperParameters", {f"p{i}": "1" for i in range(101)}),
        "at 'HyperParameters' failed to satisfy constraint: "
        "Member must have length less than or equal to 100",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "Environment", {"9-9": "x"}),
        "Map key '9-9' at 'Environment' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: [a-zA-Z_][a-zA-Z0-9_]*",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "StoppingCondition.MaxRuntimeInSeconds", 0),
        "Value '0' at 'StoppingCondition.MaxRuntimeInSeconds' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "StoppingCondition.MaxPendingTimeInSeconds", 60),
        "Value '60' at 'StoppingCondition.MaxPendingTimeInSeconds' failed to satisfy "
        "constraint: Member must have value greater than or equal to 7200",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "Tags[1].Key", ""),
        "Value '' at 'Tags[1].Key' failed to satisfy constraint: "
        "Member must have length greater than or equal to 1",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "Tags[0].Value", DELETE),
        "Value null at 'Tags[0].Value' failed to satisfy constraint: Member must not be null",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "Tags", [{"Key": "k", "Value": "v"}] * 51),
        "at 'Tags' failed to satisfy constraint: Member must have length less than or equal to 50",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "TrainingJobName", "a" * 64),
        "at 'TrainingJobName' failed to satisfy constraint: "
        "Member must have length less than or equal to 63",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "RoleArn", DELETE),
        "Value null at 'RoleArn' failed to satisfy constraint: Member must not be null",
    ),
    (
        "CreateTrainingJob",
        changed(CREATE_TRAINING_JOB, "EnableManagedSpotTraining", "true"),
        "Value 'true' at 'EnableManagedSpotTraining' failed to satisfy constraint: "
        "Member must be a boolean",
    ),
    (
        "ListTrainingJobs",
        {"MaxResults": 0},
        "Value '0' at 'MaxResults' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1",
    ),
    (
        "ListTrainingJobs",
        {"MaxResults": 101},
        "Value '101' at 'MaxResults' failed to satisfy constraint: "
        "Member must have value less than or equal to 100",
    ),
    (
        "ListTrainingJobs",
        {"MaxResults": "abc"},
        "Value 'abc' at 'MaxResults' failed to satisfy constraint: Member must be an integer",
    ),
    (
        "ListTrainingJobs",
        {"MaxResults": 10.0},
        "Value '10.0' at 'MaxResults' failed to satisfy constraint: Member must be an integer",
    ),
    (
        "ListTrainingJobs",
        {"SortBy": "x"},
        "Value 'x' at 'SortBy' failed to satisfy constraint: "
        "Member must satisfy enum value set: [Name, CreationTime, Status]",
    ),
    (
        "ListTrainingJobs",
        {"CreationTimeAfter": "yesterday"},
        "Value 'yesterday' at 'CreationTimeAfter' failed to satisfy constraint: "
        "Member must be a timestamp",
    ),
    (
        "ListTrainingJobs",
        {"CreationTimeAfter": float("nan")},
        "Value 'NaN' at 'CreationTimeAfter' failed to satisfy constraint: "
        "Member must be a timestamp",
    ),
    (
        "ListTrainingJobs",
        {"CreationTimeBefore": 10**30},
        "at 'CreationTimeBefore' failed to satisfy constraint: Member must be a timestamp",
    ),
    (
        "ListTrainingJobs",
        {"NextToken": None, "Bogus": 1},
        "Unknown member 'Bogus' at '<root>'",
    ),
    (
        "ListTrainingJobs",
        [],
        "Value '[]' at '<root>' failed to satisfy constraint: Request body must be a JSON object",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"InstanceCount": 257},
        "Value '257' at 'InstanceCount' failed to satisfy constraint: "
        "Member must have value less than or equal to 256",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"DurationHours": 0},
        "Value '0' at 'DurationHours' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"TargetResources": []},
        "Value '[]' at 'TargetResources' failed to satisfy constraint: "
        "Member must have length greater than or equal to 1",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"TargetResources": ["training-job", "gpu"]},
        "Value 'gpu' at 'TargetResources[1]' failed to satisfy constraint: Member must "
        "satisfy enum value set: [training-job, hyperpod-cluster, endpoint, studio-apps]",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"UltraServerType": "gb200"},
        "Value 'gb200' at 'UltraServerType' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: ml.[a-z0-9\\-.]+",
    ),
    (
        "SearchTrainingPlanOfferings",
        {"StartTimeAfter": True},
        "Value 'true' at 'StartTimeAfter' failed to satisfy constraint: "
        "Member must be a timestamp",
    ),
]


@pytest.mark.parametrize(("operation", "body", "expected"), INVALID)
def test_invalid_inputs_name_path_and_rule(operation: str, body: Any, expected: str) -> None:
    error = errors_of(operation, body)
    assert error.total == 1, error.message
    assert expected in error.errors[0]
    assert error.message.startswith("1 validation error detected: ")


def test_every_violation_is_reported_in_one_message() -> None:
    body = changed(CREATE_TRAINING_JOB, "ResourceConfig.InstanceCount", -1)
    body = changed(body, "StoppingCondition.MaxRuntimeInSeconds", 0)
    error = errors_of("CreateTrainingJob", body)
    assert error.total == 2
    assert error.message.startswith("2 validation errors detected: Value '-1' at ")
    assert "; Value '0' at 'StoppingCondition.MaxRuntimeInSeconds'" in error.message


def test_long_error_lists_are_capped_with_a_count() -> None:
    body = {f"Bogus{i}": i for i in range(25)}
    error = errors_of("ListTrainingJobs", body)
    assert error.total == 25
    assert len(error.errors) == 25
    assert error.message.startswith("25 validation errors detected: ")
    assert error.message.count("Unknown member") == 10
    assert error.message.endswith("; and 15 more")


def test_huge_bodies_keep_at_most_a_hundred_formatted_errors() -> None:
    body = changed(CREATE_TRAINING_JOB, "HyperParameters", {f"p{i}": i for i in range(5000)})
    error = errors_of("CreateTrainingJob", body)
    assert error.total == 5001  # 5000 non-strings plus the map's size
    assert len(error.errors) == 100


def test_values_in_messages_are_clipped() -> None:
    error = errors_of("ListTrainingJobs", {"MaxResults": "9" * 10_000})
    assert len(error.message) < 300
    huge = errors_of("ListTrainingJobs", {"MaxResults": [list(range(1000))] * 1000})
    assert len(huge.message) < 300
    big_int = errors_of("ListTrainingJobs", {"MaxResults": 10**5000})
    assert "integer of about" in big_int.message


@pytest.mark.parametrize("body", [None, "x", 1, [{}], True])
def test_the_body_must_be_an_object(body: Any) -> None:
    error = errors_of("ListTrainingJobs", body)
    assert "at '<root>' failed to satisfy constraint: Request body must be a JSON object" in (
        error.message
    )


def test_a_valid_create_training_job_passes_unchanged() -> None:
    original = copy.deepcopy(CREATE_TRAINING_JOB)
    result = parse_input(input_shape("CreateTrainingJob"), CREATE_TRAINING_JOB)
    assert result == CREATE_TRAINING_JOB
    assert result is not CREATE_TRAINING_JOB
    assert result["InputDataConfig"] is not CREATE_TRAINING_JOB["InputDataConfig"]
    assert CREATE_TRAINING_JOB == original  # the input is never modified


def test_nulls_mean_absent_and_are_dropped() -> None:
    result = parse_input(input_shape("ListTrainingJobs"), {"NextToken": None, "MaxResults": 5})
    assert result == {"MaxResults": 5}


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (1700000000, datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        (1700000000.5, datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)),
        ("2023-11-14T22:13:20Z", datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        ("2023-11-15T00:13:20+02:00", datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
        ("2023-11-14T22:13:20", datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)),
    ],
)
def test_timestamps_become_aware_utc_datetimes(wire: Any, expected: datetime) -> None:
    result = parse_input(input_shape("ListTrainingJobs"), {"CreationTimeAfter": wire})
    value = result["CreationTimeAfter"]
    assert value == expected
    assert value.utcoffset() == timedelta(0)


def test_search_training_plan_offerings_accepts_a_full_request() -> None:
    body = {
        "InstanceType": "ml.p5.48xlarge",
        "InstanceCount": 4,
        "StartTimeAfter": 1767225600,
        "EndTimeBefore": "2026-03-01T00:00:00Z",
        "DurationHours": 72,
        "TargetResources": ["training-job"],
    }
    result = parse_input(input_shape("SearchTrainingPlanOfferings"), body)
    assert result["StartTimeAfter"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert result["EndTimeBefore"] == datetime(2026, 3, 1, tzinfo=UTC)


def test_float_members_accept_ints_and_reject_non_finite_numbers() -> None:
    shape = input_shape("RequestServiceQuotaIncrease", QUOTAS)
    body = {"ServiceCode": "sagemaker", "QuotaCode": "L-1234ABCD", "DesiredValue": 8}
    assert parse_input(shape, body)["DesiredValue"] == 8.0
    for bad in (float("inf"), float("nan"), 10**400):
        error = errors_of("RequestServiceQuotaIncrease", {**body, "DesiredValue": bad}, QUOTAS)
        assert (
            "at 'DesiredValue' failed to satisfy constraint: Member must be a finite number"
            in (error.message)
        )
    error = errors_of("RequestServiceQuotaIncrease", {**body, "DesiredValue": -1}, QUOTAS)
    assert "Member must have value greater than or equal to 0" in error.message
    error = errors_of("RequestServiceQuotaIncrease", {**body, "DesiredValue": "8"}, QUOTAS)
    assert "Value '8' at 'DesiredValue' failed to satisfy constraint: Member must be a number" in (
        error.message
    )


def test_logs_and_service_quotas_models_validate_too() -> None:
    parse_input(input_shape("CreateLogGroup", LOGS), {"logGroupName": "/dockyard/jobs"})
    error = errors_of("CreateLogGroup", {"logGroupName": "", "tags": {}}, LOGS)
    assert error.total == 3
    assert (
        "Value '' at 'logGroupName' failed to satisfy constraint: Member must have length "
        "greater than or equal to 1" in error.message
    )
    assert (
        "Value '{}' at 'tags' failed to satisfy constraint: Member must have length "
        "greater than or equal to 1" in error.message
    )
    events = {"logGroupName": "g", "logStreamName": "s", "logEvents": [{"timestamp": "now"}]}
    error = errors_of("PutLogEvents", events, LOGS)
    assert (
        "Value 'now' at 'logEvents[0].timestamp' failed to satisfy constraint: "
        "Member must be an integer" in error.message
    )
    assert "Value null at 'logEvents[0].message'" in error.message
    error = errors_of("GetServiceQuota", {"ServiceCode": "ec2"}, QUOTAS)
    assert error.errors == [
        "Value null at 'QuotaCode' failed to satisfy constraint: Member must not be null"
    ]


def test_unions_need_exactly_one_member() -> None:
    shape = input_shape("PutIntegration", LOGS)
    members = shape.members["resourceConfig"].members
    assert members, "logs' ResourceConfig is a union"
    base = {"integrationName": "i", "integrationType": "OPENSEARCH"}
    error = errors_of("PutIntegration", {**base, "resourceConfig": {}}, LOGS)
    assert (
        "at 'resourceConfig' failed to satisfy constraint: Member must have exactly one "
        "member set, but 0 were set" in error.message
    )


def test_sagemaker_union_with_two_members_set() -> None:
    storage = {"EbsVolumeConfig": {"VolumeSizeInGB": 100}, "FsxLustreConfig": {}}
    group = {
        "InstanceCount": 1,
        "InstanceGroupName": "workers",
        "InstanceType": "ml.p5.48xlarge",
        "LifeCycleConfig": {"SourceS3Uri": "s3://b/lc", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/R",
        "InstanceStorageConfigs": [storage],
    }
    error = errors_of("CreateCluster", {"ClusterName": "c", "InstanceGroups": [group]})
    assert (
        "at 'InstanceGroups[0].InstanceStorageConfigs[0]' failed to satisfy constraint: "
        "Member must have exactly one member set, but 2 were set (EbsVolumeConfig, "
        "FsxLustreConfig)" in error.message
    )


def test_deeply_nested_recursive_shapes_do_not_blow_the_stack() -> None:
    expression: dict[str, Any] = {"Operator": "And"}
    for _ in range(5000):
        expression = {"SubExpressions": [expression]}
    error = errors_of("Search", {"Resource": "TrainingJob", "SearchExpression": expression})
    assert error.message == "1 validation error detected: The request body is nested too deeply"
    shallow = {"SubExpressions": [{"SubExpressions": [{"Operator": "Or"}]}]}
    result = parse_input(
        input_shape("Search"), {"Resource": "TrainingJob", "SearchExpression": shallow}
    )
    assert result["SearchExpression"] == shallow
    error = errors_of(
        "Search",
        {
            "Resource": "TrainingJob",
            "SearchExpression": {"SubExpressions": [{"SubExpressions": [{"Operator": "Maybe"}]}]},
        },
    )
    assert "at 'SearchExpression.SubExpressions[0].SubExpressions[0].Operator'" in error.message


def test_no_input_shape_accepts_only_an_empty_object() -> None:
    assert parse_input(None, {}) == {}
    with pytest.raises(ValidationError, match="Unknown member 'x' at '<root>'"):
        parse_input(None, {"x": 1})


# --------------------------------------------------------------------------- synthetic shapes

SYNTHETIC = ServiceModel(
    {
        "metadata": {"protocol": "json", "jsonVersion": "1.1", "apiVersion": "2024-01-01"},
        "operations": {
            "Op": {"name": "Op", "input": {"shape": "In"}, "output": {"shape": "Out"}},
        },
        "shapes": {
            "In": {
                "type": "structure",
                "members": {
                    "Blob": {"shape": "Blob"},
                    "Doc": {"shape": "Doc"},
                    "Secret": {"shape": "Secret"},
                    "Ratio": {"shape": "Ratio"},
                },
            },
            "Out": {
                "type": "structure",
                "members": {
                    "When": {"shape": "When"},
                    "Blob": {"shape": "Blob"},
                    "State": {"shape": "State"},
                    "Items": {"shape": "Items"},
                    "Labels": {"shape": "Labels"},
                    "Doc": {"shape": "Doc"},
                    "Count": {"shape": "Count"},
                },
            },
            "Blob": {"type": "blob", "min": 1, "max": 4},
            "Doc": {"type": "structure", "members": {}, "document": True},
            "Secret": {"type": "string", "max": 3, "sensitive": True},
            "Ratio": {"type": "double", "min": 0, "max": 1},
            "When": {"type": "timestamp"},
            "State": {"type": "string", "enum": ["On", "Off"]},
            "Items": {"type": "list", "member": {"shape": "Item"}},
            "Item": {"type": "structure", "members": {"When": {"shape": "When"}}},
            "Labels": {"type": "map", "key": {"shape": "State"}, "value": {"shape": "When"}},
            "Count": {"type": "long"},
        },
    },
    service_name="synthetic",
)


def test_blobs_documents_and_sensitive_values() -> None:
    shape = SYNTHETIC.operation_model("Op").input_shape
    body = {"Blob": "AQID", "Doc": {"any": [1, {"json": None}]}, "Ratio": 1}
    assert parse_input(shape, body) == {
        "Blob": b"\x01\x02\x03",
        "Doc": {"any": [1, {"json": None}]},
        "Ratio": 1.0,
    }
    with pytest.raises(ValidationError) as caught:
        parse_input(shape, {"Blob": "not base64!", "Secret": "hunter2", "Ratio": 1.5})
    message = caught.value.message
    assert "at 'Blob' failed to satisfy constraint: Member must be a base64-encoded string" in (
        message
    )
    assert "hunter2" not in message
    assert "Value '*** Sensitive Data Redacted ***' at 'Secret'" in message
    assert (
        "Value '1.5' at 'Ratio' failed to satisfy constraint: Member must have value "
        "less than or equal to 1" in message
    )
    with pytest.raises(ValidationError, match="Member must have length less than or equal to 4"):
        parse_input(shape, {"Blob": "AQIDBAU="})


class State(Enum):
    ON = "On"


def test_serialise_output_keeps_only_modelled_members() -> None:
    shape = SYNTHETIC.operation_model("Op").output_shape
    moment = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    data = {
        "When": moment,
        "Blob": b"\x01\x02",
        "State": State.ON,
        "Items": [{"When": moment.replace(microsecond=250000), "Junk": 1}, None],
        "Labels": {State.ON: datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))},
        "Doc": {"nested": {"at": moment}},
        "Count": 7,
        "Internal": "secret",
        "Missing": None,
    }
    out = serialise_output(shape, data)
    assert out == {
        "When": 1714564800,
        "Blob": "AQI=",
        "State": "On",
        "Items": [{"When": 1714564800.25}],
        "Labels": {"On": 1714564800},
        "Doc": {"nested": {"at": 1714564800}},
        "Count": 7,
    }
    json.dumps(out)


def test_serialise_describe_training_job() -> None:
    created = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    data = {
        "TrainingJobName": "job",
        "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/job",
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "FailureReason": None,
        "CreationTime": created,
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "Ours": 1},
        "SecondaryStatusTransitions": [{"Status": "Starting", "StartTime": created}],
        "internal_row_id": 17,
    }
    out = serialise_output(output_shape("DescribeTrainingJob"), data)
    assert "FailureReason" not in out and "internal_row_id" not in out
    assert out["CreationTime"] == 1704164645
    assert out["ResourceConfig"] == {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1}
    assert out["SecondaryStatusTransitions"] == [{"Status": "Starting", "StartTime": 1704164645}]
    # botocore's own parser reads what we write.
    parsed = botocore_parse("DescribeTrainingJob", out)
    assert parsed["CreationTime"] == created


def botocore_parse(operation: str, payload: dict[str, Any]) -> dict[str, Any]:
    from botocore.parsers import create_parser

    response = {"status_code": 200, "headers": {}, "body": json.dumps(payload).encode()}
    parser = create_parser("json")
    return parser.parse(response, output_shape(operation))  # type: ignore[no-any-return]


def test_serialise_output_without_a_shape() -> None:
    assert serialise_output(None, {"anything": 1}) == {}


# --------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+$", "héllo wörld 42", True),
        ("^[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]+$", "semi;colon", False),
        ("^[\\p{L}\\p{M}\\p{S}\\p{N}\\p{P}]+$", "a+b€(ü)", True),
        ("^[\\p{L}\\p{M}\\p{S}\\p{N}\\p{P}]+$", "a b", False),
        ("^arn:[\\p{Alnum}\\-]+:lambda$", "arn:aws-cn:lambda", True),
        ("^arn:[\\p{Alnum}\\-]+:lambda$", "arn:äws:lambda", False),
        ("^[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*$", "ok 😀\t", True),
        ("^[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*$", "no\x01", False),
        ("^([\\p{L}\\p{Z}\\p{N}_.:\\/=+\\-@]*)${1,256}", "tag value", True),
        ("^[\\w-_]+$", "a-b_c", True),
        ("^[\\w-_]+$", "é", False),  # Java's \w is ASCII
        ("^(?i)(true|false)$", "TRUE", True),
        ("\\A[a-z]+\\z", "abc\n", False),
        ("^[\\P{C}\\t]{1,3}$", "a\tb", True),
        ("^[\\P{C}\\t]{1,3}$", "\x00", False),
        ("^.+$", "line\rbreak", False),  # Java's . stops at \r too
        ("^x{2}{2}$", "xxxx", True),
        ("[a-z]+", "UPPER then lower", True),  # translation adds no anchors; shapes use fullmatch
    ],
)
def test_java_patterns_are_translated(pattern: str, text: str, matches: bool) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None, translate_pattern(pattern)
    assert (compiled.search(text) is not None) is matches


def test_untranslatable_patterns_are_skipped_not_fatal() -> None:
    assert compile_pattern("[\\p{Print}&&[^|:/]]+") is None  # Java class intersection
    assert compile_pattern("\\p{InGreek}") is None
    assert compile_pattern("(unbalanced") is None


def every_pattern(model: ServiceModel) -> set[str]:
    found = set()
    for name in model.shape_names:
        pattern = model.shape_for(name).metadata.get("pattern")
        if pattern:
            found.add(pattern)
    return found


@pytest.mark.parametrize("model", [SAGEMAKER, LOGS, QUOTAS], ids=lambda m: m.service_name)
def test_every_pattern_of_our_models_compiles(model: ServiceModel) -> None:
    failing = sorted(p for p in every_pattern(model) if compile_pattern(p) is None)
    assert failing == []


# --------------------------------------------------------------------------- properties

OPERATIONS = sorted(SAGEMAKER.operation_names)
VALID_OPERATIONS = [op for op in OPERATIONS if valid_body(input_shape(op)) is not None]
PROPERTY_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@PROPERTY_SETTINGS
@given(st.data())
def test_random_bodies_only_ever_raise_validation_errors(data: st.DataObject) -> None:
    operation = data.draw(st.sampled_from(OPERATIONS), label="operation")
    shape = input_shape(operation)
    body = data.draw(random_body(shape), label="body")
    try:
        result = parse_input(shape, body)
    except ValidationError as error:
        assert error.errors and error.message.startswith(f"{error.total} validation error")
    else:
        assert isinstance(result, dict)


def test_almost_every_operation_has_a_valid_body_strategy() -> None:
    assert len(VALID_OPERATIONS) >= len(OPERATIONS) - 5


@PROPERTY_SETTINGS
@given(st.data())
def test_valid_bodies_pass(data: st.DataObject) -> None:
    operation = data.draw(st.sampled_from(VALID_OPERATIONS), label="operation")
    shape = input_shape(operation)
    strategy = valid_body(shape)
    assert strategy is not None
    body = data.draw(strategy, label="body")
    result = parse_input(shape, body)
    assert set(result) == {k for k, v in body.items() if v is not None}
    json.dumps(serialise_output(shape, result))  # and what we parsed serialises back


@pytest.mark.parametrize("model", [LOGS, QUOTAS], ids=lambda m: m.service_name)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_valid_bodies_pass_for_other_models(model: ServiceModel, data: st.DataObject) -> None:
    operation = data.draw(st.sampled_from(sorted(model.operation_names)), label="operation")
    shape = input_shape(operation, model)
    strategy = valid_body(shape)
    if strategy is None:
        return
    parse_input(shape, data.draw(strategy, label="body"))


def test_patterns_must_match_the_whole_value() -> None:
    """As SageMaker does: `my_job` is refused though a prefix of it matches the pattern."""
    shape = SAGEMAKER.operation_model("DescribeTrainingJob").input_shape
    with pytest.raises(ValidationError) as excinfo:
        parse_input(shape, {"TrainingJobName": "my_job"})
    assert "at 'TrainingJobName'" in excinfo.value.message
    assert "regular expression pattern" in excinfo.value.message
    assert parse_input(shape, {"TrainingJobName": "my-job-2"}) == {"TrainingJobName": "my-job-2"}


@pytest.mark.parametrize(
    "body",
    [
        {"logGroupName": "g", "logStreamName": "x\ud800/algo-1-1"},
        {"logGroupName": "g", "logStreamNames": ["ok", "\udfff"]},
        {"logGroupName": "g", "filterPattern": "a\udc80b"},
    ],
)
def test_a_string_that_is_not_unicode_is_refused_by_its_member(body: dict[str, Any]) -> None:
    """Issue 25: JSON spells a lone surrogate ("\\ud800"), which no encoder writes; it
    reached SQLite and file names and failed there (500)."""
    operation = "GetLogEvents" if "logStreamName" in body else "FilterLogEvents"
    with pytest.raises(ValidationError) as refused:
        parse_input(input_shape(operation, LOGS), body)
    assert "Member must be valid Unicode" in refused.value.message
    assert (
        "\\ud800" in refused.value.message
        or "\\udfff" in refused.value.message
        or ("\\udc80" in refused.value.message)
    )
    # A real character outside the BMP (a surrogate pair in JSON) is a character.
    parse_input(input_shape("GetLogEvents", LOGS), {"logGroupName": "g", "logStreamName": "😀"})
