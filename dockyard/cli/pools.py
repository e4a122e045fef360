"""`dockyard pools`: the account's managed warm pools, and releasing one.

Warm pools have no API of their own on SageMaker: a pool is a job's `WarmPoolStatus`,
listed with `ListTrainingJobs(WarmPoolStatusEquals=...)` and released with
`UpdateTrainingJob(ResourceConfig={"KeepAlivePeriodInSeconds": 0})`. These commands do
exactly that over the public API, so they work the same against SageMaker.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from dockyard.cli.client import DEFAULT_REGION, Region, call, sagemaker
from dockyard.cli.common import DEFAULT_DATA, DEFAULT_ENDPOINT, DataDir, EndpointUrl, console

app = typer.Typer(help="Managed warm pools: list them, release one.")

STATUSES = ("Available", "InUse", "Reused", "Terminated")


def _remaining(job: dict[str, Any]) -> str:
    warm = job.get("WarmPoolStatus", {})
    if warm.get("Status") != "Available":
        return "-"
    keep = int(job.get("ResourceConfig", {}).get("KeepAlivePeriodInSeconds") or 0)
    left = max(0, keep - int(warm.get("ResourceRetainedBillableTimeInSeconds") or 0))
    return f"{left // 60}m{left % 60:02d}s"


@app.command("ls")
def list_pools(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            help=f"Repeatable: {', '.join(STATUSES)}. Default: Available and InUse.",
        ),
    ] = None,
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """List warm pools: the jobs whose pool is in one of the statuses, newest first."""
    status = status or ["Available", "InUse"]
    unknown = [s for s in status if s not in STATUSES]
    if unknown:
        raise typer.BadParameter(f"unknown status {unknown}; one of {', '.join(STATUSES)}")
    client = sagemaker(endpoint_url, data_dir, region)
    table = Table("Job", "Pool", "Instances", "Keep-alive", "Retained", "Time left", "Reused by")
    rows = 0
    for wanted in status:
        pages = client.get_paginator("list_training_jobs").paginate(
            WarmPoolStatusEquals=wanted, SortBy="CreationTime", SortOrder="Descending"
        )
        for page in pages:
            for summary in page["TrainingJobSummaries"]:
                job = call(
                    client.describe_training_job, TrainingJobName=summary["TrainingJobName"]
                )
                resources = job.get("ResourceConfig", {})
                warm = job.get("WarmPoolStatus", {})
                table.add_row(
                    job["TrainingJobName"],
                    warm.get("Status", "-"),
                    f"{resources.get('InstanceCount')} x {resources.get('InstanceType')}",
                    f"{resources.get('KeepAlivePeriodInSeconds', 0)} s",
                    f"{warm.get('ResourceRetainedBillableTimeInSeconds', 0)} s",
                    _remaining(job),
                    warm.get("ReusedByJob", "-"),
                )
                rows += 1
    if rows:
        console.print(table)
    else:
        console.print(f"no warm pools ({', '.join(status)})")


@app.command()
def release(
    name: str = typer.Argument(help="The job whose Available warm pool to release."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Terminate a job's Available warm pool now (KeepAlivePeriodInSeconds = 0)."""
    client = sagemaker(endpoint_url, data_dir, region)
    call(
        client.update_training_job,
        TrainingJobName=name,
        ResourceConfig={"KeepAlivePeriodInSeconds": 0},
    )
    warm = call(client.describe_training_job, TrainingJobName=name).get("WarmPoolStatus", {})
    console.print(f"{name}: warm pool {warm.get('Status', 'released')}")
