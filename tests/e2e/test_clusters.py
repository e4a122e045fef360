"""HyperPod clusters (spec §3.5) with boto3 against a manual-clock server: nodes are real
instances that run their group's OnCreate script from S3, on demand or on a plan's
blocks (down with 1 hour left in a block, back in the next)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.plan_helpers import GB200, search, set_clock, settle, tomorrow_at, ultraserver_plan
from tests.harness import DockyardServer, run_cli

P5 = "ml.p5.48xlarge"
M5 = "ml.m5.xlarge"
ON_CREATE = """#!/bin/sh
set -e
echo "on-create ran on $(hostname) in $(pwd)"
echo "group settings: $(cat settings.txt)"
"""


# What HyperPod's lifecycle scripts commonly do: leave a marker in S3, with the AWS CLI
# and the node's own credentials (through its agent's relay to dockyard's S3).
MARKER = """#!/bin/sh
set -e
echo "on-create ran on $(hostname)" | aws s3 cp - "s3://scripts/markers/$(hostname)"
"""


def marker(server: DockyardServer, instance_id: str) -> str:
    s3 = server.client("s3")
    return str(
        s3.get_object(Bucket="scripts", Key=f"markers/{instance_id}")["Body"].read().decode()
    )


def cli(server: DockyardServer, *args: str) -> str:
    return str(run_cli(*args, "--endpoint-url", server.endpoint, data_dir=server.data_dir).stdout)


def at(day0: datetime, days: int, hour: int = 11, minute: int = 30) -> datetime:
    return day0.replace(hour=hour, minute=minute) + timedelta(days=days)


@pytest.fixture(autouse=True)
def life_cycle(manual_server: DockyardServer) -> None:
    scripts = manual_server.data_dir / "s3" / "scripts" / "lifecycle"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "on_create.sh").write_text(ON_CREATE)
    (scripts / "settings.txt").write_text("slurm-ish")
    (scripts / "fails.sh").write_text("#!/bin/sh\necho 'cannot mount /fsx' >&2\nexit 3\n")
    (scripts / "marker.sh").write_text(MARKER)


def group(name: str, count: int, instance_type: str = M5, **extra: Any) -> dict[str, Any]:
    return {
        "InstanceGroupName": name,
        "InstanceType": instance_type,
        "InstanceCount": count,
        "LifeCycleConfig": {"SourceS3Uri": "s3://scripts/lifecycle", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod",
        **extra,
    }


def wait_cluster(
    server: DockyardServer, client: Any, name: str, status: str, timeout: float = 90
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster = client.describe_cluster(ClusterName=name)
        except ClientError as error:
            if status == "Gone" and error.response["Error"]["Code"] == "ResourceNotFound":
                return {}
            raise
        if cluster["ClusterStatus"] == status:
            return dict(cluster)
        assert time.monotonic() < deadline, (name, status, cluster, nodes(client, name))
        settle(server)
        time.sleep(0.1)


def nodes(client: Any, name: str) -> list[dict[str, Any]]:
    pages = client.get_paginator("list_cluster_nodes").paginate(ClusterName=name)
    return [node for page in pages for node in page["ClusterNodeSummaries"]]


def wait_nodes(
    server: DockyardServer, client: Any, name: str, statuses: list[str], timeout: float = 90
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        found = nodes(client, name)
        if sorted(n["InstanceStatus"]["Status"] for n in found) == sorted(statuses):
            return found
        assert time.monotonic() < deadline, (name, statuses, found)
        settle(server)
        time.sleep(0.1)


def node_log(server: DockyardServer, instance_id: str) -> list[str]:
    path = next((server.data_dir / "instances").glob(f"*-cluster-*-{instance_id}/{instance_id}"))
    log = Path(path) / "logs" / "output.jsonl"
    return [json.loads(line)["m"] for line in log.read_text().splitlines() if line]


def leases(server: DockyardServer, holder_part: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{server.data_dir / 'dockyard.db'}")
    try:
        with engine.connect() as connection:
            return int(
                connection.execute(
                    text("SELECT COUNT(*) FROM leases WHERE holder LIKE :h"),
                    {"h": f"%{holder_part}%"},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def test_an_on_demand_cluster_comes_up_scales_and_goes(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    arn = client.create_cluster(ClusterName="research", InstanceGroups=[group("workers", 2)])[
        "ClusterArn"
    ]
    assert arn.startswith("arn:aws:sagemaker:us-east-1:") and ":cluster/" in arn
    cluster = wait_cluster(server, client, "research", "InService")
    [workers] = cluster["InstanceGroups"]
    assert (workers["CurrentCount"], workers["TargetCount"], workers["Status"]) == (
        2,
        2,
        "InService",
    )
    running = wait_nodes(server, client, "research", ["Running", "Running"])
    for node in running:
        # OnCreate ran on the node, from its group's scripts, as the node's host.
        log = node_log(server, node["InstanceId"])
        assert f"on-create ran on {node['InstanceId']} in /opt/ml/input/data/lifecycle" in log
        assert "group settings: slurm-ish" in log
        detail = client.describe_cluster_node(ClusterName="research", NodeId=node["InstanceId"])
        assert detail["NodeDetails"]["Placement"]["AvailabilityZone"].startswith("us-east-1")
    # On demand, each node holds its instance on the calendar until it is deleted.
    cluster_id = arn.rsplit("/", 1)[1]
    assert leases(server, f"cluster/{cluster_id}/node/") == 2
    summaries = client.list_clusters()["ClusterSummaries"]
    assert [c["ClusterName"] for c in summaries] == ["research"]

    # Each node's OnCreate output, in the cluster's log group as HyperPod names it.
    logs = server.client("logs")
    log_group = f"/aws/sagemaker/Clusters/research/{cluster_id}"
    streams = logs.describe_log_streams(logGroupName=log_group)["logStreams"]
    assert sorted(s["logStreamName"] for s in streams) == sorted(
        f"LifecycleConfig/workers/{node['InstanceId']}" for node in running
    )
    events = logs.get_log_events(
        logGroupName=log_group, logStreamName=streams[0]["logStreamName"], startFromHead=True
    )["events"]
    assert any(e["message"].startswith("on-create ran on") for e in events)

    # Another account sees none of it.
    _, key = server.new_account("stranger")
    stranger = server.client(key=key)
    with pytest.raises(ClientError) as error:
        server.client("logs", key=key).describe_log_streams(logGroupName=log_group)
    assert error.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert stranger.list_clusters()["ClusterSummaries"] == []
    with pytest.raises(ClientError) as error:
        stranger.describe_cluster(ClusterName="research")
    assert error.value.response["Error"]["Code"] == "ResourceNotFound"
    with pytest.raises(ClientError):
        stranger.delete_cluster(ClusterName=arn)

    # Fewer nodes: one goes (its lease with it).
    client.update_cluster(ClusterName="research", InstanceGroups=[group("workers", 1)])
    wait_nodes(server, client, "research", ["Running"])
    wait_cluster(server, client, "research", "InService")
    assert leases(server, f"cluster/{cluster_id}/node/") == 1

    client.delete_cluster(ClusterName="research")
    wait_cluster(server, client, "research", "Gone")
    assert leases(server, f"cluster/{cluster_id}/node/") == 0


def test_a_failing_on_create_fails_the_cluster(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    broken = group("workers", 1)
    broken["LifeCycleConfig"]["OnCreate"] = "fails.sh"
    client.create_cluster(ClusterName="broken", InstanceGroups=[broken])
    cluster = wait_cluster(server, client, "broken", "Failed")
    assert "OnCreate" in cluster["FailureMessage"] and "ExitCode 3" in cluster["FailureMessage"]
    wait_nodes(server, client, "broken", [])  # its nodes are let go
    client.delete_cluster(ClusterName="broken")
    wait_cluster(server, client, "broken", "Gone")


LC = {"SourceS3Uri": "s3://scripts/lifecycle", "OnCreate": "on_create.sh"}


def test_requests_are_checked(manual_server: DockyardServer) -> None:
    client = manual_server.client()
    cases = [
        ([group("a", 1), group("a", 1)], "unique"),
        ([{**group("a", 1), "LifeCycleConfig": {"SourceS3Uri": "s3://scripts/x"}}], "OnCreate"),
        (
            [{**group("a", 1), "LifeCycleConfig": {**LC, "OnCreate": "a/../x"}}],
            "without . or ..",
        ),
        ([group("a", 1, "ml.c5.large")], "no ml.c5.large instances"),
        (
            [group("a", 1, P5, TrainingPlanArn="arn:aws:sagemaker:us-east-1:000000000000:"
                                               "training-plan/nope")],
            "is not a training plan of this account",
        ),
    ]  # fmt: skip
    for groups, words in cases:
        with pytest.raises(ClientError) as error:
            client.create_cluster(ClusterName="checked", InstanceGroups=groups)
        assert error.value.response["Error"]["Code"] == "ValidationException"
        assert words in error.value.response["Error"]["Message"]
    client.create_cluster(ClusterName="checked", InstanceGroups=[group("a", 1)])
    with pytest.raises(ClientError) as error:
        client.create_cluster(ClusterName="checked", InstanceGroups=[group("a", 1)])
    assert error.value.response["Error"]["Code"] == "ResourceInUse"
    # "<type> for cluster usage" (64 by default) counts every cluster's groups.
    with pytest.raises(ClientError) as error:
        client.create_cluster(ClusterName="greedy", InstanceGroups=[group("a", 64)])
    assert error.value.response["Error"]["Code"] == "ResourceLimitExceeded"
    message = error.value.response["Error"]["Message"]
    assert "'ml.m5.xlarge for cluster usage' is 64 Instances" in message
    assert "current utilization of 1 Instances" in message
    paginator = manual_server.client("service-quotas").get_paginator("list_service_quotas")
    names = {q["QuotaName"] for page in paginator.paginate(ServiceCode="sagemaker")
             for q in page["Quotas"]}  # fmt: skip
    assert "ml.m5.xlarge for cluster usage" in names


def hyperpod_plan(server: DockyardServer, d0: datetime) -> dict[str, Any]:
    """A 1-instance plan for clusters: a block on day 0 and one on day 2, in one AZ."""
    client = server.client()
    for offering in search(
        client,
        InstanceType=P5,
        InstanceCount=8,
        DurationHours=24,
        StartTimeAfter=at(d0, 1),
        EndTimeBefore=at(d0, 2),
    ):
        zone = offering["ReservedCapacityOfferings"][0]["AvailabilityZone"]
        client.create_training_plan(
            TrainingPlanName=f"blocker-{zone}",
            TrainingPlanOfferingId=offering["TrainingPlanOfferingId"],
        )
    offerings = search(
        client,
        TargetResources=["hyperpod-cluster"],
        InstanceType=P5,
        InstanceCount=1,
        DurationHours=48,
        StartTimeAfter=at(d0, 0),
        EndTimeBefore=at(d0, 3),
    )
    split = next(o for o in offerings if len(o["ReservedCapacityOfferings"]) == 2)
    blocks = split["ReservedCapacityOfferings"]
    assert [b["StartTime"] for b in blocks] == [at(d0, 0), at(d0, 2)]
    assert len({b["AvailabilityZone"] for b in blocks}) == 1  # a HyperPod plan stays put
    arn = client.create_training_plan(
        TrainingPlanName="pods", TrainingPlanOfferingId=split["TrainingPlanOfferingId"]
    )["TrainingPlanArn"]
    return {"arn": arn, "blocks": blocks}


def test_a_cluster_on_a_plan_follows_its_blocks(manual_server: DockyardServer) -> None:
    server = manual_server
    client = server.client()
    d0 = tomorrow_at(6)
    set_clock(server, d0)
    plan = hyperpod_plan(server, d0)
    client.create_cluster(
        ClusterName="on-plan",
        InstanceGroups=[
            {
                **group("gpus", 1, P5, TrainingPlanArn=plan["arn"]),
                "LifeCycleConfig": {
                    "SourceS3Uri": "s3://scripts/lifecycle",
                    "OnCreate": "marker.sh",
                },
            }
        ],
    )
    settle(server)
    cluster = client.describe_cluster(ClusterName="on-plan")
    assert cluster["ClusterStatus"] == "Creating" and nodes(client, "on-plan") == []
    assert cluster["InstanceGroups"][0]["TrainingPlanArn"] == plan["arn"]
    assert [c["ClusterName"] for c in client.list_clusters(TrainingPlanArn=plan["arn"])[
        "ClusterSummaries"
    ]] == ["on-plan"]  # fmt: skip

    set_clock(server, at(d0, 0))  # the first block: the node comes up, OnCreate runs
    wait_cluster(server, client, "on-plan", "InService")
    [first] = wait_nodes(server, client, "on-plan", ["Running"])
    assert marker(server, first["InstanceId"]) == f"on-create ran on {first['InstanceId']}\n"
    detail = client.describe_cluster_node(ClusterName="on-plan", NodeId=first["InstanceId"])
    zone = plan["blocks"][0]["AvailabilityZone"]
    assert detail["NodeDetails"]["Placement"]["AvailabilityZone"] == zone
    described = client.describe_training_plan(TrainingPlanName="pods")
    assert described["InUseInstanceCount"] == 1
    shown = cli(server, "clusters", "show", "on-plan")
    assert "gpus" in shown and first["InstanceId"] in shown and "block 2" in shown
    assert "on-plan" in cli(server, "clusters", "ls")
    assert "Running" in cli(server, "clusters", "nodes", "on-plan")

    set_clock(server, at(d0, 1) - timedelta(hours=1))  # 1 hour left: the node goes
    wait_nodes(server, client, "on-plan", [])
    assert client.describe_cluster(ClusterName="on-plan")["ClusterStatus"] == "InService"

    set_clock(server, at(d0, 2))  # the second block: a node comes back, in the same AZ
    [second] = wait_nodes(server, client, "on-plan", ["Running"])
    assert second["InstanceId"] != first["InstanceId"]
    assert marker(server, second["InstanceId"]) == f"on-create ran on {second['InstanceId']}\n"
    detail = client.describe_cluster_node(ClusterName="on-plan", NodeId=second["InstanceId"])
    assert detail["NodeDetails"]["Placement"]["AvailabilityZone"] == zone

    set_clock(server, at(d0, 3) - timedelta(hours=1))  # the last block's last hour
    wait_nodes(server, client, "on-plan", [])
    set_clock(server, at(d0, 3) + timedelta(hours=1))
    settle(server)
    assert nodes(client, "on-plan") == []  # nothing comes back after the last block
    client.delete_cluster(ClusterName="on-plan")
    wait_cluster(server, client, "on-plan", "Gone")


def test_an_ultraserver_heals_from_its_spare_then_is_impaired(
    manual_server: DockyardServer,
) -> None:
    server = manual_server
    client = server.client()
    plan_arn, start = ultraserver_plan(server, "nvl72", spares=1, target="hyperpod-cluster")

    with pytest.raises(ClientError) as error:  # 18 instances, one a spare: 17 usable
        client.create_cluster(
            ClusterName="too-big", InstanceGroups=[group("g", 18, GB200, TrainingPlanArn=plan_arn)]
        )
    assert "17 usable instances" in error.value.response["Error"]["Message"]
    client.create_cluster(
        ClusterName="nvl", InstanceGroups=[group("gpus", 17, GB200, TrainingPlanArn=plan_arn)]
    )
    set_clock(server, start)
    wait_cluster(server, client, "nvl", "InService", timeout=180)
    running = wait_nodes(server, client, "nvl", ["Running"] * 17, timeout=180)
    block_arn = client.describe_training_plan(TrainingPlanName="nvl72")[
        "ReservedCapacitySummaries"
    ][0]["ReservedCapacityArn"]

    def ultraserver() -> dict[str, Any]:
        servers = client.list_ultra_servers_by_reserved_capacity(ReservedCapacityArn=block_arn)
        [only] = servers["UltraServers"]
        return dict(only)

    health = ultraserver()
    assert (health["HealthStatus"], health["InUseInstanceCount"]) == ("OK", 17)
    assert health["AvailableSpareInstanceCount"] == 1
    # Each node knows where it sits: its UltraServer and its position in it.
    positions = set()
    for node in running:
        assert node["UltraServerInfo"]["Type"] == "ml.u-p6e-gb200x72"
        details = client.describe_cluster_node(ClusterName="nvl", NodeId=node["InstanceId"])
        labels = details["NodeDetails"]["KubernetesConfig"]["CurrentLabels"]
        assert labels["sagemaker.amazonaws.com/ultraserver-id"] == node["UltraServerInfo"]["Id"]
        positions.add(int(labels["sagemaker.amazonaws.com/ultraserver-instance-position"]))
    assert positions == set(range(1, 18))  # the 18th instance is the spare

    # An instance fails: its node is replaced on the spare; the UltraServer has none left.
    victim = next(n for n in running)
    details = client.describe_cluster_node(ClusterName="nvl", NodeId=victim["InstanceId"])
    failed = details["NodeDetails"]["KubernetesConfig"]["CurrentLabels"][
        "sagemaker.amazonaws.com/fleet-instance-id"
    ]
    assert f"cluster-node {victim['InstanceId']}" in cli(
        server, "fleet", "--az", "us-east-1-dfw-2a"
    )
    cli(server, "fleet", "fail", failed)
    deadline = time.monotonic() + 180
    while True:
        found = nodes(client, "nvl")
        ids = {n["InstanceId"] for n in found}
        done = victim["InstanceId"] not in ids and len(found) == 17
        if done and all(n["InstanceStatus"]["Status"] == "Running" for n in found):
            break
        assert time.monotonic() < deadline, found
        settle(server)
        time.sleep(0.2)
    health = ultraserver()
    assert (health["HealthStatus"], health["UnhealthyInstanceCount"]) == ("Impaired", 1)
    assert health["AvailableSpareInstanceCount"] == 0 and health["InUseInstanceCount"] == 17
    plan = client.describe_training_plan(TrainingPlanName="nvl72")
    assert (plan["UnhealthyInstanceCount"], plan["AvailableSpareInstanceCount"]) == (1, 0)

    # A second failure finds no spare: the group is one node short.
    another = next(n for n in nodes(client, "nvl"))
    details = client.describe_cluster_node(ClusterName="nvl", NodeId=another["InstanceId"])
    cli(
        server,
        "fleet",
        "fail",
        details["NodeDetails"]["KubernetesConfig"]["CurrentLabels"][
            "sagemaker.amazonaws.com/fleet-instance-id"
        ],
    )
    wait_nodes(server, client, "nvl", ["Running"] * 16, timeout=180)
    [gpus] = client.describe_cluster(ClusterName="nvl")["InstanceGroups"]
    assert (gpus["CurrentCount"], gpus["TargetCount"]) == (16, 17)
    assert ultraserver()["UnhealthyInstanceCount"] == 2
    client.delete_cluster(ClusterName="nvl")
    wait_cluster(server, client, "nvl", "Gone", timeout=180)


def _agent_pids(server: DockyardServer) -> set[int]:
    pids = set()
    for pid_file in (server.data_dir / "instances").glob("*-cluster-*/*/agent.pid"):
        pids.add(int(pid_file.read_text()))
    return pids


def test_a_killed_server_finds_its_nodes_running(manual_server: DockyardServer) -> None:
    """A server SIGKILLed and restarted adopts the nodes it had: the same agents, no
    second launch, and the cluster still moves (it can be deleted)."""
    server = manual_server
    client = server.client()
    client.create_cluster(ClusterName="kept", InstanceGroups=[group("workers", 2)])
    wait_cluster(server, client, "kept", "InService")
    before = {n["InstanceId"] for n in wait_nodes(server, client, "kept", ["Running"] * 2)}
    agents = _agent_pids(server)
    assert len(agents) == 2
    server.kill()
    server.start()
    client = server.client()
    settle(server)
    after = wait_nodes(server, client, "kept", ["Running"] * 2)
    assert {n["InstanceId"] for n in after} == before
    assert _agent_pids(server) == agents  # adopted, not launched again
    for pid in agents:
        assert Path(f"/proc/{pid}").exists()
    client.delete_cluster(ClusterName="kept")
    wait_cluster(server, client, "kept", "Gone")
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in agents):
        assert time.monotonic() < deadline, "the nodes' agents did not go"
        time.sleep(0.1)


def test_node_recovery_replaces_a_dead_node_or_keeps_it_failed(
    manual_server: DockyardServer,
) -> None:
    """A node whose instance dies is `Failure`; with NodeRecovery None it stays so, with
    Automatic it is replaced (its OnCreate runs again on the new node)."""
    import os
    import signal

    server = manual_server
    client = server.client()
    client.create_cluster(
        ClusterName="fragile", InstanceGroups=[group("workers", 1)], NodeRecovery="None"
    )
    wait_cluster(server, client, "fragile", "InService")
    [node] = wait_nodes(server, client, "fragile", ["Running"])
    [pid_file] = (server.data_dir / "instances").glob(
        f"*-cluster-*/{node['InstanceId']}/agent.pid"
    )
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    [dead] = wait_nodes(server, client, "fragile", ["Failure"])
    assert dead["InstanceId"] == node["InstanceId"]
    assert "stopped unexpectedly" in dead["InstanceStatus"]["Message"]
    settle(server)
    assert [n["InstanceId"] for n in nodes(client, "fragile")] == [node["InstanceId"]]
    group_view = client.describe_cluster(ClusterName="fragile")["InstanceGroups"][0]
    assert group_view["Status"] == "Degraded"

    client.update_cluster(
        ClusterName="fragile", InstanceGroups=[group("workers", 1)], NodeRecovery="Automatic"
    )
    [fresh] = wait_nodes(server, client, "fragile", ["Running"])
    assert fresh["InstanceId"] != node["InstanceId"]
    assert any(line.startswith("on-create ran") for line in node_log(server, fresh["InstanceId"]))
    wait_cluster(server, client, "fragile", "InService")
