"""Reading training jobs: DescribeTrainingJob and ListTrainingJobs.

Every query is scoped by (account, region): a name in another account is simply
not found, exactly as on AWS.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from dockyard.services.errors import ResourceNotFound
from dockyard.services.pagination import decode_token, page
from dockyard.store.tables import TrainingJob

_SORT_COLUMNS = {
    "Name": TrainingJob.name,
    "CreationTime": TrainingJob.creation_time,
    "Status": TrainingJob.status,
}


def _find(session: Session, account_id: str, region: str, name: str) -> TrainingJob:
    job = session.scalar(
        select(TrainingJob).where(
            TrainingJob.account_id == account_id,
            TrainingJob.region == region,
            TrainingJob.name == name,
        )
    )
    if job is None:
        raise ResourceNotFound(
            f"Requested resource not found: training job {name!r} does not exist"
        )
    return job


def describe_training_job(
    session: Session, account_id: str, region: str, name: str
) -> dict[str, Any]:
    job = _find(session, account_id, region, name)
    return {
        **job.spec,
        "TrainingJobName": job.name,
        "TrainingJobArn": job.arn,
        "TrainingJobStatus": job.status,
        "SecondaryStatus": job.secondary_status,
        "WarmPoolStatus": job.spec.get("WarmPoolStatus"),
        "CreationTime": job.creation_time,
        "LastModifiedTime": job.last_modified_time,
        "TrainingEndTime": job.training_end_time,
    }


def _filtered(account_id: str, region: str, params: dict[str, Any]) -> Select[tuple[TrainingJob]]:
    query = select(TrainingJob).where(
        TrainingJob.account_id == account_id, TrainingJob.region == region
    )
    if "CreationTimeAfter" in params:
        query = query.where(TrainingJob.creation_time > params["CreationTimeAfter"])
    if "CreationTimeBefore" in params:
        query = query.where(TrainingJob.creation_time < params["CreationTimeBefore"])
    if "LastModifiedTimeAfter" in params:
        query = query.where(TrainingJob.last_modified_time > params["LastModifiedTimeAfter"])
    if "LastModifiedTimeBefore" in params:
        query = query.where(TrainingJob.last_modified_time < params["LastModifiedTimeBefore"])
    if params.get("NameContains"):
        query = query.where(
            func.lower(TrainingJob.name).contains(params["NameContains"].lower(), autoescape=True)
        )
    if "StatusEquals" in params:
        query = query.where(TrainingJob.status == params["StatusEquals"])
    if "WarmPoolStatusEquals" in params:
        query = query.where(TrainingJob.warm_pool_status == params["WarmPoolStatusEquals"])
    if "TrainingPlanArnEquals" in params:
        query = query.where(TrainingJob.training_plan_arn == params["TrainingPlanArnEquals"])
    column = _SORT_COLUMNS[params.get("SortBy", "CreationTime")]
    if params.get("SortOrder", "Ascending") == "Descending":
        return query.order_by(column.desc(), TrainingJob.id.desc())
    return query.order_by(column.asc(), TrainingJob.id.asc())


def list_training_jobs(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    max_results = params.get("MaxResults", 10)
    offset = decode_token(params.get("NextToken"), params)
    rows = list(
        session.scalars(
            _filtered(account_id, region, params).offset(offset).limit(max_results + 1)
        )
    )
    jobs, next_token = page(rows, offset, max_results, params)
    summaries = [
        {
            "TrainingJobName": job.name,
            "TrainingJobArn": job.arn,
            "CreationTime": job.creation_time,
            "TrainingEndTime": job.training_end_time,
            "LastModifiedTime": job.last_modified_time,
            "TrainingJobStatus": job.status,
            "SecondaryStatus": job.secondary_status,
            "WarmPoolStatus": {"Status": job.warm_pool_status} if job.warm_pool_status else None,
            "TrainingPlanArn": job.training_plan_arn,
        }
        for job in jobs
    ]
    return {"TrainingJobSummaries": summaries, "NextToken": next_token}
