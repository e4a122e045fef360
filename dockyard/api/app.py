"""The HTTP application: the AWS API on `POST /`, plus health, metrics and operator routes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import Gauge
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from dockyard.api import cluster_exec, cluster_shell, connections
from dockyard.api.context import ServerState
from dockyard.api.dispatch import MAX_BODY_BYTES, Dispatcher, known_operations
from dockyard.api.metrics import ApiMetrics
from dockyard.api.operator import (
    clock_endpoint,
    fleet_endpoint,
    fleet_health_endpoint,
    quota_request_endpoint,
    quota_requests_endpoint,
)
from dockyard.api.s3 import is_s3
from dockyard.clock import monotonic

# A read-only request runs on the event loop (api/dispatch.py) only if its body is this
# small: decoding and validating 4 MB of JSON there would hold every other request.
INLINE_BODY_BYTES = 64 * 1024
EXEC_OPERATION = "dockyard.ExecClusterNode"
SHELL_OPERATION = "dockyard.StartClusterNodeSession"
S3_METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it is over `limit` bytes: refused by its
    Content-Length unread, else read no further than the limit (a chunked body)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


# The console's routes, given the server's state and the API's dispatcher (through which
# it runs the API's operations): the server mounts the web layer above this one.
ConsoleRoutes = Callable[[ServerState, Dispatcher], list[BaseRoute]]


def create_app(state: ServerState, console: ConsoleRoutes | None = None) -> Starlette:
    """The server's one ASGI app: the API, S3, the operator's and nodes' endpoints and,
    with `console`, the web console at /console."""
    dispatcher = Dispatcher(state)
    executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dockyard-api")
    metrics = ApiMetrics(
        known_operations() | {EXEC_OPERATION, SHELL_OPERATION} | {f"S3.{m}" for m in S3_METHODS}
    )
    node_commands = cluster_exec.NodeCommands(state, dispatcher.keys)
    # Node commands' and shells' short steps (checks, starting a command, each look at
    # whether it ended): a command waits on the event loop, never in one of these.
    exec_executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="dockyard-exec")
    node_shells = cluster_shell.NodeShells(node_commands, exec_executor)

    async def api(request: Request) -> Response:
        started = monotonic()
        scope = request.scope
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            refused = dispatcher.too_large(headers)
            metrics.observe(refused.operation, refused.code, monotonic() - started)
            # The rest of the body is never read: the connection cannot carry another
            # request after it.
            return Response(
                refused.body, refused.status, headers={**refused.headers, "connection": "close"}
            )
        args = (
            request.method,
            scope.get("raw_path", b"/").decode("latin-1"),
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            body,
        )
        small = len(body) <= INLINE_BODY_BYTES
        if small and dispatcher.runs_inline(request.headers.get("x-amz-target", "")):
            result = dispatcher.handle(*args)
        else:
            # A plain executor: anyio's to_thread (Starlette's run_in_threadpool) costs
            # about 60 µs more per call.
            result = await asyncio.get_running_loop().run_in_executor(
                executor, dispatcher.handle, *args
            )
        metrics.observe(result.operation, result.code, monotonic() - started)
        return Response(result.body, result.status, headers=result.headers)

    async def node_exec(request: Request) -> Response:
        started = monotonic()
        body = await _read_body(request, cluster_exec.MAX_BODY_BYTES)
        if body is None:
            return JSONResponse(
                {
                    "__type": "SerializationException",
                    "message": f"Request body is over {cluster_exec.MAX_BODY_BYTES} bytes",
                },
                413,
                headers={"connection": "close"},
            )
        scope = request.scope
        status, answer, request_id = await node_commands.serve(
            exec_executor,
            request.method,
            scope.get("raw_path", b"/").decode("latin-1"),
            scope.get("query_string", b"").decode("latin-1"),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body,
        )
        code = str(answer.get("__type", "OK"))
        metrics.observe(EXEC_OPERATION, code, monotonic() - started)
        headers = {"x-amzn-requestid": request_id}
        if status >= 400:
            headers["x-amzn-errortype"] = code
        return JSONResponse(answer, status, headers=headers)

    async def node_shell(websocket: WebSocket) -> None:
        started = monotonic()
        code = await node_shells.serve(websocket)
        metrics.observe(SHELL_OPERATION, code, monotonic() - started)

    async def s3(request: Request) -> Response:
        if state.s3 is None:
            return Response(
                "<Error><Code>NotImplemented</Code><Message>This server has no S3 service "
                "(it uses --s3-endpoint-url)</Message></Error>",
                501,
                media_type="application/xml",
            )
        started = monotonic()
        # Uploads go on to the gateway as they come: nothing of them is kept here.
        connections.streamed(request.scope)
        response = await state.s3(request)
        metrics.observe(f"S3.{request.method}", str(response.status_code), monotonic() - started)
        return response

    async def healthz(request: Request) -> Response:
        if is_s3(request):  # a bucket named healthz
            return await s3(request)

        def check() -> None:
            with state.db.engine.connect() as connection:
                connection.execute(text("SELECT 1"))

        try:
            await run_in_threadpool(check)
        except Exception as exc:  # the health check reports, it never raises
            return JSONResponse({"status": "unhealthy", "database": str(exc)[:200]}, 503)
        return JSONResponse(
            {"status": "ok", "clock": state.clock.kind, "now": state.clock.now().isoformat()}
        )

    async def metrics_endpoint(request: Request) -> Response:
        if is_s3(request):  # a bucket named metrics
            return await s3(request)
        # Off the event loop: /healthz and the API go on while it renders.
        rendered = await run_in_threadpool(metrics.render)
        return Response(rendered, media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        state.control.start()
        try:
            yield
        finally:
            state.control.stop()
            executor.shutdown(wait=False)
            exec_executor.shutdown(wait=False)
            close = getattr(state.s3, "close", None)
            if close is not None:
                await close()

    console_routes = Router(routes=console(state, dispatcher) if console is not None else [])

    async def console_or_s3(scope: Scope, receive: Receive, send: Send) -> None:
        # /console/... is the console, unless it is S3's (a bucket named "console").
        if scope["type"] == "http" and is_s3(Request(scope)):
            await (await s3(Request(scope, receive)))(scope, receive, send)
        else:
            await console_routes(scope, receive, send)

    async def console_root(request: Request) -> Response:
        if is_s3(request):
            return await s3(request)
        return RedirectResponse("/console/", 307)

    limits = connections.ConnectionLimits.of(state.settings)
    bodies = connections.BodyBudget(limits.body_budget)
    Gauge(
        "dockyard_request_body_bytes",
        "Bytes of request bodies being received and kept (all but S3 uploads), across "
        "the server; at body_budget_mib requests are answered 503",
        registry=metrics.registry,
    ).set_function(lambda: bodies.held)

    def refused(scope: Scope, code: str) -> None:
        # A body too slow, or past the bodies' budget (api/connections.py).
        target = next((v for k, v in scope["headers"] if k == b"x-amz-target"), b"")
        metrics.observe(target.decode("latin-1") or "-", code, 0.0)

    app = Starlette(
        lifespan=lifespan,
        middleware=[
            Middleware(connections.BodyGuard, limits=limits, budget=bodies, refused=refused)
        ],
        routes=[
            Route("/", api, methods=["POST"]),
            # The web console (dockyard/web): its pages, or S3's when signed for it.
            Route("/console", console_root, methods=["GET", "PUT", "POST", "DELETE", "HEAD"]),
            Mount("/console", app=console_or_s3),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/_dockyard/clock", clock_endpoint, methods=["GET", "POST"]),
            Route("/_dockyard/fleet", fleet_endpoint, methods=["GET"]),
            Route("/_dockyard/fleet/health", fleet_health_endpoint, methods=["POST"]),
            Route(cluster_exec.PATH, node_exec, methods=["POST"]),
            WebSocketRoute(cluster_shell.PATH, node_shell),
            Route("/_dockyard/quotas/requests", quota_requests_endpoint, methods=["GET"]),
            Route(
                "/_dockyard/quotas/requests/{request_id}",
                quota_request_endpoint,
                methods=["POST"],
            ),
            # S3: ListBuckets at GET /, buckets and objects at /<bucket>[/<key>].
            Route("/", s3, methods=["GET", "HEAD"]),
            Route("/{path:path}", s3, methods=["GET", "PUT", "POST", "DELETE", "HEAD"]),
        ],
    )
    app.state.dockyard = state
    return app
