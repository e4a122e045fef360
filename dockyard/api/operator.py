"""Operator-only endpoints (ours, not AWS's): the manual clock, the fleet, quota requests.

Refused unless the caller presents the operator token from the data dir, and, for
changes, unless the server runs with `--clock manual`.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from dockyard.api.context import ServerState
from dockyard.api.untrusted import BodyError, read_json, same_secret
from dockyard.clock import ClockError, ManualClock, parse_duration, parse_instant
from dockyard.domain.quotas import RequestStatus
from dockyard.services import accounts, clock_state, fleet, maintenance, quotas
from dockyard.services.errors import ConflictException, ResourceNotFound, ServiceError

OPERATOR_HEADER = "x-dockyard-operator-key"


def _denied(message: str, status: int) -> JSONResponse:
    return JSONResponse({"__type": "AccessDeniedException", "message": message}, status)


_NOT_OPERATOR = (
    "operator endpoints need the operator key from the server's data dir "
    f"(header {OPERATOR_HEADER})"
)


def _authorised(state: ServerState, request: Request) -> bool:
    presented = request.headers.get(OPERATOR_HEADER, "")
    return bool(presented) and same_secret(presented, state.operator_token)


def _invalid(message: str) -> JSONResponse:
    return JSONResponse({"__type": "ValidationException", "message": message}, 400)


async def _json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's body as a JSON object ({} when empty), or the 400 that says why it
    is not one."""
    try:
        body = read_json(await request.body())
    except BodyError as exc:
        return JSONResponse({"__type": "SerializationException", "message": exc.message}, 400)
    if not isinstance(body, dict):
        return _invalid("the body must be a JSON object")
    return body


def _clock_view(state: ServerState) -> dict[str, Any]:
    return {"kind": state.clock.kind, "now": state.clock.now().isoformat()}


async def clock_endpoint(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.dockyard
    if not _authorised(state, request):
        return _denied(_NOT_OPERATOR, 403)
    if request.method == "GET":
        return JSONResponse(_clock_view(state))
    clock = state.clock
    if not isinstance(clock, ManualClock):
        return JSONResponse(
            {
                "__type": "ConflictException",
                "message": "the server runs on the real clock; start it with --clock manual "
                "to move time by hand",
            },
            409,
        )
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    try:
        if "advance" in body:
            clock.advance(parse_duration(str(body["advance"])))
        elif "set" in body:
            clock.set(parse_instant(str(body["set"])))
        else:
            raise ClockError('say {"advance": "2h"} or {"set": "2026-01-01T00:00:00Z"}')
    except (ClockError, ValueError) as exc:
        return _invalid(str(exc))
    except OverflowError:  # a duration or an instant past what a datetime holds
        return _invalid("that is further than the clock can go (the year 9999)")
    with state.db.session() as session:
        clock_state.save(session, clock.now())
    # Answer once the reconcilers have caught up with the new time.
    await run_in_threadpool(state.control.sync)
    return JSONResponse(_clock_view(state))


async def fleet_endpoint(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.dockyard
    if not _authorised(state, request):
        return _denied(_NOT_OPERATOR, 403)

    def view() -> list[dict[str, Any]]:
        with state.db.read_session() as session:
            return fleet.fleet_view(session, state.clock.now())

    return JSONResponse(
        {"now": state.clock.now().isoformat(), "instances": await run_in_threadpool(view)}
    )


def _service_error(exc: ServiceError) -> JSONResponse:
    status = 409 if isinstance(exc, ConflictException) else exc.status
    if exc.code in ("NoSuchResourceException", ResourceNotFound.code):
        status = 404
    return JSONResponse({"__type": exc.code, "message": exc.message}, status)


async def quota_requests_endpoint(request: Request) -> JSONResponse:
    """GET: quota increase requests, `?pending=1` for the undecided, `?account=` id or name."""
    state: ServerState = request.app.state.dockyard
    if not _authorised(state, request):
        return _denied(_NOT_OPERATOR, 403)
    account = request.query_params.get("account")
    only_pending = request.query_params.get("pending", "") not in ("", "0", "false")

    def view() -> list[dict[str, Any]]:
        with state.db.read_session() as session:
            account_id = accounts.find_account(session, account).id if account else None
            return quotas.list_requests(
                session,
                state.plans,
                account_id=account_id,
                status=RequestStatus.PENDING if only_pending else None,
            )

    try:
        return JSONResponse({"requests": await run_in_threadpool(view)})
    except ServiceError as exc:
        return _service_error(exc)


async def quota_request_endpoint(request: Request) -> JSONResponse:
    """POST {"decision": "approve"|"deny"}: decide one PENDING quota increase request."""
    state: ServerState = request.app.state.dockyard
    if not _authorised(state, request):
        return _denied(_NOT_OPERATOR, 403)
    request_id = request.path_params["request_id"]
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    decision = body.get("decision")
    if decision not in ("approve", "deny"):
        return _invalid('say {"decision": "approve"|"deny"}')
    decide = quotas.approve if decision == "approve" else quotas.deny

    def apply() -> dict[str, Any]:
        with state.db.session() as session:
            return decide(session, state.clock.now(), request_id, state.plans)

    try:
        return JSONResponse(await run_in_threadpool(apply))
    except ServiceError as exc:
        return _service_error(exc)


async def fleet_health_endpoint(request: Request) -> JSONResponse:
    """Take instances out of service or back: {"health": "Maintenance"|"Healthy",
    "instances": [...]} or {"health": ..., "instance_type": ..., "availability_zone": ...}."""
    state: ServerState = request.app.state.dockyard
    if not _authorised(state, request):
        return _denied(_NOT_OPERATOR, 403)
    body = await _json_object(request)
    if isinstance(body, JSONResponse):
        return body
    instances = body.get("instances") or []
    if not isinstance(instances, list) or not all(isinstance(i, str) for i in instances):
        return _invalid('"instances" must be a list of instance ids')
    where = {name: body.get(name) for name in ("instance_type", "availability_zone")}
    for name, value in where.items():
        if value is not None and not isinstance(value, str):
            return _invalid(f'"{name}" must be a string')

    def apply() -> dict[str, Any]:
        with state.db.session() as session:
            return maintenance.set_health(
                session,
                state.clock.now(),
                state.plans,
                str(body.get("health", "")),
                instance_ids=instances,
                instance_type=where["instance_type"],
                availability_zone=where["availability_zone"],
            )

    try:
        result = await run_in_threadpool(apply)
    except ValueError as exc:
        return _invalid(str(exc))
    state.control.nudge()  # the pools reconciler lets the terminated pools' agents go
    return JSONResponse(result)
