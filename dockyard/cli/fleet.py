"""`dockyard fleet`: the instances dockyard may hand out, and what each is doing now."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from dockyard.cli.common import (
    DEFAULT_DATA,
    DEFAULT_ENDPOINT,
    DataDir,
    EndpointUrl,
    console,
    operator_request,
)

Instances = Annotated[list[str], typer.Argument(help="Instance ids (see `dockyard fleet`).")]

app = typer.Typer(
    help="Operator: the fleet, what each instance is doing, and injected failures.",
    invoke_without_command=True,
)


@app.callback()
def fleet(
    ctx: typer.Context,
    instance_type: str = typer.Option(None, "--instance-type", help="Only this type."),
    availability_zone: str = typer.Option(None, "--az", help="Only this availability zone."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """List the fleet (operator; asks the running server, whose clock says what 'now' is)."""
    if ctx.invoked_subcommand is not None:
        return
    view = operator_request(endpoint_url, data_dir, "/_dockyard/fleet")
    table = Table("Instance", "Type", "AZ", "UltraServer", "Health", "Doing", "Until (UTC)")
    shown = 0
    for row in view["instances"]:
        if instance_type and row["instance_type"] != instance_type:
            continue
        if availability_zone and row["availability_zone"] != availability_zone:
            continue
        shown += 1
        table.add_row(
            row["id"],
            row["instance_type"],
            row["availability_zone"],
            row["ultraserver_id"] or "-",
            row["health"],
            row["doing"],
            (row["until"] or "-")[:16].replace("T", " "),
        )
    console.print(table)
    console.print(f"{shown} instances at {view['now'][:19].replace('T', ' ')} UTC")


def _health(health: str, instances: list[str], endpoint_url: str, data_dir: DataDir) -> None:
    result = operator_request(
        endpoint_url,
        data_dir,
        "/_dockyard/fleet/health",
        {"health": health, "instances": instances},
    )
    console.print(f"{len(result['instances'])} instance(s) now {result['health']}")


@app.command()
def fail(
    instances: Instances,
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Inject a failure: the instances become Unhealthy (nodes on them are replaced)."""
    _health("Unhealthy", instances, endpoint_url, data_dir)


@app.command()
def repair(
    instances: Instances,
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Bring failed instances back: Healthy again."""
    _health("Healthy", instances, endpoint_url, data_dir)
