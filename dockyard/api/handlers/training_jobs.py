"""SageMaker training-job operations."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import job_requests, training_jobs, warm_pools
from dockyard.services.errors import ValidationException


def describe_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return training_jobs.describe_training_job(
            connection,
            ctx.account_id,
            ctx.region,
            params["TrainingJobName"],
            backend=ctx.state.backend,
            now=ctx.clock.now(),
        )


def list_training_jobs(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return training_jobs.list_training_jobs(
            connection, ctx.account_id, ctx.region, params, now=ctx.clock.now()
        )


def create_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = job_requests.create(
            session,
            ctx.clock.now(),
            ctx.account_id,
            ctx.region,
            params,
            ctx.state.plans,
            ctx.state.s3_store,
        )
    ctx.state.control.nudge(first="jobs")
    return result


def stop_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = job_requests.stop(
            session, ctx.clock.now(), ctx.account_id, ctx.region, params["TrainingJobName"]
        )
    ctx.state.control.nudge()
    return result


def update_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    """Only ResourceConfig.KeepAlivePeriodInSeconds of a warm pool (spec §5.6) is served."""
    others = sorted(set(params) - {"TrainingJobName", "ResourceConfig"})
    if others:
        raise ValidationException(
            "dockyard's UpdateTrainingJob changes ResourceConfig.KeepAlivePeriodInSeconds "
            f"only; remove {', '.join(others)}"
        )
    seconds = params.get("ResourceConfig", {}).get("KeepAlivePeriodInSeconds")
    if seconds is None:
        raise ValidationException(
            "UpdateTrainingJob needs ResourceConfig.KeepAlivePeriodInSeconds"
        )
    with ctx.db.session() as session:
        job = warm_pools.update_keep_alive(
            session,
            ctx.clock.now(),
            ctx.account_id,
            ctx.region,
            params["TrainingJobName"],
            int(seconds),
            ctx.state.plans,
        )
        arn = job.arn
    ctx.state.control.nudge()
    return {"TrainingJobArn": arn}


def delete_training_job(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        answer = job_requests.delete(
            session, ctx.clock.now(), ctx.account_id, ctx.region, params["TrainingJobName"]
        )
    ctx.state.control.nudge()  # its files go (the purges reconciler)
    return answer


HANDLERS: dict[str, Handler] = {
    "DeleteTrainingJob": delete_training_job,
    "CreateTrainingJob": create_training_job,
    "StopTrainingJob": stop_training_job,
    "UpdateTrainingJob": update_training_job,
    "DescribeTrainingJob": describe_training_job,
    "ListTrainingJobs": list_training_jobs,
}
