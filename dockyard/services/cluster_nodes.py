"""Cluster nodes in the database: the node operations of the API, and placing a new
node for the clusters reconciler - on its plan's usable block (by instance on an
UltraServer, `ultraserver_capacity`) or on demand, its lease written (spec §3.5, §3.6).
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, object_session

from dockyard.domain import clusters as rules
from dockyard.domain import ultraservers
from dockyard.domain.clusters import NODE_TRANSITIONS, NodeStatus
from dockyard.domain.plan_jobs import Block
from dockyard.secretbox import SecretBox
from dockyard.services import accounts, capacity, plan_jobs, ultraserver_capacity
from dockyard.services.clusters import (
    find,
    group_spec,
    node_holder,
    nodes_of,
    plan_blocks,
)
from dockyard.services.errors import ResourceNotFound, ValidationException
from dockyard.services.pagination import decode_token, page
from dockyard.store.tables import AccessKey, Cluster, ClusterNode, Instance, TrainingPlan


def _new_instance_id() -> str:
    return "i-" + secrets.token_hex(9)[:17]


# What a node's own key may do: S3, as its instance group's role lets a HyperPod node;
# never the SageMaker API (code on a node would make clusters and jobs with it).
NODE_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
)


def node_credentials(
    session: Session, box: SecretBox, node: ClusterNode, now: datetime
) -> accounts.Credentials:
    """The node's own access key (its account's, S3 only), made the first time."""
    if node.access_key_id:
        record = accounts.lookup_key(session, box, node.access_key_id)
        if record is not None:
            return accounts.Credentials(
                record.account_id, record.access_key_id, record.secret_access_key
            )
    made = accounts.create_access_key(session, now, box, node.account_id, NODE_POLICY)
    node.access_key_id = made.access_key_id
    return made


def forget_credentials(session: Session, node: ClusterNode) -> None:
    """The node is gone: so is its key (the server's key cache lets go of it within
    `api.keys.TTL_SECONDS`)."""
    if node.access_key_id:
        session.execute(delete(AccessKey).where(AccessKey.access_key_id == node.access_key_id))
        node.access_key_id = None


def set_node_status(node: ClusterNode, new: NodeStatus, message: str | None = None) -> None:
    node.status = NODE_TRANSITIONS.check(NodeStatus(node.status), new).value
    if message is not None:
        node.message = message[:1024]


# ----------------------------------------------------------------------------- nodes


def _node_summary(node: ClusterNode) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "InstanceGroupName": node.instance_group,
        "InstanceId": node.instance_id,
        "InstanceType": node.instance_type,
        "LaunchTime": node.launch_time,
        "InstanceStatus": {"Status": node.status, "Message": node.message},
    }
    if node.ultraserver_id:
        summary["UltraServerInfo"] = {"Id": node.ultraserver_id, "Type": _ultraserver_type(node)}
    return summary


def _ultraserver_type(node: ClusterNode) -> str | None:
    session = object_session(node)
    instance = session.get(Instance, node.fleet_instance_id) if session is not None else None
    return instance.ultraserver_type if instance is not None else None


# A node's place in its UltraServer, as labels (HyperPod's topology labels).
ULTRASERVER_LABEL = "sagemaker.amazonaws.com/ultraserver-id"
POSITION_LABEL = "sagemaker.amazonaws.com/ultraserver-instance-position"
INSTANCE_LABEL = "sagemaker.amazonaws.com/fleet-instance-id"


def topology_labels(node: ClusterNode) -> dict[str, str]:
    if not node.ultraserver_id or not node.fleet_instance_id:
        return {}
    return {
        ULTRASERVER_LABEL: node.ultraserver_id,
        POSITION_LABEL: str(ultraservers.position(node.fleet_instance_id)),
        INSTANCE_LABEL: node.fleet_instance_id,
    }


def list_nodes(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    cluster = find(session, account_id, region, params["ClusterName"])
    nodes = nodes_of(session, cluster)
    if "CreationTimeAfter" in params:
        nodes = [n for n in nodes if n.launch_time > params["CreationTimeAfter"]]
    if "CreationTimeBefore" in params:
        nodes = [n for n in nodes if n.launch_time < params["CreationTimeBefore"]]
    if params.get("InstanceGroupNameContains"):
        nodes = [n for n in nodes if params["InstanceGroupNameContains"] in n.instance_group]
    if params.get("SortBy", "CREATION_TIME") == "NAME":
        nodes.sort(key=lambda n: (n.instance_group, n.instance_id))
    if params.get("SortOrder", "Ascending") == "Descending":
        nodes.reverse()
    max_results = params.get("MaxResults", 10)
    offset = decode_token(params.get("NextToken"), params)
    shown, token = page(nodes[offset : offset + max_results + 1], offset, max_results, params)
    return {"ClusterNodeSummaries": [_node_summary(n) for n in shown], "NextToken": token}


def _node(session: Session, cluster: Cluster, instance_id: str) -> ClusterNode:
    node = session.scalar(
        select(ClusterNode).where(
            ClusterNode.cluster_id == cluster.id, ClusterNode.instance_id == instance_id
        )
    )
    if node is None:
        raise ResourceNotFound(f"Node {instance_id!r} is not a node of cluster {cluster.name}")
    return node


def describe_node(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    cluster = find(session, account_id, region, params["ClusterName"])
    if not params.get("NodeId"):
        raise ValidationException("NodeId is required (dockyard gives nodes no logical ids)")
    node = _node(session, cluster, params["NodeId"])
    group = group_spec(cluster, node.instance_group) or {}
    return {
        "NodeDetails": {
            **_node_summary(node),
            "LifeCycleConfig": group.get("LifeCycleConfig"),
            "ThreadsPerCore": group.get("ThreadsPerCore", 1),
            "Placement": {"AvailabilityZone": node.availability_zone},
            "CapacityType": "OnDemand",
            **(
                {"KubernetesConfig": {"CurrentLabels": labels, "DesiredLabels": labels}}
                if (labels := topology_labels(node))
                else {}
            ),
        }
    }


def batch_delete_nodes(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    cluster = find(session, account_id, region, params["ClusterName"])
    done, failed = [], []
    for instance_id in params.get("NodeIds") or []:
        node = session.scalar(
            select(ClusterNode).where(
                ClusterNode.cluster_id == cluster.id, ClusterNode.instance_id == instance_id
            )
        )
        if node is None:
            failed.append(
                {"Code": "InstanceIdNotFound", "Message": "No such node", "NodeId": instance_id}
            )
            continue
        node.shutdown_requested = True
        done.append(instance_id)
    if params.get("NodeLogicalIds"):
        raise ValidationException("NodeLogicalIds: dockyard gives nodes no logical ids")
    return {"Successful": done, "Failed": failed}


def place_node(
    session: Session, cluster: Cluster, group: dict[str, Any], now: datetime
) -> ClusterNode | str:
    """A new node row for the group, on its plan's usable block or on demand (its lease
    written); or why none can be placed now."""
    instance_id = _new_instance_id()
    plan_arn = group.get("TrainingPlanArn")
    if plan_arn:
        blocks = plan_blocks(session, str(plan_arn))
        current = rules.current_block([b for b, _ in blocks], now)
        if current is None:
            return rules.plan_group_message([b for b, _ in blocks], now) or ""
        block_pool = next(key for block, key in blocks if block.id == current.id)
        if ultraserver_capacity.servers_of(session, current.id):
            return _on_ultraserver(session, cluster, group, instance_id, current, now)
        used = plan_jobs.in_use(session, str(plan_arn)).get(current.id, 0)
        if used >= current.instance_count:
            return (
                f"The training plan's reserved capacity has no free instance: {used} of "
                f"{current.instance_count} are in use"
            )
        return _new_node(
            cluster, group, instance_id, block_pool, current.availability_zone, current.id, now
        )
    capacity.lock(session)
    calendar = capacity.load_calendar(
        session, now, region=cluster.region, instance_type=group["InstanceType"]
    )
    end = now + rules.ON_DEMAND_HOLD
    zones = {
        n.availability_zone
        for n in session.scalars(select(ClusterNode).where(ClusterNode.cluster_id == cluster.id))
        if n.instance_group == group["InstanceGroupName"]
    }
    # The group's nodes stay in one AZ when they can (one network, as HyperPod's subnet).
    pools = sorted(calendar.pools(), key=lambda p: (p.availability_zone not in zones, p.key))
    for pool in pools:
        if pool.ultraserver_id is None and calendar[pool.key].fits(now, end, 1):
            capacity.reserve(
                session,
                [(pool.key, 1)],
                now,
                end,
                kind="cluster-node",
                holder=node_holder(cluster, instance_id),
                account_id=cluster.account_id,
                calendar=calendar,
            )
            return _new_node(
                cluster, group, instance_id, pool.key, pool.availability_zone, None, now
            )
    return (
        f"Waiting for capacity: no {group['InstanceType']} instance in {cluster.region} is free "
        "for as long as a node holds one (on demand, until it is deleted)"
    )


def _on_ultraserver(
    session: Session,
    cluster: Cluster,
    group: dict[str, Any],
    instance_id: str,
    block: Block,
    now: datetime,
) -> ClusterNode | str:
    """A node on a healthy free instance of the block's UltraServers
    (`ultraserver_capacity.pick`): a failed instance's node moves to a spare while
    the UltraServer has one."""
    plan = session.scalar(
        select(TrainingPlan).where(TrainingPlan.arn == str(group["TrainingPlanArn"]))
    )
    spares = plan.spare_per_ultraserver if plan is not None else 0
    chosen = ultraserver_capacity.pick(session, block.id, spares, 1)
    if not chosen:
        return (
            "The training plan's UltraServers have no usable instance free: their failures "
            "have used up the spares"
        )
    [free] = chosen
    node = _new_node(
        cluster, group, instance_id, free.pool_key, block.availability_zone, block.id, now
    )
    node.fleet_instance_id = free.id
    node.ultraserver_id = free.ultraserver_id
    return node


def failed_instances(session: Session, nodes: list[ClusterNode]) -> set[str]:
    """The fleet instances under these nodes that are no longer healthy."""
    return ultraserver_capacity.failed(
        session, {n.fleet_instance_id for n in nodes if n.fleet_instance_id}
    )


def _new_node(
    cluster: Cluster,
    group: dict[str, Any],
    instance_id: str,
    pool_key: str,
    zone: str,
    block_id: str | None,
    now: datetime,
) -> ClusterNode:
    return ClusterNode(
        cluster_id=cluster.id,
        account_id=cluster.account_id,
        region=cluster.region,
        instance_group=group["InstanceGroupName"],
        instance_id=instance_id,
        instance_type=group["InstanceType"],
        status=NodeStatus.PENDING.value,
        message="Provisioning the node and running its lifecycle script (OnCreate)",
        availability_zone=zone,
        pool_key=pool_key,
        block_id=block_id,
        launch_time=now,
    )
