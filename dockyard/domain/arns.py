"""ARNs shaped like AWS's, so clients that parse them keep working."""

from __future__ import annotations


def arn(region: str, account_id: str, resource_type: str, name: str) -> str:
    return f"arn:aws:sagemaker:{region}:{account_id}:{resource_type}/{name}"


def training_job_arn(region: str, account_id: str, name: str) -> str:
    # SageMaker lower-cases the name in training-job ARNs.
    return arn(region, account_id, "training-job", name.lower())


def training_plan_arn(region: str, account_id: str, name: str) -> str:
    return arn(region, account_id, "training-plan", name)


def reserved_capacity_arn(region: str, account_id: str, capacity_id: str) -> str:
    return arn(region, account_id, "reserved-capacity", capacity_id)


def repository_arn(region: str, account_id: str, name: str) -> str:
    """An ECR repository's ARN, as IAM policies name it."""
    return f"arn:aws:ecr:{region}:{account_id}:repository/{name}"
