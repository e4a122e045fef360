"""Account quotas: what each limit is for an account, and the Service Quotas API over them.

`limit` is the one answer to "how many may this account hold": the applied value an
operator approved (a `service_quotas` row) or else the configured default. The quota
checks of training jobs, training plans and warm pools all ask it, so an approved
RequestServiceQuotaIncrease takes effect on the next request.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain import quotas as rules
from dockyard.domain.quotas import QuotaDef, QuotaKind, RequestStatus
from dockyard.services.errors import (
    ConflictException,
    IllegalArgumentException,
    InvalidPaginationTokenException,
    NoSuchResourceException,
    ResourceAlreadyExistsException,
    ValidationException,
)
from dockyard.services.pagination import decode_token, page
from dockyard.store.scoped import owned
from dockyard.store.tables import Account, QuotaRequest, ServiceQuotaValue

# Service Quotas' default page size.
_MAX_RESULTS = 100


def instance_types(settings: PlanSettings) -> list[str]:
    """Every type the fleet has or a price is configured for: each has its quotas."""
    fleet = {str(group["instance_type"]) for group in settings.fleet if "instance_type" in group}
    return sorted(fleet | set(settings.prices))


def quota_catalog(settings: PlanSettings) -> list[QuotaDef]:
    return rules.catalog(instance_types(settings))


def default_value(settings: PlanSettings, kind: QuotaKind, instance_type: str) -> int:
    """The configured default ("AWS default") of one quota, before any approved change."""
    if kind is QuotaKind.TRAINING_JOB:
        return settings.training_instance_quotas.get(
            instance_type, settings.training_instance_quota
        )
    if kind is QuotaKind.TRAINING_PLAN:
        return settings.reserved_instance_quotas.get(
            instance_type, settings.reserved_instance_quota
        )
    if kind is QuotaKind.CLUSTER:
        return settings.cluster_instance_quotas.get(instance_type, settings.cluster_instance_quota)
    return settings.warm_pool_instance_quotas.get(instance_type, settings.warm_pool_instance_quota)


def _applied(
    session: Session, account_id: str, region: str, code: str
) -> ServiceQuotaValue | None:
    return session.scalar(
        owned(ServiceQuotaValue, account_id, region).where(ServiceQuotaValue.quota_code == code)
    )


def _value(
    session: Session, settings: PlanSettings, account_id: str, region: str, q: QuotaDef
) -> float:
    row = _applied(session, account_id, region, q.code)
    return (
        row.value if row is not None else float(default_value(settings, q.kind, q.instance_type))
    )


def limit(
    session: Session,
    settings: PlanSettings,
    account_id: str,
    region: str,
    kind: QuotaKind,
    instance_type: str,
) -> int:
    """How many instances of the type the account may hold for this purpose in the region."""
    return int(_value(session, settings, account_id, region, rules.quota(kind, instance_type)))


def set_value(
    session: Session, now: datetime, account_id: str, region: str, code: str, value: float
) -> None:
    """Apply a quota value for one account and region (insert or replace)."""
    row = _applied(session, account_id, region, code)
    if row is None:
        session.add(
            ServiceQuotaValue(
                account_id=account_id,
                region=region,
                quota_code=code,
                value=float(value),
                updated_at=now,
            )
        )
    else:
        row.value = float(value)
        row.updated_at = now
    session.flush()


# --- the Service Quotas API ---------------------------------------------------------------


def _decode(params: Mapping[str, Any]) -> int:
    # Service Quotas' NextToken pattern is standard base64 ([a-zA-Z0-9/+]*={0,2}); the
    # shared tokens are URL-safe, so swap the two characters that differ on the way out
    # and back in.
    token = str(params.get("NextToken") or "").replace("+", "-").replace("/", "_")
    try:
        return decode_token(token, params)
    except ValidationException as exc:
        raise InvalidPaginationTokenException(exc.message) from exc


def _max_results(params: Mapping[str, Any]) -> int:
    return int(params.get("MaxResults", _MAX_RESULTS))


def _page(
    rows: Sequence[Any], offset: int, params: Mapping[str, Any]
) -> tuple[Sequence[Any], str | None]:
    """One page from rows fetched as [offset, offset + MaxResults + 1)."""
    items, token = page(rows, offset, _max_results(params), params)
    return items, token.replace("-", "+").replace("_", "/") if token else None


def _page_of(
    everything: Sequence[Any], params: Mapping[str, Any]
) -> tuple[Sequence[Any], str | None]:
    """One page of a list held in memory (the catalog is computed, not stored)."""
    offset = _decode(params)
    return _page(everything[offset : offset + _max_results(params) + 1], offset, params)


def _check_service(service_code: str) -> None:
    if service_code != rules.SERVICE_CODE:
        raise NoSuchResourceException(
            f"Service {service_code!r} has no quotas in dockyard; "
            f"the only service code is {rules.SERVICE_CODE!r}"
        )


def _find(settings: PlanSettings, service_code: str, quota_code: str) -> QuotaDef:
    _check_service(service_code)
    found = rules.by_code(quota_catalog(settings), quota_code)
    if found is None:
        raise NoSuchResourceException(
            f"Quota {quota_code!r} does not exist for service {service_code!r}; "
            "ListServiceQuotas shows every quota code"
        )
    return found


def _check_context(params: Mapping[str, Any]) -> None:
    if params.get("ContextId"):
        raise IllegalArgumentException(
            "dockyard's quotas apply at the account level; leave out ContextId"
        )


def _quota_view(q: QuotaDef, account_id: str, region: str, value: float) -> dict[str, Any]:
    return {
        "ServiceCode": rules.SERVICE_CODE,
        "ServiceName": rules.SERVICE_NAME,
        "QuotaArn": rules.quota_arn(region, account_id, q.code),
        "QuotaCode": q.code,
        "QuotaName": q.name,
        "Value": float(value),
        "Unit": q.unit,
        "Adjustable": q.adjustable,
        "GlobalQuota": q.global_quota,
        "QuotaAppliedAtLevel": "ACCOUNT",
        "Description": q.description,
    }


def _level_matches(params: Mapping[str, Any], key: str) -> bool:
    # Every dockyard quota is account-level; RESOURCE-level listings are empty.
    return params.get(key, "ACCOUNT") in ("ACCOUNT", "ALL")


def list_services(params: Mapping[str, Any]) -> dict[str, Any]:
    services = [{"ServiceCode": rules.SERVICE_CODE, "ServiceName": rules.SERVICE_NAME}]
    items, token = _page_of(services, params)
    return {"Services": list(items), "NextToken": token}


def list_service_quotas(
    session: Session,
    settings: PlanSettings,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    _check_service(params["ServiceCode"])
    chosen = [
        q
        for q in quota_catalog(settings)
        if params.get("QuotaCode") in (None, q.code)
        and _level_matches(params, "QuotaAppliedAtLevel")
    ]
    applied = {
        row.quota_code: row.value
        for row in session.scalars(owned(ServiceQuotaValue, account_id, region))
    }
    items, token = _page_of(chosen, params)
    views = [
        _quota_view(
            q,
            account_id,
            region,
            applied.get(q.code, float(default_value(settings, q.kind, q.instance_type))),
        )
        for q in items
    ]
    return {"Quotas": views, "NextToken": token}


def get_service_quota(
    session: Session,
    settings: PlanSettings,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    _check_context(params)
    q = _find(settings, params["ServiceCode"], params["QuotaCode"])
    value = _value(session, settings, account_id, region, q)
    return {"Quota": _quota_view(q, account_id, region, value)}


def get_aws_default_service_quota(
    settings: PlanSettings, account_id: str, region: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    q = _find(settings, params["ServiceCode"], params["QuotaCode"])
    value = default_value(settings, q.kind, q.instance_type)
    return {"Quota": _quota_view(q, account_id, region, value)}


def list_aws_default_service_quotas(
    settings: PlanSettings, account_id: str, region: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    _check_service(params["ServiceCode"])
    items, token = _page_of(quota_catalog(settings), params)
    views = [
        _quota_view(q, account_id, region, default_value(settings, q.kind, q.instance_type))
        for q in items
    ]
    return {"Quotas": views, "NextToken": token}


def _request_view(request: QuotaRequest) -> dict[str, Any]:
    return {
        "Id": request.id,
        "CaseId": request.case_id,
        "ServiceCode": request.service_code,
        "ServiceName": rules.SERVICE_NAME,
        "QuotaCode": request.quota_code,
        "QuotaName": request.quota_name,
        "DesiredValue": request.desired_value,
        "Status": request.status,
        "Created": request.created_at,
        "LastUpdated": request.last_updated,
        "Requester": request.requester,
        "QuotaArn": rules.quota_arn(request.region, request.account_id, request.quota_code),
        "GlobalQuota": False,
        "Unit": rules.UNIT,
        "QuotaRequestedAtLevel": "ACCOUNT",
    }


def request_increase(
    session: Session,
    now: datetime,
    settings: PlanSettings,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
    requester: str | None = None,
) -> dict[str, Any]:
    _check_context(params)
    q = _find(settings, params["ServiceCode"], params["QuotaCode"])
    desired = float(params["DesiredValue"])
    if not desired.is_integer():
        raise IllegalArgumentException(
            f"DesiredValue counts instances, so it must be a whole number (got {desired:g})"
        )
    current = _value(session, settings, account_id, region, q)
    if desired <= current:
        raise IllegalArgumentException(
            f"DesiredValue must be greater than the applied quota value of {q.name!r}, "
            f"which is {current:g} (got {desired:g})"
        )
    # The account's row is locked (on PostgreSQL; SQLite writers are serial anyway) so
    # two requests racing for one quota cannot both see no open request.
    session.get(Account, account_id, with_for_update=True)
    open_request = session.scalar(
        owned(QuotaRequest, account_id, region).where(
            QuotaRequest.quota_code == q.code,
            QuotaRequest.status == RequestStatus.PENDING.value,
        )
    )
    if open_request is not None:
        raise ResourceAlreadyExistsException(
            f"Request {open_request.id} to raise {q.name!r} to "
            f"{open_request.desired_value:g} is still PENDING; only one open request per "
            "quota is allowed. Wait for an operator to decide it."
        )
    request = QuotaRequest(
        id=secrets.token_hex(16),
        account_id=account_id,
        region=region,
        service_code=rules.SERVICE_CODE,
        quota_code=q.code,
        quota_name=q.name,
        desired_value=desired,
        status=RequestStatus.PENDING.value,
        requester=requester,
        created_at=now,
        last_updated=now,
    )
    session.add(request)
    session.flush()
    return {"RequestedQuota": _request_view(request)}


def _history(
    session: Session,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
    quota_code: str | None = None,
) -> dict[str, Any]:
    offset = _decode(params)
    if not _level_matches(params, "QuotaRequestedAtLevel"):
        return {"RequestedQuotas": [], "NextToken": None}
    query = owned(QuotaRequest, account_id, region)
    if params.get("ServiceCode"):
        query = query.where(QuotaRequest.service_code == params["ServiceCode"])
    if quota_code is not None:
        query = query.where(QuotaRequest.quota_code == quota_code)
    if params.get("Status"):
        query = query.where(QuotaRequest.status == params["Status"])
    # Newest first, as the Service Quotas console lists them.
    query = query.order_by(QuotaRequest.created_at.desc(), QuotaRequest.id.desc())
    rows = list(session.scalars(query.offset(offset).limit(_max_results(params) + 1)))
    items, token = _page(rows, offset, params)
    return {"RequestedQuotas": [_request_view(r) for r in items], "NextToken": token}


def list_requested_change_history(
    session: Session, account_id: str, region: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    if params.get("ServiceCode"):
        _check_service(params["ServiceCode"])
    return _history(session, account_id, region, params)


def list_requested_change_history_by_quota(
    session: Session,
    settings: PlanSettings,
    account_id: str,
    region: str,
    params: Mapping[str, Any],
) -> dict[str, Any]:
    q = _find(settings, params["ServiceCode"], params["QuotaCode"])
    return _history(session, account_id, region, params, quota_code=q.code)


def get_requested_change(
    session: Session, account_id: str, region: str, request_id: str
) -> dict[str, Any]:
    request = session.scalar(
        owned(QuotaRequest, account_id, region).where(QuotaRequest.id == request_id)
    )
    if request is None:
        raise NoSuchResourceException(
            f"Quota increase request {request_id!r} does not exist in this account and Region"
        )
    return {"RequestedQuota": _request_view(request)}


# --- the operator's side (our own endpoints, not AWS's) --------------------------------------


def _operator_view(
    session: Session, request: QuotaRequest, settings: PlanSettings | None
) -> dict[str, Any]:
    q = rules.by_code(quota_catalog(settings), request.quota_code) if settings else None
    current = None
    if settings is not None and q is not None:
        current = _value(session, settings, request.account_id, request.region, q)
    return {
        "id": request.id,
        "account_id": request.account_id,
        "region": request.region,
        "service_code": request.service_code,
        "quota_code": request.quota_code,
        "quota_name": request.quota_name,
        "desired_value": request.desired_value,
        "current_value": current,
        "status": request.status,
        "created": request.created_at.isoformat(),
        "last_updated": request.last_updated.isoformat(),
        "requester": request.requester,
    }


def list_requests(
    session: Session,
    settings: PlanSettings | None = None,
    *,
    account_id: str | None = None,
    status: RequestStatus | None = None,
) -> list[dict[str, Any]]:
    """Requests across accounts, oldest first (the order an operator works through them).

    With settings, each row also says the quota's value now (`current_value`).
    """
    query = select(QuotaRequest).order_by(QuotaRequest.created_at, QuotaRequest.id)
    if account_id is not None:
        query = query.where(QuotaRequest.account_id == account_id)
    if status is not None:
        query = query.where(QuotaRequest.status == status.value)
    return [_operator_view(session, r, settings) for r in session.scalars(query)]


def pending(session: Session, settings: PlanSettings | None = None) -> list[dict[str, Any]]:
    return list_requests(session, settings, status=RequestStatus.PENDING)


def _decide(session: Session, now: datetime, request_id: str, to: RequestStatus) -> QuotaRequest:
    # Locked (on PostgreSQL) so two operators deciding at once cannot both see PENDING.
    request = session.get(QuotaRequest, request_id, with_for_update=True)
    if request is None:
        raise NoSuchResourceException(f"Quota increase request {request_id!r} does not exist")
    old = RequestStatus(request.status)
    if old is not RequestStatus.PENDING:
        # An operator's repeat, or two operators racing: say so and change nothing.
        raise ConflictException(
            f"Request {request_id} is {old.value} already; only PENDING requests can be "
            "approved or denied"
        )
    request.status = rules.REQUEST_TRANSITIONS.check(old, to).value
    request.last_updated = now
    session.flush()
    return request


def approve(
    session: Session, now: datetime, request_id: str, settings: PlanSettings | None = None
) -> dict[str, Any]:
    """Apply the requested value to the account's quota and mark the request APPROVED."""
    request = _decide(session, now, request_id, RequestStatus.APPROVED)
    set_value(
        session, now, request.account_id, request.region, request.quota_code, request.desired_value
    )
    return _operator_view(session, request, settings)


def deny(
    session: Session, now: datetime, request_id: str, settings: PlanSettings | None = None
) -> dict[str, Any]:
    """Mark the request DENIED; the quota keeps its value."""
    request = _decide(session, now, request_id, RequestStatus.DENIED)
    return _operator_view(session, request, settings)


def requester_of(account_id: str, access_key_id: str) -> str:
    """The Requester AWS shows: who asked, as JSON (here the account and its access key)."""
    return json.dumps({"accountId": account_id, "accessKeyId": access_key_id})
