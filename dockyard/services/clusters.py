"""HyperPod clusters in the database: the API's operations, and the clusters
reconciler's steps (spec §3.5; rules in `domain.clusters`).

An instance group on demand holds one lease per node on the calendar from its launch
until it is deleted (backfill: only capacity no plan needs, `ON_DEMAND_HOLD` ahead); a
group on a plan books nothing, its block's lease holds the instances. Nodes are rows:
the reconciler makes the rows a group lacks, launches them through the backend, reads
what their agents say, and removes the rows of nodes that are gone.
"""

from __future__ import annotations

import secrets
import string
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain import clusters as rules
from dockyard.domain.arns import arn as make_arn
from dockyard.domain.clusters import (
    CLUSTER_TRANSITIONS,
    ClusterStatus,
    NodeStatus,
)
from dockyard.domain.job_paths import s3_uri_problem
from dockyard.domain.plan_jobs import Block
from dockyard.domain.plans import PlanStatus
from dockyard.domain.quotas import QuotaKind
from dockyard.services import buckets, capacity, plan_jobs, quotas
from dockyard.services.errors import (
    ResourceInUse,
    ResourceLimitExceeded,
    ResourceNotFound,
    ValidationException,
)
from dockyard.services.pagination import decode_token, page
from dockyard.store.scoped import owned
from dockyard.store.tables import Cluster, ClusterNode, TrainingPlan

HYPERPOD_TARGET = "hyperpod-cluster"
KEPT = ("InstanceGroups", "NodeRecovery", "Orchestrator", "VpcConfig")
# Members of a request dockyard does not do; refused by name rather than ignored.
UNSUPPORTED = ("RestrictedInstanceGroups", "TieredStorageConfig", "AutoScaling")
UNSUPPORTED_IN_GROUP = ("InstanceRequirements", "CapacityRequirements")


def cluster_arn(region: str, account_id: str, cluster_id: str) -> str:
    return make_arn(region, account_id, "cluster", cluster_id)


def _new_cluster_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(12))


# ----------------------------------------------------------------------------- checks


def _check_groups(
    session: Session,
    account_id: str,
    region: str,
    groups: list[dict[str, Any]],
    store: buckets.BucketStore | None,
) -> None:
    names = [g["InstanceGroupName"] for g in groups]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValidationException(f"Instance group names must be unique: {', '.join(repeated)}")
    for group in groups:
        name = group["InstanceGroupName"]
        for member in UNSUPPORTED_IN_GROUP:
            if member in group:
                raise ValidationException(
                    f"InstanceGroups[{name}].{member} is not supported by dockyard"
                )
        _check_life_cycle(session, account_id, name, group.get("LifeCycleConfig"), store)
        plan_arn = group.get("TrainingPlanArn")
        if plan_arn:
            _check_plan(session, account_id, region, group, str(plan_arn))
        elif not _fleet_has(session, region, group["InstanceType"]):
            raise ValidationException(
                f"InstanceGroups[{name}]: the fleet has no {group['InstanceType']} instances "
                f"in {region} for on-demand nodes"
            )


def _check_life_cycle(
    session: Session,
    account_id: str,
    group: str,
    config: dict[str, Any] | None,
    store: buckets.BucketStore | None,
) -> None:
    if not config or not config.get("SourceS3Uri") or not config.get("OnCreate"):
        raise ValidationException(
            f"InstanceGroups[{group}].LifeCycleConfig must name SourceS3Uri and OnCreate: the "
            "script every node of the group runs when it is created"
        )
    uri = str(config["SourceS3Uri"])
    problem = s3_uri_problem(f"InstanceGroups[{group}].LifeCycleConfig.SourceS3Uri", uri)
    if problem:
        raise ValidationException(problem)
    script = str(config["OnCreate"])
    if script.startswith("/") or any(part in ("", ".", "..") for part in script.split("/")):
        raise ValidationException(
            f"InstanceGroups[{group}].LifeCycleConfig.OnCreate must be a file under "
            f"SourceS3Uri, without . or .. (got {script!r})"
        )
    if store is not None:
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        found = buckets.owner(session, bucket, store)
        if found is not None and found != account_id:
            raise ValidationException(
                f"InstanceGroups[{group}].LifeCycleConfig.SourceS3Uri: access to the bucket "
                f'"{bucket}" is denied: it belongs to another account'
            )


