"""Slow and idle clients: how long a client may take to send its request, and how much
of the server's memory requests that are still arriving may hold.

uvicorn bounds neither. Its keep-alive timer runs only between requests and stops at
any byte received, so a connection whose headers never end - or come a byte every few
seconds - is held for good; httptools keeps an unfinished header in memory without a
limit (and grows it by copying: one fast client sending a 200 MiB header held the event
loop for over 30 s); and a request's body is waited for as long as its client likes,
while the API buffers up to 4 MiB of it before anything is authenticated (40 bodies
sent one byte short held 160 MiB, for as long as the connections stayed open). Two
pieces close that, sized by `ConnectionLimits` (from the settings):

* `http_protocol`: uvicorn's httptools protocol with a deadline for a request's
  headers, counted from the connection's start or from the previous response, and a
  cap on their size. Past either the request is answered 408 RequestTimeout or 431
  RequestHeaderSectionTooLarge and the connection closed (an idle connection that
  sent nothing of a next request is closed without an answer).
* `BodyGuard`: ASGI middleware around the app. While the server waits for a request's
  body before answering it, the body must keep coming at `body_min_rate` bytes a
  second over each `body_timeout` seconds of that waiting, or the request is answered
  408 RequestTimeout and the connection closed. Only the server's waiting counts: an
  upload held back because the server (or the S3 gateway behind it) reads slowly is
  not the client's fault. And the bodies received by handlers that keep them share one
  budget across the server, `body_budget` bytes: past it a request is answered 503
  (ServiceUnavailable, S3's SlowDown) rather than the server running out of memory.
  S3 uploads are streamed to the gateway as they come (`streamed`), so they hold
  nothing and are outside the budget.

Refusals carry the error code in the protocol the request speaks (JSON, the query
protocol's XML, S3's XML), as the handlers' own do.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from xml.sax.saxutils import escape

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from dockyard.api import query
from dockyard.api.targets import query_targets
from dockyard.clock import monotonic
from dockyard.domain import s3_addressing as addressing

if TYPE_CHECKING:
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from dockyard.config import Settings

log = logging.getLogger("dockyard.api.connections")

# Where a request's scope keeps its `_Body` (read by `streamed`).
_BODY = "dockyard.body"


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    max_header_bytes: int
    body_timeout: float
    body_min_rate: int
    body_budget: int

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            header_timeout=settings.header_timeout_seconds,
            max_header_bytes=settings.max_header_bytes,
            body_timeout=settings.body_timeout_seconds,
            body_min_rate=settings.body_min_rate_bytes,
            body_budget=settings.body_budget_mib * 1024 * 1024,
        )

    @property
    def body_bytes_per_window(self) -> int:
        """What a body must bring in each `body_timeout` seconds of waiting (a byte, at
        least: a body that stops is never waited for past the window)."""
        return max(1, int(self.body_min_rate * self.body_timeout))


class Refused(Exception):
    """A request answered before it was read whole: `code` is the AWS error code
    (`s3_code` where S3 names it otherwise)."""

    def __init__(self, status: int, code: str, message: str, s3_code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.s3_code = s3_code or code


def refusal(
    headers: Sequence[tuple[bytes, bytes]], query_string: bytes, refused: Refused
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """(headers, body) of the answer to a refused request, in the protocol it speaks: by
    its X-Amz-Target the JSON API's, else by the service it is signed for S3's or the
    query protocol's (STS, IAM) XML; JSON when nothing says (its headers unfinished)."""
    request_id = str(uuid.uuid4())
    named: dict[str, str] = {}
    for name, value in headers:
        named.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    signed = None
    if "x-amz-target" not in named:
        signed = addressing.signing_service(
            named.get("authorization"), query_string.decode("latin-1")
        )
    service = signed[1] if signed else ""
    if service == "s3":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{refused.s3_code}</Code><Message>{escape(refused.message)}"
            f"</Message><RequestId>{request_id}</RequestId></Error>"
        ).encode()
        return [
            (b"content-type", b"application/xml"),
            (b"x-amz-request-id", request_id.encode()),
        ], body
    if service in query_targets():
        body = query.error(refused.code, refused.message, request_id)
        return [(b"content-type", b"text/xml"), (b"x-amzn-requestid", request_id.encode())], body
    body = json.dumps({"__type": refused.code, "message": refused.message}).encode()
    return [
        (b"content-type", b"application/x-amz-json-1.1"),
        (b"x-amzn-requestid", request_id.encode()),
        (b"x-amzn-errortype", refused.code.encode()),
    ], body


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline and a size cap for a request's
    headers (`http_protocol` gives it its limits)."""

    limits: ClassVar[ConnectionLimits]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._deadline: asyncio.TimerHandle | None = None
        # Between a request's first byte and the end of its headers.
        self._in_head = False
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            # The whole chunk counts from the one a head began in: exact for a client
            # that waits for an answer before its next request (all of them but a
            # pipelining one, whose count may take in its previous request's tail).
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse(
                    Refused(
                        431,
                        "RequestHeaderSectionTooLarge",
                        f"The request's headers are over {self.limits.max_header_bytes} bytes",
                    )
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's headers are due from now, unless a pipelined request (its
        # headers in already) was started instead.
        if not self.transport.is_closing() and (
            self.cycle is None or self.cycle.response_complete
        ):
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.limits.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered: its headers came in time
        if not self._in_head:
            # Nothing of a next request: an idle connection, closed without a word (an
            # answer could be taken for the answer to a request crossing it).
            self.transport.close()
            return
        timeout = self.limits.header_timeout
        self._refuse(
            Refused(
                408,
                "RequestTimeout",
                f"The request's headers were not received within {timeout:g} seconds; "
                "the connection is closed",
            )
        )

    def _refuse(self, refused: Refused) -> None:
        self._disarm()
        self._in_head = False
        headers, body = refusal(self.headers or [], b"", refused)
        phrase = http.HTTPStatus(refused.status).phrase
        head = [f"HTTP/1.1 {refused.status} {phrase}".encode()]
        head += [name + b": " + value for name, value in headers]
        head += [b"content-length: %d" % len(body), b"connection: close"]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()


def http_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The protocol class for `uvicorn.run(http=...)`, with these limits."""
    return type("DockyardHttpProtocol", (DeadlineProtocol,), {"limits": limits})


