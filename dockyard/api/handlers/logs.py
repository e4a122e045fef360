"""CloudWatch Logs operations: the training jobs' and clusters' log streams, read
through the backend that ran their instances."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from dockyard.api.authorise import authorise, log_group_arn, log_stream_arn
from dockyard.api.context import Handler, RequestContext
from dockyard.services import log_streams, logs


def describe_log_streams(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return logs.describe_log_streams(
            connection, ctx.backend.records, ctx.account_id, ctx.region, params
        )


def get_log_events(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        return logs.get_log_events(
            connection, ctx.backend.records, ctx.account_id, ctx.region, params
        )


def filter_log_events(ctx: RequestContext, params: dict[str, Any]) -> dict[str, Any]:
    with ctx.db.read() as connection:
        if ctx.policy is not None and not params.get("logStreamNames"):
            _authorise_every_stream(ctx, connection, params)
        return logs.filter_log_events(
            connection, ctx.backend.records, ctx.account_id, ctx.region, params
        )


def _authorise_every_stream(
    ctx: RequestContext, connection: Connection, params: dict[str, Any]
) -> None:
    """A search naming no stream reads every stream of its group (or of its prefix):
    each is checked as if the request named it, so a Deny on a stream holds however the
    stream is read (the streams a request names are checked before it gets here)."""
    group = log_streams.check_group(params, ctx.account_id, ctx.region, connection)
    group_arn = log_group_arn(ctx.region, ctx.account_id, {"logGroupName": group.name})
    assert group_arn is not None
    prefix = params.get("logStreamNamePrefix") or ""
    streams = log_streams.streams(
        connection, ctx.backend.records, ctx.account_id, ctx.region, group, prefix
    )
    if streams:
        authorise(
            ctx.policy,
            "logs",
            "FilterLogEvents",
            ctx.region,
            ctx.account_id,
            params,
            access_key_id=ctx.access_key_id,
            resources=[log_stream_arn(group_arn, stream.name) for stream in streams],
        )


HANDLERS: dict[str, Handler] = {
    "DescribeLogStreams": describe_log_streams,
    "GetLogEvents": get_log_events,
    "FilterLogEvents": filter_log_events,
}