def _check_plan(
    session: Session, account_id: str, region: str, group: dict[str, Any], arn: str
) -> TrainingPlan:
    name = group["InstanceGroupName"]
    plan = session.scalar(owned(TrainingPlan, account_id, region).where(TrainingPlan.arn == arn))
    if plan is None:
        raise ValidationException(
            f"InstanceGroups[{name}].TrainingPlanArn {arn} is not a training plan of this "
            f"account in {region}"
        )
    if plan.target != HYPERPOD_TARGET:
        raise ValidationException(
            f"The training plan {plan.name} reserves capacity for {plan.target}, not for "
            "HyperPod clusters"
        )
    if group["InstanceType"] != plan.instance_type:
        raise ValidationException(
            f"The training plan {plan.name} reserves {plan.instance_type} instances; instance "
            f"group {name} asks for {group['InstanceType']}"
        )
    if plan.status in (PlanStatus.EXPIRED.value, PlanStatus.FAILED.value):
        raise ValidationException(
            f"The training plan {plan.name} is {plan.status}; it has no capacity left"
        )
    usable = plan.instance_count - plan.spare_per_ultraserver * (plan.ultraserver_count or 0)
    if int(group["InstanceCount"]) > usable:
        raise ValidationException(
            f"The training plan {plan.name} holds {usable} usable instances; instance group "
            f"{name} asks for {group['InstanceCount']}"
        )
    return plan


def _fleet_has(session: Session, region: str, instance_type: str) -> bool:
    return bool(
        capacity.versions(session, region, instance_type).get((region, instance_type)) is not None
    )


def _check_quota(
    session: Session,
    settings: PlanSettings | None,
    account_id: str,
    region: str,
    groups: list[dict[str, Any]],
    but: int | None = None,
) -> None:
    """ "<type> for cluster usage": the instances the account's clusters ask for, of each
    type, this request's groups with them (a cluster being updated counts once)."""
    if settings is None:
        return
    others = session.scalars(
        owned(Cluster, account_id, region).where(
            Cluster.status != ClusterStatus.DELETING.value, Cluster.id != (but or -1)
        )
    )
    held: dict[str, int] = {}
    for cluster in others:
        for group in cluster.spec.get("InstanceGroups", []):
            held[group["InstanceType"]] = held.get(group["InstanceType"], 0) + int(
                group["InstanceCount"]
            )
    wanted: dict[str, int] = {}
    for group in groups:
        wanted[group["InstanceType"]] = wanted.get(group["InstanceType"], 0) + int(
            group["InstanceCount"]
        )
    for instance_type, count in sorted(wanted.items()):
        limit = int(
            quotas.limit(session, settings, account_id, region, QuotaKind.CLUSTER, instance_type)
        )
        used = held.get(instance_type, 0)
        if used + count > limit:
            raise ResourceLimitExceeded(
                f"The account-level service limit '{instance_type} for cluster usage' is "
                f"{limit} Instances, with current utilization of {used} Instances and a "
                f"request delta of {count} Instances. Please use AWS Service Quotas to request "
                "an increase for this quota."
            )


def _refuse_unsupported(params: dict[str, Any]) -> None:
    for member in UNSUPPORTED:
        if member in params:
            raise ValidationException(f"{member} is not supported by dockyard")


# ----------------------------------------------------------------------------- operations


def create(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    params: dict[str, Any],
    store: buckets.BucketStore | None = None,
    settings: PlanSettings | None = None,
) -> dict[str, Any]:
    _refuse_unsupported(params)
    name = params["ClusterName"]
    if _named(session, account_id, region, name) is not None:
        raise ResourceInUse(f"Cluster {name!r} already exists")
    groups = list(params.get("InstanceGroups") or [])
    if not groups:
        raise ValidationException("InstanceGroups must name at least one instance group")
    _check_groups(session, account_id, region, groups, store)
    _check_quota(session, settings, account_id, region, groups)
    cluster_id = _new_cluster_id()
    cluster = Cluster(
        account_id=account_id,
        region=region,
        name=name,
        cluster_id=cluster_id,
        arn=cluster_arn(region, account_id, cluster_id),
        status=ClusterStatus.CREATING.value,
        spec={key: params[key] for key in KEPT if key in params},
        tags={"Tags": list(params.get("Tags") or [])},
        created_at=now,
        last_modified_time=now,
    )
    session.add(cluster)
    try:
        session.flush()
    except IntegrityError as exc:  # the same name created at the same time
        raise ResourceInUse(f"Cluster {name!r} already exists") from exc
    return {"ClusterArn": cluster.arn}


