"""`dockyard fleet`: the instances dockyard may hand out, and what each is doing now."""

from __future__ import annotations

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


def fleet(
    instance_type: str = typer.Option(None, "--instance-type", help="Only this type."),
    availability_zone: str = typer.Option(None, "--az", help="Only this availability zone."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """List the fleet (operator; asks the running server, whose clock says what 'now' is)."""
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
