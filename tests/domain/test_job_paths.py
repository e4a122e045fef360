"""What a job request may name: inside its tree, or refused with the field's name."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dockyard.domain import instance_types
from dockyard.domain.job_paths import checkpoint_path_problem, request_problems, s3_uri_problem


def request(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "HyperParameters": {"sagemaker_submit_directory": '"s3://bucket/code/src.tar.gz"'},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3Uri": "s3://bucket/data/train"}},
            }
        ],
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt", "LocalPath": "/opt/ml/checkpoints"},
    }
    base.update(extra)
    return base


def test_a_request_that_stays_inside_passes() -> None:
    assert request_problems(request()) == []
    assert request_problems({}) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"CheckpointConfig": {"LocalPath": "/opt/ml/../etc"}}, "CheckpointConfig.LocalPath"),
        ({"CheckpointConfig": {"LocalPath": "/checkpoints"}}, "CheckpointConfig.LocalPath"),
        ({"CheckpointConfig": {"LocalPath": "/opt/ml"}}, "CheckpointConfig.LocalPath"),
        ({"CheckpointConfig": {"S3Uri": "s3://b/../x"}}, "CheckpointConfig.S3Uri"),
        ({"OutputDataConfig": {"S3OutputPath": "s3://b/./x"}}, "OutputDataConfig.S3OutputPath"),
        ({"HyperParameters": {"sagemaker_submit_directory": "file:///etc"}}, "submit_directory"),
        ({"HyperParameters": {"sagemaker_submit_directory": '"/abs/src.tar.gz"'}}, "s3://"),
        ({"InputDataConfig": [{"ChannelName": ".."}]}, "InputDataConfig[0].ChannelName"),
        (
            {
                "InputDataConfig": [
                    {"ChannelName": "a", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/../c"}}}
                ]
            },
            "InputDataConfig[0].DataSource.S3DataSource.S3Uri",
        ),
    ],
)
def test_what_would_leave_the_job_is_named(change: dict[str, Any], named: str) -> None:
    problems = request_problems(request(**change))
    assert problems and named in " ".join(problems)


@given(st.lists(st.sampled_from(["a", "b", ".", "..", ""]), min_size=1, max_size=6))
def test_no_accepted_checkpoint_path_leaves_opt_ml(parts: list[str]) -> None:
    path = "/opt/ml/" + "/".join(parts)
    if checkpoint_path_problem(path) is None:
        import posixpath

        assert posixpath.normpath(path).startswith("/opt/ml/")
        assert ".." not in path.split("/")


def test_s3_uris() -> None:
    assert s3_uri_problem("F", "s3://bucket/a/b") is None
    assert "F" in (s3_uri_problem("F", "s3://bucket/a/../b") or "")
    assert "s3://" in (s3_uri_problem("F", "https://x") or "")


def test_instance_types_size_a_sandbox() -> None:
    known = instance_types.catalogue({"ml.m5.xlarge": {"memory_gib": 0.5, "pids": 64}})
    xlarge = instance_types.describe("ml.m5.xlarge", known)
    assert (xlarge.vcpus, xlarge.memory_bytes, xlarge.max_pids) == (4, 512 * 1024**2, 64)
    p5 = instance_types.describe("ml.p5.48xlarge")
    assert (p5.vcpus, p5.gpus, p5.memory_gib) == (192, 8, 2048)
    # Not listed: sized from its name, as EC2 names sizes.
    assert instance_types.describe("ml.c7i.8xlarge").vcpus == 32
    assert instance_types.describe("ml.r7i.2xlarge").memory_gib == 64
    assert instance_types.describe("ml.m5.large").max_pids == 1024
    for bad in ({"vcpus": 0}, {"memory_gib": "lots"}, {"colour": "red"}, {"vcpus": 1.5}):
        with pytest.raises(instance_types.InstanceTypeError):
            instance_types.catalogue({"ml.m5.xlarge": bad})