def _named(session: Session, account_id: str, region: str, name: str) -> Cluster | None:
    return session.scalar(owned(Cluster, account_id, region).where(Cluster.name == name))


def find(session: Session, account_id: str, region: str, name_or_arn: str) -> Cluster:
    """A cluster of the account by name or ARN (the API takes either)."""
    column = Cluster.arn if name_or_arn.startswith("arn:") else Cluster.name
    cluster = session.scalar(owned(Cluster, account_id, region).where(column == name_or_arn))
    if cluster is None:
        raise ResourceNotFound(f"Cluster {name_or_arn!r} does not exist")
    return cluster


def nodes_of(session: Session, cluster: Cluster) -> list[ClusterNode]:
    return list(
        session.scalars(
            select(ClusterNode)
            .where(ClusterNode.cluster_id == cluster.id)
            .order_by(ClusterNode.launch_time, ClusterNode.id)
        )
    )


def _plan_status(session: Session, arn: str) -> str | None:
    return session.scalar(select(TrainingPlan.status).where(TrainingPlan.arn == arn))


def describe(
    session: Session, now: datetime, account_id: str, region: str, name: str
) -> dict[str, Any]:
    cluster = find(session, account_id, region, name)
    nodes = nodes_of(session, cluster)
    status = ClusterStatus(cluster.status)
    groups = []
    for group in cluster.spec.get("InstanceGroups", []):
        mine = [
            NodeStatus(n.status) for n in nodes if n.instance_group == group["InstanceGroupName"]
        ]
        view = {
            "InstanceGroupName": group["InstanceGroupName"],
            "InstanceType": group["InstanceType"],
            "CurrentCount": sum(1 for n in mine if n == NodeStatus.RUNNING),
            "TargetCount": group["InstanceCount"],
            "LifeCycleConfig": group.get("LifeCycleConfig"),
            "ExecutionRole": group["ExecutionRole"],
            "ThreadsPerCore": group.get("ThreadsPerCore", 1),
            "Status": rules.group_status(status, mine, wanted_now(session, group, now)).value,
        }
        if group.get("TrainingPlanArn"):
            view["TrainingPlanArn"] = group["TrainingPlanArn"]
            view["TrainingPlanStatus"] = _plan_status(session, group["TrainingPlanArn"])
        groups.append(view)
    return {
        "ClusterArn": cluster.arn,
        "ClusterName": cluster.name,
        "ClusterStatus": cluster.status,
        "CreationTime": cluster.created_at,
        "FailureMessage": cluster.failure_message,
        "InstanceGroups": groups,
        "NodeRecovery": cluster.spec.get("NodeRecovery", "Automatic"),
        "Orchestrator": cluster.spec.get("Orchestrator"),
        "VpcConfig": cluster.spec.get("VpcConfig"),
    }


_CLUSTER_SORT = {"CREATION_TIME": Cluster.created_at, "NAME": Cluster.name}


