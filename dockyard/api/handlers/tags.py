"""SageMaker tagging operations."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import tags


def list_tags(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read_session() as session:
        return tags.list_tags(session, ctx.account_id, ctx.region, params["ResourceArn"])


def add_tags(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return tags.add_tags(
            session, ctx.account_id, ctx.region, params["ResourceArn"], params["Tags"]
        )


def delete_tags(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.session() as session:
        return tags.delete_tags(
            session, ctx.account_id, ctx.region, params["ResourceArn"], params["TagKeys"]
        )


HANDLERS: dict[str, Handler] = {
    "ListTags": list_tags,
    "AddTags": add_tags,
    "DeleteTags": delete_tags,
}
