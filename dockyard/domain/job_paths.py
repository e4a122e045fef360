"""Paths a training job request names, which must stay inside the job's own tree.

A request names local paths (CheckpointConfig.LocalPath, channel directories) and S3
locations that become files on an instance (with the embedded S3, files of this host).
The botocore model lets through what SageMaker's containers shrug off - `..`, a
channel named `..`, a `file://` code archive - and here each could reach outside the
job: so each is refused up front, with a message naming the field (spec §4.8).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

OPT_ML = "/opt/ml"
DEFAULT_CHECKPOINTS = "/opt/ml/checkpoints"
# SageMaker's own part of the tree: the warm pool cache is /opt/ml/sagemaker/warmpoolcache.
MANAGED = "/opt/ml/sagemaker"


def _segments_escape(key: str) -> bool:
    return any(part in (".", "..") for part in key.split("/"))


def checkpoint_path_problem(local_path: str) -> str | None:
    if "\x00" in local_path:
        return "CheckpointConfig.LocalPath must not contain a NUL character"
    normal = posixpath.normpath(local_path)
    if (
        not local_path.startswith("/")
        or _segments_escape(local_path)
        or normal == OPT_ML
        or not normal.startswith(OPT_ML + "/")
    ):
        return (
            f"CheckpointConfig.LocalPath must be a directory under {OPT_ML} without . or .. "
            f"(got {local_path!r}); the default is {DEFAULT_CHECKPOINTS}"
        )
    if normal == MANAGED or normal.startswith(MANAGED + "/"):
        # The warm pool's cache is the job's own between jobs: the agent, as root, stages
        # checkpoints into nothing the job's user could have prepared.
        return (
            f"CheckpointConfig.LocalPath must not be under {MANAGED} (got {local_path!r}): "
            "that is SageMaker's (the warm pool's cache)"
        )
    return None


def s3_uri_problem(field: str, uri: str) -> str | None:
    if not uri.startswith("s3://"):
        return f"{field} must be an s3:// URI (got {uri!r})"
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or _segments_escape(bucket) or _segments_escape(key):
        return f"{field} must not have . or .. as a path segment (got {uri!r})"
    return None


def sdk_string(value: str) -> str:
    """A string hyperparameter as the SageMaker SDK sends it, JSON-quoted ('"train.py"'),
    read back; any other value as it is."""
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):  # "[[[[...": a tenant's string, read as text
        return value
    return decoded if isinstance(decoded, str) else value


def s3_locations(params: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, s3:// URI) of every S3 location a CreateTrainingJob request names."""
    output = params.get("OutputDataConfig") or {}
    if "S3OutputPath" in output:
        yield "OutputDataConfig.S3OutputPath", str(output["S3OutputPath"])
    checkpoint = params.get("CheckpointConfig") or {}
    if "S3Uri" in checkpoint:
        yield "CheckpointConfig.S3Uri", str(checkpoint["S3Uri"])
    for index, channel in enumerate(params.get("InputDataConfig") or []):
        source = (channel.get("DataSource") or {}).get("S3DataSource") or {}
        if "S3Uri" in source:
            yield f"InputDataConfig[{index}].DataSource.S3DataSource.S3Uri", str(source["S3Uri"])
    hyper = params.get("HyperParameters") or {}
    if "sagemaker_submit_directory" in hyper:
        submit = sdk_string(str(hyper["sagemaker_submit_directory"]))
        if submit.startswith("s3://"):
            yield "HyperParameters.sagemaker_submit_directory", submit


def request_problems(params: dict[str, Any]) -> list[str]:
    """What in a CreateTrainingJob request would reach outside the job's tree."""
    problems = []
    checkpoint = params.get("CheckpointConfig") or {}
    if "LocalPath" in checkpoint:
        problem = checkpoint_path_problem(str(checkpoint["LocalPath"]))
        if problem:
            problems.append(problem)
    for index, channel in enumerate(params.get("InputDataConfig") or []):
        name = str(channel.get("ChannelName", ""))
        if name in (".", ".."):
            problems.append(
                f"InputDataConfig[{index}].ChannelName {name!r} is not a directory name a "
                "channel can have"
            )
    for field, uri in s3_locations(params):
        if field.startswith("HyperParameters."):
            continue  # said below, with what a code archive must be
        problem = s3_uri_problem(field, uri)
        if problem:
            problems.append(problem)
    hyper = params.get("HyperParameters") or {}
    if "sagemaker_submit_directory" in hyper:
        submit = sdk_string(str(hyper["sagemaker_submit_directory"]))
        problem = s3_uri_problem("HyperParameters.sagemaker_submit_directory", submit)
        if problem:
            problems.append(
                problem
                + ": the code is read from S3 (a tar.gz archive), never from the server's disk"
            )
    return problems
