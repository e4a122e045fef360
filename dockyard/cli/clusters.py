"""`dockyard clusters`: HyperPod clusters, their instance groups and nodes."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from dockyard.cli.client import DEFAULT_REGION, Region, call, sagemaker
from dockyard.cli.common import DEFAULT_DATA, DEFAULT_ENDPOINT, DataDir, EndpointUrl, console
from dockyard.cli.plans import _server_now, _when, timeline

app = typer.Typer(help="HyperPod clusters: long-lived nodes on demand or on training plans.")


@app.command("ls")
def list_clusters(
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """List your clusters."""
    client = sagemaker(endpoint_url, data_dir, region)
    table = Table("Name", "Status", "Created (UTC)", "Training plans")
    for page in client.get_paginator("list_clusters").paginate():
        for cluster in page["ClusterSummaries"]:
            plans = cluster.get("TrainingPlanArns") or []
            table.add_row(
                cluster["ClusterName"],
                cluster["ClusterStatus"],
                _when(cluster["CreationTime"]),
                "\n".join(arn.rsplit("/", 1)[1] for arn in plans) or "-",
            )
    console.print(table)


def _nodes(client: Any, name: str) -> list[dict[str, Any]]:
    pages = client.get_paginator("list_cluster_nodes").paginate(ClusterName=name)
    return [node for page in pages for node in page["ClusterNodeSummaries"]]


@app.command()
def show(
    name: str = typer.Argument(help="The cluster's name."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Show a cluster: its groups, their plans' blocks on a timeline, and its nodes."""
    client = sagemaker(endpoint_url, data_dir, region)
    cluster = call(client.describe_cluster, ClusterName=name)
    console.print(f"[bold]{cluster['ClusterName']}[/bold]  {cluster['ClusterStatus']}")
    if cluster.get("FailureMessage"):
        console.print(f"  {cluster['FailureMessage']}", markup=False)
    table = Table("Group", "Type", "Nodes (running / wanted)", "Status", "Capacity")
    for group in cluster["InstanceGroups"]:
        plan = group.get("TrainingPlanArn")
        table.add_row(
            group["InstanceGroupName"],
            group["InstanceType"],
            f"{group['CurrentCount']} / {group['TargetCount']}",
            group["Status"],
            f"plan {plan.rsplit('/', 1)[1]} ({group.get('TrainingPlanStatus')})"
            if plan
            else "on demand",
        )
    console.print(table)
    now = _server_now(endpoint_url)
    for arn in sorted(
        {g["TrainingPlanArn"] for g in cluster["InstanceGroups"] if g.get("TrainingPlanArn")}
    ):
        plan = call(client.describe_training_plan, TrainingPlanName=arn.rsplit("/", 1)[1])
        console.print(
            f"  plan {plan['TrainingPlanName']} (nodes run until 1 hour before a block ends):"
        )
        for row in timeline(plan["ReservedCapacitySummaries"], now):
            console.print(row, markup=False)
    _print_nodes(_nodes(client, name))


def _print_nodes(nodes: list[dict[str, Any]]) -> None:
    if not nodes:
        console.print("  no nodes")
        return
    table = Table("Node", "Group", "Type", "Status", "Launched (UTC)", "Message", title="Nodes")
    for node in nodes:
        status = node["InstanceStatus"]
        table.add_row(
            node["InstanceId"],
            node["InstanceGroupName"],
            node["InstanceType"],
            status["Status"],
            _when(node["LaunchTime"]),
            status.get("Message") or "",
        )
    console.print(table)


@app.command()
def nodes(
    name: str = typer.Argument(help="The cluster's name."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """List a cluster's nodes."""
    client = sagemaker(endpoint_url, data_dir, region)
    _print_nodes(_nodes(client, name))
