"""CloudWatch Logs operations: the training jobs' and clusters' log streams, read
through the backend that ran their instances."""

from __future__ import annotations

from typing import Any

from dockyard.api.context import Handler, RequestContext
from dockyard.services import logs


def describe_log_streams(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return logs.describe_log_streams(
            connection, ctx.backend, ctx.account_id, ctx.region, params
        )


def get_log_events(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return logs.get_log_events(connection, ctx.backend, ctx.account_id, ctx.region, params)


def filter_log_events(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return logs.filter_log_events(connection, ctx.backend, ctx.account_id, ctx.region, params)


HANDLERS: dict[str, Handler] = {
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
