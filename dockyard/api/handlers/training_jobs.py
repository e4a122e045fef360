"""SageMaker training-job operations."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import training_jobs


def describe_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return training_jobs.describe_training_job(
            connection, ctx.account_id, ctx.region, params["TrainingJobName"]
        )


def list_training_jobs(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return training_jobs.list_training_jobs(connection, ctx.account_id, ctx.region, params)


HANDLERS: dict[str, Handler] = {
    "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs,
}
