"""`dockyard clusters`: HyperPod clusters, their instance groups and nodes."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dockyard.cli.client import DEFAULT_REGION, Region, call, sagemaker, signed_post
from dockyard.cli.common import (
    DEFAULT_DATA,
    DEFAULT_ENDPOINT,
    DataDir,
    EndpointUrl,
    console,
    err_console,
    fail,
)
from dockyard.cli.node_shell import run_shell
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


# -- getting onto a node -----------------------------------------------------------------

EXEC_PATH = "/_dockyard/clusters/exec"


def _run_on_node(
    endpoint_url: str,
    data_dir: Path,
    region: str,
    cluster: str,
    node: str,
    argv: list[str],
    *,
    stdin: bytes = b"",
    timeout: float,
    cwd: str | None = None,
) -> tuple[int, bytes, bool]:
    body: dict[str, Any] = {
        "ClusterName": cluster,
        "NodeId": node,
        "Command": argv,
        "Stdin": base64.b64encode(stdin).decode(),
        "TimeoutSeconds": timeout,
    }
    if cwd is not None:
        body["WorkingDirectory"] = cwd
    status, answer = signed_post(
        endpoint_url, data_dir, region, EXEC_PATH, body, timeout=timeout + 60
    )
    if status != 200:
        raise fail(f"{answer.get('__type')}: {answer.get('message')}")
    output = base64.b64decode(str(answer.get("Output") or ""))
    return int(answer["ExitCode"]), output, bool(answer.get("OutputTruncated"))


@app.command("exec")
def exec_command(
    cluster: Annotated[str, typer.Argument(help="The cluster's name or ARN.")],
    node: Annotated[str, typer.Argument(help="The node's instance id (i-...).")],
    command: Annotated[list[str], typer.Argument(help="The command and its arguments.")],
    stdin: bool = typer.Option(
        False, "--stdin", "-i", help="Send this command's stdin to the command (at most 1 MiB)."
    ),
    timeout: float = typer.Option(300, "--timeout", help="Seconds before it is killed."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Run a command on a Running node, in its sandbox; exit with the command's status."""
    data = sys.stdin.buffer.read() if stdin else b""
    code, output, truncated = _run_on_node(
        endpoint_url, data_dir, region, cluster, node, command, stdin=data, timeout=timeout
    )
    sys.stdout.buffer.write(output)
    sys.stdout.buffer.flush()
    if truncated:
        err_console.print("[yellow]output cut at 1 MiB[/yellow]")
    raise typer.Exit(code)


@app.command()
def shell(
    cluster: str = typer.Argument(help="The cluster's name or ARN."),
    node: str = typer.Argument(help="The node's instance id (i-...)."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """An interactive shell, with a terminal, on a Running node (in a fresh sandbox of
    it); exit with the shell's status. Not on a terminal, stdin is streamed to it."""
    raise typer.Exit(run_shell(endpoint_url, data_dir, region, cluster, node))
