"""Training plans after purchase: reading them, paying for them, and moving them with time.

`settle_payment` and `advance` are the plans reconciler's steps, one plan each (claimed
by the reconciler, `control/plans.py`): each runs in one transaction, reads the clock's
`now` from its caller, and is safe to run twice.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain import billing, ultraservers
from dockyard.domain.plans import (
    BLOCK_TRANSITIONS,
    PLAN_TRANSITIONS,
    PlanStatus,
    block_status,
    hours_minutes,
    plan_status,
)
from dockyard.services import capacity, ledger, plan_jobs
from dockyard.services.errors import ResourceNotFound
from dockyard.services.pagination import decode_token, page
from dockyard.store.scoped import owned
from dockyard.store.tables import ClusterNode, Instance, ReservedCapacity, TrainingPlan

HEALTHY = "Healthy"


# ----------------------------------------------------------------------------- reading


def _blocks(session: Session, plan_ids: list[int]) -> dict[int, list[ReservedCapacity]]:
    found: dict[int, list[ReservedCapacity]] = defaultdict(list)
    if plan_ids:
        for block in session.scalars(
            select(ReservedCapacity)
            .where(ReservedCapacity.plan_id.in_(plan_ids))
            .order_by(ReservedCapacity.ordinal)
        ):
            found[block.plan_id].append(block)
    return found


def _counts(plan: TrainingPlan, in_use: int) -> dict[str, int]:
    """Instance counts as Describe/List report them (see docs/training-plans.md).

    In use: instances of the plan's current block held by its jobs (and warm pools).
    """
    total = plan.instance_count
    usable = plan.status in (PlanStatus.SCHEDULED.value, PlanStatus.ACTIVE.value)
    spares = plan.spare_per_ultraserver * (plan.ultraserver_count or 0)
    return {
        "TotalInstanceCount": total,
        "AvailableInstanceCount": max(0, total - in_use - spares) if usable else 0,
        "InUseInstanceCount": in_use,
        "UnhealthyInstanceCount": 0,
        "AvailableSpareInstanceCount": spares if usable else 0,
    }


def _block_view(block: ReservedCapacity) -> dict[str, Any]:
    hours, minutes = hours_minutes(block.end_time - block.start_time)
    return {
        "ReservedCapacityArn": block.arn,
        "ReservedCapacityType": "UltraServer" if block.ultraserver_type else "Instance",
        "UltraServerType": block.ultraserver_type,
        "UltraServerCount": block.ultraserver_count,
        "InstanceType": block.instance_type,
        "TotalInstanceCount": block.instance_count,
        "Status": block.status,
        "AvailabilityZone": block.availability_zone,
        "DurationHours": hours,
        "DurationMinutes": minutes,
        "StartTime": block.start_time,
        "EndTime": block.end_time,
    }


def _plan_view(
    plan: TrainingPlan, blocks: list[ReservedCapacity], in_use: dict[str, int]
) -> dict[str, Any]:
    hours, minutes = hours_minutes(
        sum((b.end_time - b.start_time for b in blocks), start=timedelta(0))
    )
    return {
        "TrainingPlanArn": plan.arn,
        "TrainingPlanName": plan.name,
        "Status": plan.status,
        "StatusMessage": plan.status_message,
        "DurationHours": hours,
        "DurationMinutes": minutes,
        "StartTime": plan.start_time,
        "EndTime": plan.end_time,
        "UpfrontFee": plan.upfront_fee,
        "CurrencyCode": plan.currency,
        **_counts(plan, max(in_use.values(), default=0)),
        "TotalUltraServerCount": plan.ultraserver_count,
        "TargetResources": [plan.target],
        "ReservedCapacitySummaries": [_block_view(b) for b in blocks],
    }


def _find(session: Session, account_id: str, region: str, name: str) -> TrainingPlan:
    plan = session.scalar(owned(TrainingPlan, account_id, region).where(TrainingPlan.name == name))
    if plan is None:
        raise ResourceNotFound(f"Training plan {name!r} does not exist")
    return plan


def describe(session: Session, account_id: str, region: str, name: str) -> dict[str, Any]:
    plan = _find(session, account_id, region, name)
    blocks = _blocks(session, [plan.id])[plan.id]
    view = _plan_view(plan, blocks, plan_jobs.in_use(session, plan.arn))
    if plan.ultraserver_type and blocks:
        # The UltraServers of the block that is active (else the next): their failures
        # use up spares, then capacity.
        block = next((b for b in blocks if b.status == PlanStatus.ACTIVE.value), blocks[0])
        servers = _ultraservers(session, block)
        view["UnhealthyInstanceCount"] = sum(s["UnhealthyInstanceCount"] for s in servers)
        if view["AvailableSpareInstanceCount"]:
            view["AvailableSpareInstanceCount"] = sum(
                s["AvailableSpareInstanceCount"] for s in servers
            )
    return view


_SORT = {
    "TrainingPlanName": TrainingPlan.name,
    "StartTime": TrainingPlan.start_time,
    "Status": TrainingPlan.status,
}


def list_plans(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    query = owned(TrainingPlan, account_id, region)
    if "StartTimeAfter" in params:
        query = query.where(TrainingPlan.start_time > params["StartTimeAfter"])
    if "StartTimeBefore" in params:
        query = query.where(TrainingPlan.start_time < params["StartTimeBefore"])
    statuses = [f["Value"] for f in params.get("Filters", []) if f["Name"] == "Status"]
    if statuses:
        query = query.where(TrainingPlan.status.in_(statuses))
    column = _SORT[params.get("SortBy", "StartTime")]
    descending = params.get("SortOrder", "Ascending") == "Descending"
    query = query.order_by(
        *(
            (column.desc(), TrainingPlan.id.desc())
            if descending
            else (column.asc(), TrainingPlan.id.asc())
        )
    )
    max_results = params.get("MaxResults", 10)
    offset = decode_token(params.get("NextToken"), params)
    rows = list(session.scalars(query.offset(offset).limit(max_results + 1)))
    plans, token = page(rows, offset, max_results, params)
    blocks = _blocks(session, [p.id for p in plans])
    summaries = []
    for plan in plans:
        view = _plan_view(plan, blocks[plan.id], plan_jobs.in_use(session, plan.arn))
        for key in ("UnhealthyInstanceCount", "AvailableSpareInstanceCount"):
            view.pop(key)
        summaries.append(view)
    return {"TrainingPlanSummaries": summaries, "NextToken": token}


def _capacity(session: Session, account_id: str, region: str, arn: str) -> ReservedCapacity:
    block = session.scalar(
        owned(ReservedCapacity, account_id, region).where(ReservedCapacity.arn == arn)
    )
    if block is None:
        raise ResourceNotFound(f"Reserved capacity {arn!r} does not exist")
    return block


def _ultraservers(session: Session, block: ReservedCapacity) -> list[dict[str, Any]]:
    plan = session.get(TrainingPlan, block.plan_id)
    assert plan is not None
    keys = [key for key, _ in block.pools["pools"] if key.startswith("us:")]
    by_server: dict[str, list[Instance]] = defaultdict(list)
    if keys:
        for instance in session.scalars(
            select(Instance).where(Instance.pool_key.in_(keys)).order_by(Instance.id)
        ):
            by_server[instance.ultraserver_id or ""].append(instance)
    # Cluster nodes hold instances of an UltraServer by id.
    in_use: dict[str, int] = defaultdict(int)
    for server in session.scalars(
        select(ClusterNode.ultraserver_id).where(
            ClusterNode.block_id == block.id, ClusterNode.ultraserver_id.is_not(None)
        )
    ):
        in_use[str(server)] += 1
    servers = []
    for key in keys:
        server_id = key.removeprefix("us:")
        instances = by_server.get(server_id, [])
        unhealthy = sum(1 for i in instances if i.health != HEALTHY)
        spare = plan.spare_per_ultraserver
        usable = ultraservers.usable(len(instances), spare, unhealthy)
        servers.append(
            {
                "UltraServerId": server_id,
                "UltraServerType": block.ultraserver_type,
                "AvailabilityZone": block.availability_zone,
                "InstanceType": block.instance_type,
                "TotalInstanceCount": len(instances),
                "ConfiguredSpareInstanceCount": spare,
                # A failed instance is replaced from the spares while there are any.
                "AvailableInstanceCount": max(0, usable - in_use[server_id]),
                "InUseInstanceCount": in_use[server_id],
                "AvailableSpareInstanceCount": ultraservers.available_spares(spare, unhealthy),
                "UnhealthyInstanceCount": unhealthy,
                "HealthStatus": ultraservers.health(spare, unhealthy),
            }
        )
    return servers


def block_plan_arn(session: Session, block: ReservedCapacity) -> str:
    plan = session.get(TrainingPlan, block.plan_id)
    return plan.arn if plan is not None else ""


def describe_reserved_capacity(
    session: Session, account_id: str, region: str, arn: str
) -> dict[str, Any]:
    block = _capacity(session, account_id, region, arn)
    view = _block_view(block)
    view.pop("UltraServerType")
    view.pop("UltraServerCount")
    used = plan_jobs.in_use(session, block_plan_arn(session, block)).get(block.id, 0)
    view["AvailableInstanceCount"] = (
        max(0, block.instance_count - used) if block.status == "Active" else 0
    )
    view["InUseInstanceCount"] = used
    if block.ultraserver_type:
        servers = _ultraservers(session, block)
        view["UltraServerSummary"] = {
            "UltraServerType": block.ultraserver_type,
            "InstanceType": block.instance_type,
            "UltraServerCount": block.ultraserver_count,
            "AvailableSpareInstanceCount": sum(s["AvailableSpareInstanceCount"] for s in servers),
            "UnhealthyInstanceCount": sum(s["UnhealthyInstanceCount"] for s in servers),
        }
    return view


def list_ultraservers(
    session: Session, account_id: str, region: str, params: dict[str, Any]
) -> dict[str, Any]:
    block = _capacity(session, account_id, region, params["ReservedCapacityArn"])
    servers = _ultraservers(session, block)
    max_results = params.get("MaxResults", 100)
    offset = decode_token(params.get("NextToken"), params)
    shown, token = page(servers[offset : offset + max_results + 1], offset, max_results, params)
    return {"UltraServers": list(shown), "NextToken": token}


# ----------------------------------------------------------------------------- reconciling


def _set_status(plan: TrainingPlan, new: PlanStatus, now: datetime) -> None:
    old = PlanStatus(plan.status)
    if old is not new:
        plan.status = PLAN_TRANSITIONS.check(old, new).value
        plan.last_modified_time = now


def due(session: Session, now: datetime) -> tuple[list[int], dict[int, bool]]:
    """The plans a plans-reconciler pass steps: the Pending ones (to be paid for), and
    the live ones with a block the clock has moved past a start or an end - each with
    whether one of its blocks ends (its leases released, so the capacity lock is
    taken)."""
    pending = list(
        session.scalars(
            select(TrainingPlan.id)
            .where(TrainingPlan.status == PlanStatus.PENDING.value)
            .order_by(TrainingPlan.id)
        )
    )
    started = (ReservedCapacity.status == PlanStatus.SCHEDULED.value) & (
        ReservedCapacity.start_time <= now
    )
    ended = ReservedCapacity.status.in_([PlanStatus.SCHEDULED.value, PlanStatus.ACTIVE.value]) & (
        ReservedCapacity.end_time <= now
    )
    moving: dict[int, bool] = {}
    for plan_id, ends in session.execute(
        select(ReservedCapacity.plan_id, ended)
        .join(TrainingPlan, TrainingPlan.id == ReservedCapacity.plan_id)
        .where(
            TrainingPlan.status.in_([PlanStatus.SCHEDULED.value, PlanStatus.ACTIVE.value]),
            started | ended,
        )
        .order_by(ReservedCapacity.plan_id)
    ):
        moving[plan_id] = moving.get(plan_id, False) or bool(ends)
    return pending, moving


def settle_payment(
    session: Session, plan: TrainingPlan, now: datetime, settings: PlanSettings
) -> bool:
    """A Pending plan: record the upfront fee in the ledger, or fail it over the budget
    (its leases released); False if it was not Pending (another server settled it).

    Call with the capacity lock held: paying completes the purchase, and the budget
    check reads the account's spending as every other purchase leaves it."""
    if plan.status != PlanStatus.PENDING.value:
        return False
    blocks = _blocks(session, [plan.id])[plan.id]
    budget = settings.budgets.get(plan.account_id, settings.default_budget)
    fee = Decimal(plan.upfront_fee)
    refusal = billing.payment_refusal(
        fee, budget, ledger.spent(session, plan.account_id), plan.currency
    )
    if refusal is not None:
        fail_pending(session, plan, now, refusal)
        return True
    ledger.record(
        session,
        account_id=plan.account_id,
        region=plan.region,
        kind=billing.Charge.PLAN_FEE,
        resource_arn=plan.arn,
        amount=fee,
        currency=plan.currency,
        description=f"Upfront fee of training plan {plan.name}",
        now=now,
    )
    _set_status(plan, PlanStatus.SCHEDULED, now)
    for block in blocks:
        block.status = BLOCK_TRANSITIONS.check(
            PlanStatus(block.status), PlanStatus.SCHEDULED
        ).value
    return True