def streamed(scope: Scope) -> None:
    """Says that this request's handler streams its body on as it comes (an S3 upload,
    to the gateway) rather than keeping it: it takes nothing of the bodies' budget."""
    body = scope.get(_BODY)
    if isinstance(body, _Body):
        body.streamed = True


class BodyBudget:
    """The bytes of request bodies being received and kept, across the server."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise Refused(
                503,
                "ServiceUnavailable",
                "The server is receiving too many request bodies at once "
                f"({self.limit // (1024 * 1024)} MiB); try again shortly",
                s3_code="SlowDown",
            )
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


class BodyGuard:
    """The body's deadline and the server's budget for bodies (see the module's
    docstring), around an ASGI app. `refused(scope, code)` hears of each refusal."""

    def __init__(
        self,
        app: ASGIApp,
        limits: ConnectionLimits,
        budget: BodyBudget | None = None,
        refused: Callable[[Scope, str], None] | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.budget = budget or BodyBudget(limits.body_budget)
        self.on_refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = _Body(self, receive)
        scope[_BODY] = body

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                body.answered = True
            await send(message)

        try:
            await self.app(scope, body.receive, watched)
        except Refused as refused:
            if self.on_refused is not None:
                self.on_refused(scope, refused.code)
            if body.answered:
                return  # uvicorn closes a connection whose answer was left unfinished
            headers, content = refusal(scope["headers"], scope.get("query_string", b""), refused)
            headers += [(b"content-length", b"%d" % len(content)), (b"connection", b"close")]
            await send(
                {"type": "http.response.start", "status": refused.status, "headers": headers}
            )
            await send({"type": "http.response.body", "body": content})
        except ClientDisconnect:
            return  # the client went before its body was in: nobody to answer
        finally:
            self.budget.give(body.held)
            body.held = 0


class _Body:
    """One request's body as its handler receives it, timed and counted."""

    def __init__(self, guard: BodyGuard, receive: Receive) -> None:
        self.guard = guard
        self._receive = receive
        self.streamed = False
        # The answer has started (from then on nothing waits for the body to answer it),
        # or the body is all in.
        self.answered = False
        self.done = False
        self.held = 0
        # The current window: seconds spent waiting for the body, and bytes it brought.
        self.waited = 0.0
        self.arrived = 0

    async def receive(self) -> Message:
        if self.done or self.answered:
            return await self._receive()
        limits = self.guard.limits
        while True:
            started = monotonic()
            message: Message | None = None
            try:
                async with asyncio.timeout(limits.body_timeout - self.waited):
                    message = await self._receive()
            except TimeoutError:
                self.waited = limits.body_timeout
            else:
                self.waited += monotonic() - started
                self._count(message)
                if self.done:
                    return message
            if self.waited >= limits.body_timeout:
                if self.arrived < limits.body_bytes_per_window:
                    raise Refused(
                        408,
                        "RequestTimeout",
                        "The request's body did not arrive in time (at least "
                        f"{limits.body_min_rate} bytes a second over each "
                        f"{limits.body_timeout:g} seconds); the connection is closed",
                    )
                self.waited = 0.0
                self.arrived = 0
            if message is not None:
                return message

    def _count(self, message: Message) -> None:
        if message["type"] != "http.request":
            self.done = True  # http.disconnect
            return
        size = len(message.get("body", b""))
        self.arrived += size
        if not message.get("more_body", False):
            self.done = True
        if size and not self.streamed:
            self.guard.budget.take(size)
            self.held += size
