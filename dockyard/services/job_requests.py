"""CreateTrainingJob and StopTrainingJob: record the intent; the jobs reconciler does the work."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain import job_paths, metrics
from dockyard.domain import jobs as rules
from dockyard.domain import warm_pools as warm_pool_rules
from dockyard.domain.arns import training_job_arn
from dockyard.domain.jobs import JobStatus, Secondary
from dockyard.domain.quotas import QuotaKind
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import buckets, plan_jobs, quotas
from dockyard.services.errors import (
    ResourceInUse,
    ResourceLimitExceeded,
    ResourceNotFound,
    ValidationException,
)
from dockyard.services.job_status import set_status, transition
from dockyard.store.scoped import owned
from dockyard.store.tables import CapacityPool, InstancePurge, TrainingJob, WarmPool

# Request members kept on the job and shown again by DescribeTrainingJob.
KEPT = (
    "HyperParameters",
    "AlgorithmSpecification",
    "RoleArn",
    "InputDataConfig",
    "OutputDataConfig",
    "ResourceConfig",
    "VpcConfig",
    "StoppingCondition",
    "EnableNetworkIsolation",
    "EnableInterContainerTrafficEncryption",
    "EnableManagedSpotTraining",
    "SessionChainingConfig",
    "CheckpointConfig",
    "Environment",
    "RetryStrategy",
    "Tags",
)


def _check_runnable(params: dict[str, Any]) -> None:
    # The model leaves these optional (other job kinds use them); a job that runs needs them.
    for member in ("AlgorithmSpecification", "ResourceConfig", "OutputDataConfig"):
        if member not in params:
            raise ValidationException(f"{member} is required to run a training job")
    if not str(params["OutputDataConfig"].get("S3OutputPath", "")).startswith("s3://"):
        raise ValidationException("OutputDataConfig.S3OutputPath must be an s3:// URI")
    problems = job_paths.request_problems(params)
    if problems:
        raise ValidationException("; ".join(problems))
    algorithm = params["AlgorithmSpecification"]
    hyper = params.get("HyperParameters", {})
    if not algorithm.get("ContainerEntrypoint") and not (
        "sagemaker_program" in hyper and "sagemaker_submit_directory" in hyper
    ):
        raise ValidationException(
            "dockyard runs AlgorithmSpecification.ContainerEntrypoint (+ ContainerArguments), "
            "or a script job with hyperparameters sagemaker_program and sagemaker_submit_directory"
        )
    # Tenants' regexes run in RE2 on every line (domain/metrics.py): one it cannot run is
    # refused here, naming its metric, rather than never matching.
    problems = metrics.definition_problems(algorithm.get("MetricDefinitions") or [])
    if problems:
        raise ValidationException("; ".join(problems))
    if algorithm.get("TrainingInputMode", "File") != "File":
        raise ValidationException("dockyard stages input in File mode only (TrainingInputMode)")
    resources = params["ResourceConfig"]
    if resources.get("InstanceGroups"):
        raise ValidationException(
            "ResourceConfig.InstanceGroups (heterogeneous clusters) is not supported yet"
        )
    if not resources.get("InstanceType") or not resources.get("InstanceCount"):
        raise ValidationException(
            "ResourceConfig needs InstanceType and InstanceCount (at least 1)"
        )
    if (
        "StoppingCondition" not in params
        or "MaxRuntimeInSeconds" not in params["StoppingCondition"]
    ):
        raise ValidationException("StoppingCondition.MaxRuntimeInSeconds is required")


def instances_in_jobs(session: Session, account_id: str, region: str, instance_type: str) -> int:
    """Instances of a type the account's unfinished jobs (queued ones too) count against
    its quota: an indexed sum, not the jobs loaded, so a create costs the same with
    10,000 jobs queued as with none (issue 13)."""
    held = session.scalar(
        select(func.coalesce(func.sum(TrainingJob.instance_count), 0)).where(
            TrainingJob.account_id == account_id,
            TrainingJob.region == region,
            TrainingJob.instance_type == instance_type,
            TrainingJob.status.in_([JobStatus.IN_PROGRESS.value, JobStatus.STOPPING.value]),
        )
    )
    return int(held or 0)


def _check_quota(
    session: Session, account_id: str, region: str, params: dict[str, Any], settings: PlanSettings
) -> None:
    instance_type = params["ResourceConfig"]["InstanceType"]
    wanted = int(params["ResourceConfig"]["InstanceCount"])
    quota = quotas.limit(
        session, settings, account_id, region, QuotaKind.TRAINING_JOB, instance_type
    )
    held = instances_in_jobs(session, account_id, region, instance_type)
    # Kept warm pool instances count too (spec §5.7), except a pool this job would
    # take over: its instances move to the job rather than add to the account's.
    key = warm_pool_rules.match_key(params)
    kept = session.execute(
        select(WarmPool.instance_count, WarmPool.match_key).where(
            WarmPool.account_id == account_id,
            WarmPool.region == region,
            WarmPool.instance_type == instance_type,
            WarmPool.status == WarmPoolStatus.AVAILABLE.value,
        )
    ).all()
    reusable = max((count for count, pool_key in kept if pool_key == key), default=0)
    held += sum(count for count, _ in kept) - reusable
    if held + wanted > quota:
        raise ResourceLimitExceeded(
            f"The account-level service limit '{instance_type} for training job usage' is "
            f"{quota} Instances, with current utilization of {held} Instances and a request "
            f"delta of {wanted} Instances. Please use AWS Service Quotas to request an increase "
            "for this quota."
        )


def create(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    params: dict[str, Any],
    settings: PlanSettings,
    store: buckets.BucketStore | None = None,
) -> dict[str, Any]:
    refused = warm_pool_rules.refusal(params)
    if refused is not None:
        raise ValidationException(refused)
    _check_runnable(params)
    name = params["TrainingJobName"]
    instance_type = params["ResourceConfig"]["InstanceType"]
    plan_arn = params["ResourceConfig"].get("TrainingPlanArn")
    if plan_arn:
        # Runs on the plan's reserved (already paid for) capacity, never on demand.
        plan_jobs.check_request(session, account_id, region, params["ResourceConfig"])
    elif not session.scalar(
        select(CapacityPool.key).where(
            CapacityPool.region == region,
            CapacityPool.instance_type == instance_type,
            CapacityPool.ultraserver_id.is_(None),
        )
    ):
        raise ValidationException(
            f"the fleet has no {instance_type} instances in {region} for on-demand jobs"
        )
    arn = training_job_arn(region, account_id, name)
    # The ARN lower-cases the name, and is unique: one indexed lookup, whatever the
    # number of jobs, for names that differ only in case too.
    if session.scalar(select(TrainingJob.id).where(TrainingJob.arn == arn)) is not None:
        raise ResourceInUse(_name_taken(arn))
    if not plan_arn:
        _check_quota(session, account_id, region, params, settings)
    if store is not None:
        buckets.check_job_buckets(session, account_id, params, store)
    job = TrainingJob(
        account_id=account_id,
        region=region,
        name=name,
        arn=arn,
        uid=uuid.uuid4().hex[:16],
        status=JobStatus.IN_PROGRESS.value,
        secondary_status=Secondary.STARTING.value,
        training_plan_arn=plan_arn,
        creation_time=now,
        last_modified_time=now,
        spec={key: params[key] for key in KEPT if key in params},
        transitions={
            "items": [
                {
                    "Status": "Starting",
                    "StartTime": now.isoformat(),
                    "StatusMessage": rules.STARTING,
                }
            ]
        },
    )
    session.add(job)
    try:
        session.flush()
    except IntegrityError as exc:  # the same name (in any case) created at the same time
        raise ResourceInUse(_name_taken(arn)) from exc
    return {"TrainingJobArn": arn}


def _name_taken(arn: str) -> str:
    return (
        "Training job names must be unique within an AWS account and region (regardless of "
        f"case, as in the job's ARN), and a training job with this name already exists ({arn})"
    )


def _find(session: Session, account_id: str, region: str, name: str) -> TrainingJob:
    # Locked for the rest of the transaction (where the database locks rows): a
    # reconciler stepping the job commits first, and what is changed here builds on that.
    job = session.scalar(
        owned(TrainingJob, account_id, region)
        .where(TrainingJob.name == name)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if job is None:
        raise ResourceNotFound(
            f"Requested resource not found: training job {name!r} does not exist"
        )
    return job


def stop(
    session: Session, now: datetime, account_id: str, region: str, name: str
) -> dict[str, Any]:
    job = _find(session, account_id, region, name)
    if JobStatus(job.status) is not JobStatus.IN_PROGRESS:
        raise ValidationException(
            f"The training job {name} is {job.status}; only an InProgress job can be stopped"
        )
    job.stop_requested = True
    set_status(job, JobStatus.STOPPING, now)
    transition(job, Secondary.STOPPING, rules.STOPPING, now)
    return {}


def delete(
    session: Session, now: datetime, account_id: str, region: str, name: str
) -> dict[str, Any]:
    """Forget a finished job (its name may be used again); running ones are refused."""
    job = _find(session, account_id, region, name)
    if JobStatus(job.status) not in rules.TERMINAL:
        raise ResourceInUse(
            f"The training job {name} is {job.status}; only a Completed, Failed or Stopped job "
            "can be deleted"
        )
    if job.warm_pool_status == "Available":
        raise ResourceInUse(f"The training job {name} retains an Available warm pool")
    # Everything of it goes: its instances' files too, once no agent of theirs runs (a
    # warm pool it handed on may still live in its instances' home).
    key = rules.instance_key(job.account_id, job.region, job.name, job.uid)
    if session.get(InstancePurge, key) is None:
        session.add(InstancePurge(job_key=key, requested_at=now))
    session.delete(job)
    return {}