def fail_pending(session: Session, plan: TrainingPlan, now: datetime, message: str) -> None:
    """A Pending plan that will not be paid for: Failed, saying why, its capacity freed."""
    _set_status(plan, PlanStatus.FAILED, now)
    plan.status_message = message[:1024]
    for block in _blocks(session, [plan.id])[plan.id]:
        block.status = BLOCK_TRANSITIONS.check(PlanStatus(block.status), PlanStatus.FAILED).value
        capacity.release(session, block.id)


def advance(session: Session, plan: TrainingPlan, now: datetime) -> int:
    """Move a paid plan and its blocks to where the clock says they are (an ended
    block's leases released); answers how many statuses moved."""
    if plan.status not in (PlanStatus.SCHEDULED.value, PlanStatus.ACTIVE.value):
        return 0
    changed = 0
    statuses = []
    for block in _blocks(session, [plan.id])[plan.id]:
        new = block_status(block.start_time, block.end_time, now)
        if block.status != new.value:
            block.status = BLOCK_TRANSITIONS.check(PlanStatus(block.status), new).value
            changed += 1
            if new is PlanStatus.EXPIRED:
                capacity.release(session, block.id)
        statuses.append(new)
    new_plan = plan_status(statuses)
    if plan.status != new_plan.value:
        _set_status(plan, new_plan, now)
        changed += 1
    return changed
