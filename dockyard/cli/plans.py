"""`dockyard plans`: search for capacity, buy it, and follow a plan's blocks."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import typer
from rich.table import Table

from dockyard.cli.client import DEFAULT_REGION, Region, call, sagemaker
from dockyard.cli.common import DEFAULT_DATA, DEFAULT_ENDPOINT, DataDir, EndpointUrl, console, fail
from dockyard.clock import wall_now

app = typer.Typer(help="Training plans: reserve GPU capacity ahead of time.")


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if value else "-"


def _length(hours: int, minutes: int) -> str:
    days, hours = divmod(hours, 24)
    return (f"{days}d " if days else "") + f"{hours}h{minutes:02d}m"


def _parse_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise fail(f"cannot read {text!r} as an ISO 8601 time") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@app.command()
def search(
    instance_type: str = typer.Option(None, "--instance-type", help="e.g. ml.p5.48xlarge"),
    count: int = typer.Option(None, "--count", help="Instances: 1, 2, 4, 8, 16, 32 or 64."),
    ultraserver_type: str = typer.Option(
        None, "--ultraserver-type", help="e.g. ml.u-p6e-gb200x72"
    ),
    ultraservers: int = typer.Option(None, "--ultraservers", help="Whole UltraServers."),
    days: int = typer.Option(1, "--days", help="Duration in whole days, 1 to 182."),
    start_after: str = typer.Option(None, "--start-after", help="ISO 8601; default now."),
    end_before: str = typer.Option(None, "--end-before", help="ISO 8601."),
    target: str = typer.Option(
        "training-job", "--target", help="training-job or hyperpod-cluster."
    ),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Find up to three offerings of reserved capacity."""
    request: dict[str, Any] = {"DurationHours": days * 24, "TargetResources": [target]}
    for key, value in (
        ("InstanceType", instance_type),
        ("InstanceCount", count),
        ("UltraServerType", ultraserver_type),
        ("UltraServerCount", ultraservers),
        ("StartTimeAfter", _parse_time(start_after)),
        ("EndTimeBefore", _parse_time(end_before)),
    ):
        if value is not None:
            request[key] = value
    client = sagemaker(endpoint_url, data_dir, region)
    offerings = call(client.search_training_plan_offerings, **request)["TrainingPlanOfferings"]
    if not offerings:
        console.print("no capacity fits that request; try other dates, fewer instances or days")
        return
    table = Table("Offering", "Blocks (AZ: start → end UTC)", "Length", "Upfront fee")
    for offering in offerings:
        blocks = "\n".join(
            f"{b['AvailabilityZone']}: {_when(b['StartTime'])} → {_when(b['EndTime'])}"
            f"  {b['InstanceCount']} × {b['InstanceType']}"
            for b in offering["ReservedCapacityOfferings"]
        )
        table.add_row(
            offering["TrainingPlanOfferingId"],
            blocks,
            _length(offering["DurationHours"], offering["DurationMinutes"]),
            f"{offering['UpfrontFee']} {offering['CurrencyCode']}",
        )
    console.print(table)
    console.print("buy one with: dockyard plans buy OFFERING --name NAME")