def list_clusters(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    query = owned(Cluster, account_id, region)
    if "CreationTimeAfter" in params:
        query = query.where(Cluster.created_at > params["CreationTimeAfter"])
    if "CreationTimeBefore" in params:
        query = query.where(Cluster.created_at < params["CreationTimeBefore"])
    if params.get("NameContains"):
        query = query.where(Cluster.name.contains(params["NameContains"], autoescape=True))
    column = _CLUSTER_SORT[params.get("SortBy", "CREATION_TIME")]
    descending = params.get("SortOrder", "Descending") == "Descending"
    query = query.order_by(
        *((column.desc(), Cluster.id.desc()) if descending else (column.asc(), Cluster.id.asc()))
    )
    plan = params.get("TrainingPlanArn")
    rows = list(session.scalars(query))
    if plan:
        rows = [c for c in rows if plan in _plans_of(c)]
    max_results = params.get("MaxResults", 10)
    offset = decode_token(params.get("NextToken"), params)
    shown, token = page(rows[offset : offset + max_results + 1], offset, max_results, params)
    return {
        "ClusterSummaries": [
            {
                "ClusterArn": c.arn,
                "ClusterName": c.name,
                "CreationTime": c.created_at,
                "ClusterStatus": c.status,
                "TrainingPlanArns": _plans_of(c) or None,
            }
            for c in shown
        ],
        "NextToken": token,
    }


def _plans_of(cluster: Cluster) -> list[str]:
    return sorted(
        {
            str(g["TrainingPlanArn"])
            for g in cluster.spec.get("InstanceGroups", [])
            if g.get("TrainingPlanArn")
        }
    )


def update(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    params: dict[str, Any],
    store: buckets.BucketStore | None = None,
    settings: PlanSettings | None = None,
) -> dict[str, Any]:
    """New counts (or new groups) for a cluster; the reconciler adds or removes nodes."""
    _refuse_unsupported(params)
    cluster = find(session, account_id, region, params["ClusterName"])
    status = ClusterStatus(cluster.status)
    if status not in (ClusterStatus.IN_SERVICE, ClusterStatus.UPDATING):
        raise ValidationException(
            f"Cluster {cluster.name} is {cluster.status}; it can be updated only when InService"
        )
    current = {g["InstanceGroupName"]: g for g in cluster.spec.get("InstanceGroups", [])}
    removed = set(params.get("InstanceGroupsToDelete") or [])
    unknown = sorted(removed - set(current))
    if unknown:
        raise ValidationException(f"InstanceGroupsToDelete names no group: {', '.join(unknown)}")
    for group in params.get("InstanceGroups") or []:
        old = current.get(group["InstanceGroupName"])
        if old is not None:
            for member in ("InstanceType", "TrainingPlanArn"):
                if group.get(member) != old.get(member):
                    raise ValidationException(
                        f"InstanceGroups[{group['InstanceGroupName']}].{member} cannot change "
                        "after the group is created"
                    )
        current[group["InstanceGroupName"]] = group
    groups = [g for name, g in current.items() if name not in removed]
    if not groups:
        raise ValidationException("A cluster keeps at least one instance group")
    _check_groups(session, account_id, region, groups, store)
    _check_quota(session, settings, account_id, region, groups, but=cluster.id)
    spec = {**cluster.spec, "InstanceGroups": groups}
    if "NodeRecovery" in params:
        spec["NodeRecovery"] = params["NodeRecovery"]
    cluster.spec = spec
    set_status(cluster, ClusterStatus.UPDATING, now)
    return {"ClusterArn": cluster.arn}


def delete(
    session: Session, now: datetime, account_id: str, region: str, name: str
) -> dict[str, Any]:
    cluster = find(session, account_id, region, name)
    set_status(cluster, ClusterStatus.DELETING, now)
    for node in nodes_of(session, cluster):
        node.shutdown_requested = True
    return {"ClusterArn": cluster.arn}


def set_status(cluster: Cluster, new: ClusterStatus, now: datetime) -> None:
    old = ClusterStatus(cluster.status)
    if old is not new:
        cluster.status = CLUSTER_TRANSITIONS.check(old, new).value
        cluster.last_modified_time = now


def group_spec(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return next(
        (g for g in cluster.spec.get("InstanceGroups", []) if g["InstanceGroupName"] == name),
        None,
    )


# ----------------------------------------------------------------------------- reconciling


def plan_blocks(session: Session, plan_arn: str) -> list[tuple[Block, str]]:
    """A plan's blocks, each with the pool its lease holds."""
    plan = session.scalar(select(TrainingPlan).where(TrainingPlan.arn == plan_arn))
    if plan is None:
        return []
    found = []
    for row in plan_jobs.plan_blocks(session, plan.id):
        pools = row.pools.get("pools") or []
        found.append((plan_jobs.as_block(row), str(pools[0][0]) if pools else ""))
    return found


def wanted_now(session: Session, group: dict[str, Any], now: datetime) -> int:
    """How many nodes the group should have running at `now` (a plan's group: none
    outside a usable block)."""
    plan_arn = group.get("TrainingPlanArn")
    if not plan_arn:
        return int(group["InstanceCount"])
    blocks = [block for block, _ in plan_blocks(session, str(plan_arn))]
    return int(group["InstanceCount"]) if rules.current_block(blocks, now) else 0


def node_key(cluster: Cluster, node: ClusterNode) -> str:
    """The backend's name for a node's instance (its host is the node's instance id)."""
    return f"{cluster.account_id}-{cluster.region}-cluster-{cluster.cluster_id}-{node.instance_id}"


def node_holder(cluster: Cluster, instance_id: str) -> str:
    """The holder of an on-demand node's lease."""
    return f"{cluster.arn}/node/{instance_id}"
