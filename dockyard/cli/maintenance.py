"""`dockyard maintenance`: take fleet instances out of service, and bring them back.

Instances in maintenance are not handed out (their pools' capacity drops at once), and
the warm pools on them are terminated (spec §5.10). Talks to the running server's
operator endpoint, so its reconcilers act on the change straight away.
"""

from __future__ import annotations

from typing import Annotated

import typer

from dockyard.cli.common import (
    DEFAULT_DATA,
    DEFAULT_ENDPOINT,
    DataDir,
    EndpointUrl,
    console,
    fail,
    operator_request,
)

app = typer.Typer(help="Operator: take instances out of service for maintenance, or back.")

Instances = Annotated[
    list[str] | None, typer.Argument(help="Instance ids (see `dockyard fleet`).")
]
InstanceType = Annotated[
    str | None, typer.Option("--instance-type", help="Every instance of this type.")
]
Zone = Annotated[str | None, typer.Option("--az", help="Every instance in this AZ.")]


def _set(
    health: str,
    instances: list[str] | None,
    instance_type: str | None,
    availability_zone: str | None,
    endpoint_url: str,
    data_dir: DataDir,
) -> None:
    if not instances and not instance_type and not availability_zone:
        raise fail("name instances, or pass --instance-type and/or --az")
    result = operator_request(
        endpoint_url,
        data_dir,
        "/_dockyard/fleet/health",
        {
            "health": health,
            "instances": instances or [],
            "instance_type": instance_type,
            "availability_zone": availability_zone,
        },
    )
    console.print(f"{len(result['instances'])} instance(s) now {result['health']}")
    if result.get("terminated_warm_pools"):
        console.print(f"terminated {result['terminated_warm_pools']} warm pool(s) on them")


@app.command()
def start(
    instances: Instances = None,
    instance_type: InstanceType = None,
    availability_zone: Zone = None,
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Take instances out of service: nothing new runs on them; their warm pools end."""
    _set("Maintenance", instances, instance_type, availability_zone, endpoint_url, data_dir)


@app.command()
def end(
    instances: Instances = None,
    instance_type: InstanceType = None,
    availability_zone: Zone = None,
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Put instances back in service."""
    _set("Healthy", instances, instance_type, availability_zone, endpoint_url, data_dir)