@app.command()
def buy(
    offering: str = typer.Argument(help="An offering id from `dockyard plans search`."),
    name: str = typer.Option(..., "--name", help="A name for the plan."),
    spares: int = typer.Option(None, "--spares", help="Spare instances per UltraServer."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Buy an offering: its capacity is yours once the upfront fee is paid."""
    client = sagemaker(endpoint_url, data_dir, region)
    request: dict[str, Any] = {"TrainingPlanName": name, "TrainingPlanOfferingId": offering}
    if spares is not None:
        request["SpareInstanceCountPerUltraServer"] = spares
    arn = call(client.create_training_plan, **request)["TrainingPlanArn"]
    console.print(f"bought {arn}")
    console.print(f"follow it with: dockyard plans show {name}")


@app.command("ls")
def list_plans(
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """List your training plans."""
    client = sagemaker(endpoint_url, data_dir, region)
    table = Table("Name", "Status", "Instances", "Start (UTC)", "End (UTC)", "Fee")
    for page in client.get_paginator("list_training_plans").paginate():
        for plan in page["TrainingPlanSummaries"]:
            block = plan["ReservedCapacitySummaries"][0]
            table.add_row(
                plan["TrainingPlanName"],
                plan["Status"],
                f"{plan['TotalInstanceCount']} × {block['InstanceType']}",
                _when(plan.get("StartTime")),
                _when(plan.get("EndTime")),
                f"{plan['UpfrontFee']} {plan['CurrencyCode']}",
            )
    console.print(table)


def timeline(blocks: list[dict[str, Any]], now: datetime, width: int = 60) -> list[str]:
    """One text row per block over the plan's span: '#' reserved, '^' marks now."""
    start = min(b["StartTime"] for b in blocks)
    end = max(b["EndTime"] for b in blocks)
    span = (end - start).total_seconds() or 1.0

    def column(instant: datetime) -> int:
        return max(0, min(width - 1, int((instant - start).total_seconds() / span * width)))

    rows = []
    for index, block in enumerate(blocks, 1):
        cells = ["·"] * width
        for i in range(column(block["StartTime"]), column(block["EndTime"]) + 1):
            cells[i] = "#"
        rows.append(f"  block {index} |{''.join(cells)}| {block['AvailabilityZone']}")
    if start <= now <= end:
        rows.append("          " + " " * column(now) + "^ now")
    return rows


@app.command()
def show(
    name: str = typer.Argument(help="The plan's name."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Show a plan, its blocks and a timeline of them."""
    client = sagemaker(endpoint_url, data_dir, region)
    plan = call(client.describe_training_plan, TrainingPlanName=name)
    blocks = plan["ReservedCapacitySummaries"]
    console.print(f"[bold]{plan['TrainingPlanName']}[/bold]  {plan['Status']}")
    if plan.get("StatusMessage"):
        console.print(f"  {plan['StatusMessage']}")
    console.print(
        f"  {plan['TotalInstanceCount']} × {blocks[0]['InstanceType']} for "
        f"{plan['TargetResources'][0]}, {_length(plan['DurationHours'], plan['DurationMinutes'])}"
        f" in {len(blocks)} block(s); upfront fee {plan['UpfrontFee']} {plan['CurrencyCode']}"
    )
    console.print(
        f"  instances: {plan['AvailableInstanceCount']} available, "
        f"{plan['InUseInstanceCount']} in use, {plan.get('UnhealthyInstanceCount', 0)} unhealthy"
    )
    table = Table("#", "Reserved capacity", "AZ", "Start (UTC)", "End (UTC)", "Length", "Status")
    for index, block in enumerate(blocks, 1):
        table.add_row(
            str(index),
            block["ReservedCapacityArn"].rsplit("/", 1)[1],
            block["AvailabilityZone"],
            _when(block["StartTime"]),
            _when(block["EndTime"]),
            _length(block["DurationHours"], block["DurationMinutes"]),
            block["Status"],
        )
    console.print(table)
    for row in timeline(blocks, _server_now(endpoint_url)):
        console.print(row, markup=False)
    _queue(client, plan["TrainingPlanArn"])


def _queue(client: Any, plan_arn: str) -> None:
    """The plan's training jobs, oldest first: the order they get its instances in."""
    pages = client.get_paginator("list_training_jobs").paginate(
        TrainingPlanArnEquals=plan_arn, SortBy="CreationTime", SortOrder="Ascending"
    )
    jobs = [job for page in pages for job in page["TrainingJobSummaries"]]
    if not jobs:
        console.print("  no training jobs on this plan")
        return
    table = Table("Job", "Status", "Secondary", "Created (UTC)", title="Training jobs (queue)")
    for job in jobs:
        table.add_row(
            job["TrainingJobName"],
            job["TrainingJobStatus"],
            job.get("SecondaryStatus", "-"),
            _when(job["CreationTime"]),
        )
    console.print(table)


def _server_now(endpoint_url: str) -> datetime:
    """The server's clock (it may be a manual one); the real time if it cannot be read."""
    try:
        with urllib.request.urlopen(endpoint_url.rstrip("/") + "/healthz", timeout=5) as response:
            return datetime.fromisoformat(json.loads(response.read())["now"])
    except (OSError, ValueError, KeyError):
        return wall_now()
