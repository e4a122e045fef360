"""Reading training jobs: DescribeTrainingJob and ListTrainingJobs.

Every query is scoped by (account, region): a name in another account is simply
not found, exactly as on AWS.

These are the hottest reads of the API, so they run as SQLAlchemy Core statements
built once per query shape with bound parameters, on a plain connection: building
an ORM statement and loading ORM objects cost several times the query itself.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, bindparam, select

from dockyard.compute.backends.protocol import Backend
from dockyard.domain import metrics
from dockyard.domain.jobs import TERMINAL, JobStatus
from dockyard.services import logs
from dockyard.services.errors import ResourceNotFound
from dockyard.services.pagination import decode_token, page
from dockyard.services.warm_pools import job_view
from dockyard.store.tables import TrainingJob, WarmPool

JOBS = TrainingJob.__table__
POOLS = WarmPool.__table__
# When each job's pool became Available for it: its retained time counts from there.
# Asked only for the jobs whose pool is Available, so the hot reads stay one query.
_POOL_SINCE = select(POOLS.c.job_id, POOLS.c.available_since).where(
    POOLS.c.job_id.in_(bindparam("job_ids", expanding=True)),
    POOLS.c.status == "Available",
)
_SCOPE = (JOBS.c.account_id == bindparam("account_id"), JOBS.c.region == bindparam("region"))
_SUMMARY = (
    JOBS.c.id,
    JOBS.c.name,
    JOBS.c.arn,
    JOBS.c.creation_time,
    JOBS.c.training_end_time,
    JOBS.c.last_modified_time,
    JOBS.c.status,
    JOBS.c.secondary_status,
    JOBS.c.warm_pool_status,
    JOBS.c.warm_pool_reused_by,
    JOBS.c.warm_pool_retained_seconds,
    JOBS.c.training_plan_arn,
)
_DESCRIBE = select(
    *_SUMMARY,
    JOBS.c.spec,
    JOBS.c.training_start_time,
    JOBS.c.failure_reason,
    JOBS.c.transitions,
    JOBS.c.billable_seconds,
    JOBS.c.final_metrics,
).where(*_SCOPE, JOBS.c.name == bindparam("name"))

# Filter member -> the condition it adds, with a bound parameter named after the member.
_FILTERS = {
    "CreationTimeAfter": lambda: JOBS.c.creation_time > bindparam("CreationTimeAfter"),
    "CreationTimeBefore": lambda: JOBS.c.creation_time < bindparam("CreationTimeBefore"),
    "LastModifiedTimeAfter": lambda: (
        JOBS.c.last_modified_time > bindparam("LastModifiedTimeAfter")
    ),
    "LastModifiedTimeBefore": lambda: (
        JOBS.c.last_modified_time < bindparam("LastModifiedTimeBefore")
    ),
    "WarmPoolStatusEquals": lambda: JOBS.c.warm_pool_status == bindparam("WarmPoolStatusEquals"),
    "TrainingPlanArnEquals": lambda: (
        JOBS.c.training_plan_arn == bindparam("TrainingPlanArnEquals")
    ),
}
# SageMaker takes a page of MaxResults jobs first and then keeps those of the status
# and name asked for (the model's documentation of StatusEquals; NameContains behaves
# the same there), so a filtered page can be short or empty and still carry a
# NextToken: code written against SageMaker pages on until NextToken is absent.
_AFTER_PAGING = ("NameContains", "StatusEquals")
_SORT_COLUMNS = {
    "Name": JOBS.c.name,
    "CreationTime": JOBS.c.creation_time,
    "Status": JOBS.c.status,
}


def describe_training_job(
    connection: Connection,
    account_id: str,
    region: str,
    name: str,
    backend: Backend | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    job = connection.execute(
        _DESCRIBE, {"account_id": account_id, "region": region, "name": name}
    ).first()
    if job is None:
        raise ResourceNotFound(
            f"Requested resource not found: training job {name!r} does not exist"
        )
    spec = dict(job.spec)
    output = spec.get("OutputDataConfig", {}).get("S3OutputPath", "")
    spec.setdefault(
        "ModelArtifacts",
        {"S3ModelArtifacts": f"{output.rstrip('/')}/{job.name}/output/model.tar.gz"},
    )
    # Scraped by the instances' agents as lines arrive, merged and kept when the job
    # ended; a job that ended before dockyard kept them is answered from the files.
    definitions = spec.get("AlgorithmSpecification", {}).get("MetricDefinitions")
    final_metrics = None
    if definitions and JobStatus(job.status) in TERMINAL:
        if job.final_metrics is not None:
            final_metrics = [
                {**metric, "Timestamp": datetime.fromisoformat(metric["Timestamp"])}
                for metric in job.final_metrics.get("items", [])
            ]
        elif backend is not None:
            instances = logs.job_metrics(connection, backend.records, account_id, region, job.name)
            final_metrics = metrics.final_metrics_of(definitions, instances)
    training_seconds = None
    if job.training_start_time and job.training_end_time:
        training_seconds = int((job.training_end_time - job.training_start_time).total_seconds())
    return {
        **spec,
        "TrainingJobName": job.name,
        "TrainingJobArn": job.arn,
        "TrainingJobStatus": job.status,
        "SecondaryStatus": job.secondary_status,
        "FailureReason": job.failure_reason,
        "CreationTime": job.creation_time,
        "LastModifiedTime": job.last_modified_time,
        "TrainingStartTime": job.training_start_time,
        "TrainingEndTime": job.training_end_time,
        "TrainingTimeInSeconds": training_seconds,
        "BillableTimeInSeconds": job.billable_seconds,
        "FinalMetricDataList": final_metrics,
        "WarmPoolStatus": _warm_pool(job, _pools_since(connection, [job]), now),
        "SecondaryStatusTransitions": [
            {
                **item,
                "StartTime": datetime.fromisoformat(item["StartTime"]),
                **(
                    {"EndTime": datetime.fromisoformat(item["EndTime"])}
                    if item.get("EndTime")
                    else {}
                ),
            }
            for item in (job.transitions or {}).get("items", [])
        ],
    }


@cache
def _list_statement(filters: tuple[str, ...], sort_by: str, descending: bool) -> Select[Any]:
    column = _SORT_COLUMNS[sort_by]
    order = (column.desc(), JOBS.c.id.desc()) if descending else (column.asc(), JOBS.c.id.asc())
    return (
        select(*_SUMMARY)
        .where(*_SCOPE, *(_FILTERS[name]() for name in filters))
        .order_by(*order)
        .offset(bindparam("offset"))
        .limit(bindparam("limit"))
    )


def _pools_since(connection: Connection, jobs: list[Any]) -> dict[int, datetime]:
    ids = [job.id for job in jobs if job.warm_pool_status == "Available"]
    if not ids:
        return {}
    return {
        row.job_id: row.available_since
        for row in connection.execute(_POOL_SINCE, {"job_ids": ids})
    }


def _warm_pool(
    job: Any, since: dict[int, datetime], now: datetime | None
) -> dict[str, Any] | None:
    pool_since = since.get(job.id)
    return job_view(
        pool_since,
        job.warm_pool_status,
        job.warm_pool_reused_by,
        job.warm_pool_retained_seconds,
        now or pool_since or job.last_modified_time,
    )


def list_training_jobs(
    connection: Connection,
    account_id: str,
    region: str,
    params: dict[str, Any],
    now: datetime | None = None,
) -> dict[str, Any]:
    max_results = params.get("MaxResults", 10)
    offset = decode_token(params.get("NextToken"), params)
    filters = tuple(name for name in _FILTERS if params.get(name) not in (None, ""))
    statement = _list_statement(
        filters,
        params.get("SortBy", "CreationTime"),
        params.get("SortOrder", "Ascending") == "Descending",
    )
    values = {name: params[name] for name in filters}
    rows = connection.execute(
        statement,
        {
            **values,
            "account_id": account_id,
            "region": region,
            "offset": offset,
            "limit": max_results + 1,
        },
    ).all()
    jobs, next_token = page(rows, offset, max_results, params)
    status, fragment = params.get("StatusEquals"), (params.get("NameContains") or "").lower()
    jobs = [
        job
        for job in jobs
        if (not status or job.status == status) and fragment in job.name.lower()
    ]
    since = _pools_since(connection, jobs)
    summaries = [
        {
            "TrainingJobName": job.name,
            "TrainingJobArn": job.arn,
            "CreationTime": job.creation_time,
            "TrainingEndTime": job.training_end_time,
            "LastModifiedTime": job.last_modified_time,
            "TrainingJobStatus": job.status,
            "SecondaryStatus": job.secondary_status,
            "WarmPoolStatus": _warm_pool(job, since, now),
            "TrainingPlanArn": job.training_plan_arn,
        }
        for job in jobs
    ]
    return {"TrainingJobSummaries": summaries, "NextToken": next_token}
