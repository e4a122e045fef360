"""SearchTrainingPlanOfferings and CreateTrainingPlan: finding capacity and buying it.

A search runs the domain's offering search on the calendar of the caller's region and
stores each offering (with an expiry) so that buying names it by id. Buying re-checks
the capacity inside the capacity lock and writes the plan, its blocks and their
leases in one transaction; payment is the plans reconciler's work (Pending until then).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dockyard.clock import utc
from dockyard.config import PlanSettings
from dockyard.domain import offerings as rules
from dockyard.domain.arns import reserved_capacity_arn, training_plan_arn
from dockyard.domain.calendar import Calendar
from dockyard.domain.plans import TERMINAL, PlanStatus, upfront_fee
from dockyard.domain.quotas import QuotaKind
from dockyard.services import capacity, quotas
from dockyard.services.errors import (
    ResourceInUse,
    ResourceLimitExceeded,
    ResourceNotFound,
    ValidationException,
)
from dockyard.store.scoped import owned
from dockyard.store.tables import ReservedCapacity, TrainingPlan, TrainingPlanOffering


def _request(params: dict[str, Any], now: datetime) -> rules.OfferingRequest:
    targets = params.get("TargetResources", [])
    if len(targets) != 1:
        raise ValidationException(
            "TargetResources must name exactly one of training-job or hyperpod-cluster "
            f"(got {targets})"
        )
    if params.get("TrainingPlanArn"):
        raise ValidationException(
            "TrainingPlanArn (searching extensions of an existing plan) is not supported; "
            "search for a new plan instead"
        )
    if "DurationHours" not in params:
        raise ValidationException("DurationHours is required (a multiple of 24 from 24 to 4368)")
    return rules.OfferingRequest(
        now=now,
        duration_hours=int(params["DurationHours"]),
        target=targets[0],
        instance_type=params.get("InstanceType"),
        instance_count=params.get("InstanceCount"),
        ultraserver_type=params.get("UltraServerType"),
        ultraserver_count=params.get("UltraServerCount"),
        start_after=params.get("StartTimeAfter"),
        end_before=params.get("EndTimeBefore"),
    )


def _block_view(block: rules.BlockPlacement) -> dict[str, Any]:
    hours, minutes = block.duration_hours_minutes
    return {
        "ReservedCapacityType": "UltraServer" if block.ultraserver_type else "Instance",
        "UltraServerType": block.ultraserver_type,
        "UltraServerCount": block.ultraserver_count,
        "InstanceType": block.instance_type,
        "InstanceCount": block.instance_count,
        "AvailabilityZone": block.availability_zone,
        "DurationHours": hours,
        "DurationMinutes": minutes,
        "StartTime": block.start,
        "EndTime": block.end,
    }


def _block_record(block: rules.BlockPlacement) -> dict[str, Any]:
    return {
        "availability_zone": block.availability_zone,
        "instance_type": block.instance_type,
        "instance_count": block.instance_count,
        "ultraserver_type": block.ultraserver_type,
        "ultraserver_count": block.ultraserver_count,
        "start": block.start.isoformat(),
        "end": block.end.isoformat(),
        "pools": [list(pair) for pair in block.pool_counts],
    }


def _fee(offering: rules.Offering, prices: dict[str, Decimal]) -> Decimal:
    total = Decimal("0.00")
    for block in offering.blocks:
        price = prices.get(block.instance_type)
        if price is None:
            raise ValidationException(f"no price is configured for {block.instance_type}")
        total += upfront_fee(price, block.instance_count, block.end - block.start)
    return total


def search(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    params: dict[str, Any],
    settings: PlanSettings,
    calendars: capacity.CalendarCache | None = None,
) -> dict[str, Any]:
    request = _request(params, now)
    try:
        rules.check_request(request)
    except rules.OfferingRuleError as exc:
        raise ValidationException(str(exc)) from exc
    # The server's calendar in memory, reloaded per pool that changed; a fresh load
    # without one. Either way the purchase re-checks under the capacity lock.
    load = calendars.calendar if calendars is not None else capacity.load_calendar
    calendar: Calendar = load(
        session,
        now,
        region=region,
        instance_type=request.instance_type if not request.ultraserver_type else None,
        ultraserver_type=request.ultraserver_type,
    )
    if request.ultraserver_type is None and request.instance_type is not None:
        plain = [p for p in calendar.pools() if p.ultraserver_id is None]
        if not plain and any(p.ultraserver_id for p in calendar.pools()):
            raise ValidationException(
                f"{request.instance_type} is offered only as whole UltraServers; "
                "search with UltraServerType and UltraServerCount"
            )
    found = rules.search(calendar, request)
    expires = now + timedelta(seconds=settings.offering_ttl_seconds)
    views = []
    for offering in found:
        offering_id = "tpo-" + secrets.token_hex(12)
        fee = _fee(offering, settings.prices)
        # An offering cannot be bought later than 5 minutes before its first block.
        expires_at = min(expires, offering.blocks[0].start - rules.PAYMENT_LEAD)
        session.add(
            TrainingPlanOffering(
                id=offering_id,
                account_id=account_id,
                region=region,
                created_at=now,
                expires_at=expires_at,
                target=offering.target,
                request={k: str(v) for k, v in params.items()},
                blocks={"blocks": [_block_record(b) for b in offering.blocks]},
                upfront_fee=str(fee),
                currency=settings.currency,
            )
        )
        hours, minutes = offering.duration_hours_minutes
        views.append(
            {
                "TrainingPlanOfferingId": offering_id,
                "TargetResources": [offering.target],
                "RequestedStartTimeAfter": params.get("StartTimeAfter"),
                "RequestedEndTimeBefore": params.get("EndTimeBefore"),
                "DurationHours": hours,
                "DurationMinutes": minutes,
                "UpfrontFee": str(fee),
                "CurrencyCode": settings.currency,
                "ReservedCapacityOfferings": [_block_view(b) for b in offering.blocks],
            }
        )
    return {"TrainingPlanOfferings": views}


def create(
    session: Session,
    now: datetime,
    account_id: str,
    region: str,
    params: dict[str, Any],
    settings: PlanSettings,
) -> dict[str, Any]:
    capacity.lock(session)  # first: every check below then sees every earlier booking
    name = params["TrainingPlanName"]
    # Case-insensitively, as job names (and SageMaker's lower-cased ARNs) are.
    taken = owned(TrainingPlan, account_id, region).where(
        func.lower(TrainingPlan.name) == name.lower()
    )
    if session.scalar(taken):
        raise ResourceInUse(f"A training plan named {name!r} already exists in this account")
    offering = session.get(TrainingPlanOffering, params["TrainingPlanOfferingId"])
    if offering is None or offering.account_id != account_id or offering.region != region:
        raise ResourceNotFound(
            f"Training plan offering {params['TrainingPlanOfferingId']!r} does not exist; "
            "find one with SearchTrainingPlanOfferings"
        )
    if offering.purchased_by:
        raise ResourceInUse(
            f"Offering {offering.id} was already bought ({offering.purchased_by}); search again"
        )
    if now >= offering.expires_at:
        raise ValidationException(
            f"Offering {offering.id} expired at {offering.expires_at.isoformat()}; search again"
        )
    blocks = offering.blocks["blocks"]
    first_start = datetime.fromisoformat(blocks[0]["start"])
    if first_start - now < rules.PAYMENT_LEAD:
        raise ValidationException(
            "Payment must complete at least 5 minutes before the plan starts "
            f"(it starts at {first_start.isoformat()}); search again"
        )
    instance_type = blocks[0]["instance_type"]
    instance_count = blocks[0]["instance_count"]
    spare = int(params.get("SpareInstanceCountPerUltraServer", 0))
    ultraserver_type = blocks[0]["ultraserver_type"]
    if spare and not ultraserver_type:
        raise ValidationException(
            "SpareInstanceCountPerUltraServer applies only to UltraServer offerings"
        )
    if ultraserver_type:
        per_server = instance_count // blocks[0]["ultraserver_count"]
        if spare >= per_server:
            raise ValidationException(
                f"SpareInstanceCountPerUltraServer must be less than the {per_server} instances "
                f"of an UltraServer (got {spare})"
            )
    held = session.scalar(
        select(func.coalesce(func.sum(TrainingPlan.instance_count), 0)).where(
            TrainingPlan.account_id == account_id,
            TrainingPlan.region == region,
            TrainingPlan.instance_type == instance_type,
            TrainingPlan.status.not_in([s.value for s in TERMINAL]),
        )
    )
    quota = quotas.limit(
        session, settings, account_id, region, QuotaKind.TRAINING_PLAN, instance_type
    )
    if int(held or 0) + instance_count > quota:
        raise ResourceLimitExceeded(
            f"This plan would hold {instance_count} more {instance_type} instances; the account "
            f"already holds {held} in plans and its quota is {quota}"
        )
    pool_keys = {key for block in blocks for key, _ in block["pools"]}
    calendar = capacity.load_calendar(session, now, pool_keys=pool_keys)
    for block in blocks:
        start, end = datetime.fromisoformat(block["start"]), datetime.fromisoformat(block["end"])
        for key, count in block["pools"]:
            if key not in calendar or not calendar[key].fits(utc(start), utc(end), count):
                raise ResourceInUse(
                    f"The capacity of offering {offering.id} is no longer available "
                    "(someone else reserved it); search again"
                )
    arn = training_plan_arn(region, account_id, name)
    plan = TrainingPlan(
        account_id=account_id,
        region=region,
        name=name,
        arn=arn,
        status=PlanStatus.PENDING.value,
        offering_id=offering.id,
        target=offering.target,
        instance_type=instance_type,
        instance_count=instance_count,
        ultraserver_type=ultraserver_type,
        ultraserver_count=blocks[0]["ultraserver_count"],
        spare_per_ultraserver=spare,
        upfront_fee=offering.upfront_fee,
        currency=offering.currency,
        start_time=utc(first_start),
        end_time=utc(datetime.fromisoformat(blocks[-1]["end"])),
        tags={"Tags": params.get("Tags", [])},
        created_at=now,
        last_modified_time=now,
    )
    session.add(plan)
    session.flush()
    for ordinal, block in enumerate(blocks):
        capacity_id = "rc-" + secrets.token_hex(8)
        start, end = (
            utc(datetime.fromisoformat(block["start"])),
            utc(datetime.fromisoformat(block["end"])),
        )
        session.add(
            ReservedCapacity(
                id=capacity_id,
                plan_id=plan.id,
                account_id=account_id,
                region=region,
                arn=reserved_capacity_arn(region, account_id, capacity_id),
                ordinal=ordinal,
                status=PlanStatus.PENDING.value,
                instance_type=block["instance_type"],
                instance_count=block["instance_count"],
                availability_zone=block["availability_zone"],
                ultraserver_type=block["ultraserver_type"],
                ultraserver_count=block["ultraserver_count"],
                pools={"pools": block["pools"]},
                start_time=start,
                end_time=end,
            )
        )
        capacity.reserve(
            session,
            [(key, count) for key, count in block["pools"]],
            start,
            end,
            kind="reserved-capacity",
            holder=capacity_id,
            account_id=account_id,
        )
    offering.purchased_by = arn
    return {"TrainingPlanArn": arn}
