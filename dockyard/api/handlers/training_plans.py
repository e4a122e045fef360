"""SageMaker training-plan operations: offerings, purchase, plans and their reserved capacity."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import offerings, training_plans


def search_training_plan_offerings(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return offerings.search(
            session,
            ctx.clock.now(),
            ctx.account_id,
            ctx.region,
            params,
            ctx.state.plans,
            ctx.state.calendars,
        )


def create_training_plan(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        result = offerings.create(
            session, ctx.clock.now(), ctx.account_id, ctx.region, params, ctx.state.plans
        )
    ctx.state.control.nudge()  # payment is the reconciler's work; start it now
    return result


def describe_training_plan(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return training_plans.describe(
            session, ctx.account_id, ctx.region, params["TrainingPlanName"]
        )


def list_training_plans(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return training_plans.list_plans(session, ctx.account_id, ctx.region, params)


def describe_reserved_capacity(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return training_plans.describe_reserved_capacity(
            session, ctx.account_id, ctx.region, params["ReservedCapacityArn"]
        )


def list_ultraservers_by_reserved_capacity(
    ctx: RequestContext, params: dict[str, Any]
) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return training_plans.list_ultraservers(session, ctx.account_id, ctx.region, params)


HANDLERS: dict[str, Handler] = {
    "SearchTrainingPlanOfferings": search_training_plan_offerings,
    "CreateTrainingPlan": create_training_plan,
    "DescribeTrainingPlan": describe_training_plan,
    "ListTrainingPlans": list_training_plans,
    "DescribeReservedCapacity": describe_reserved_capacity,
    "ListUltraServersByReservedCapacity": list_ultraservers_by_reserved_capacity,
}
