"""Service Quotas operations (`ServiceQuotasV20190624.*`) for the caller's SageMaker quotas."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import quotas


def list_services(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    return quotas.list_services(params)


def list_service_quotas(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return quotas.list_service_quotas(
            session, ctx.state.plans, ctx.account_id, ctx.region, params
        )


def get_service_quota(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return quotas.get_service_quota(
            session, ctx.state.plans, ctx.account_id, ctx.region, params
        )


def get_aws_default_service_quota(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    return quotas.get_aws_default_service_quota(
        ctx.state.plans, ctx.account_id, ctx.region, params
    )


def list_aws_default_service_quotas(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    return quotas.list_aws_default_service_quotas(
        ctx.state.plans, ctx.account_id, ctx.region, params
    )


def request_service_quota_increase(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return quotas.request_increase(
            session,
            ctx.clock.now(),
            ctx.state.plans,
            ctx.account_id,
            ctx.region,
            params,
            requester=quotas.requester_of(ctx.account_id, ctx.access_key_id),
        )


def list_requested_service_quota_change_history(
    ctx: RequestContext, params: dict[str, Any]
) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return quotas.list_requested_change_history(session, ctx.account_id, ctx.region, params)


def list_requested_service_quota_change_history_by_quota(
    ctx: RequestContext, params: dict[str, Any]
) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return quotas.list_requested_change_history_by_quota(
            session, ctx.state.plans, ctx.account_id, ctx.region, params
        )


def get_requested_service_quota_change(
    ctx: RequestContext, params: dict[str, Any]
) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return quotas.get_requested_change(
            session, ctx.account_id, ctx.region, params["RequestId"]
        )


HANDLERS: dict[str, Handler] = {
    "ListServices": list_services,
    "ListServiceQuotas": list_service_quotas,
    "GetServiceQuota": get_service_quota,
    "GetAWSDefaultServiceQuota": get_aws_default_service_quota,
    "ListAWSDefaultServiceQuotas": list_aws_default_service_quotas,
    "RequestServiceQuotaIncrease": request_service_quota_increase,
    "ListRequestedServiceQuotaChangeHistory": list_requested_service_quota_change_history,
    "ListRequestedServiceQuotaChangeHistoryByQuota": (
        list_requested_service_quota_change_history_by_quota
    ),
    "GetRequestedServiceQuotaChange": get_requested_service_quota_change,
}
