"""S3 on dockyard's endpoint: who may use which bucket is decided here; the protocol is
served by the embedded gateway (`dockyard.s3.gateway`, rclone) behind it.

Every S3 request must be signed with a dockyard access key (no anonymous access). The
key's account must own the bucket the request names - and, for a copy, the bucket it
copies from - or the request is refused with AccessDenied, as S3 refuses another
account's bucket. CreateBucket records the new bucket's owner once the gateway made
it; DeleteBucket forgets it; ListBuckets shows the caller's buckets only. The rest is
streamed through unchanged (headers, signature, body), so the gateway verifies the
signature and a large upload passes without being held here; the few ways the gateway
departs from S3 are mended on the way back (a ranged GET answers 206, and without the
whole object's checksum, which clients would check the part against).

The request is read once (`dockyard.domain.s3_addressing`), as the gateway will read it: the
bucket checked is, byte for byte, the bucket served. A path or copy source that two
readers could take differently (`.`/`..` segments, `//`, bad escapes) is refused with
400, and what passes is sent on exactly as it came (httpx is told the target; it
would otherwise remove dot segments). Who owns a bucket follows what the gateway did,
not what the request seemed to be: a bucket that exists after a caller's PUT and did
not before is the caller's, one gone after a DELETE is forgotten.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from dockyard.api import connections
from dockyard.api.context import ServerState
from dockyard.api.keys import KeyCache
from dockyard.clock import wall_now
from dockyard.domain import s3_addressing as addressing
from dockyard.s3 import empty_dirs, presigned
from dockyard.services import buckets

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("dockyard.api.s3")
E = TypeVar("E", bound=BaseException)
# One line per proxied request is the gateway's business, not the server log's.
logging.getLogger("httpx").setLevel(logging.WARNING)

# Not passed on: connection-level headers, and Expect (uvicorn already answered it).
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "proxy-authorization",
        "proxy-authenticate",
    }
)
# Set again by uvicorn for the response.
_RESPONSE_DROP = _HOP | {"date", "server"}
# Methods whose S3 operations take a body; any other is refused one (the gateway was
# sent its Content-Length without it, and h11 failed the request).
_WITH_BODY = frozenset({"PUT", "POST"})
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def signing_service(request: Request) -> tuple[str, str] | None:
    """(access key id, service) from a SigV4 Authorization header or presigned query."""
    return addressing.signing_service(
        request.headers.get("authorization"),
        request.scope.get("query_string", b"").decode("latin-1"),
    )


def is_s3(request: Request) -> bool:
    found = signing_service(request)
    return found is not None and found[1] == "s3"


def _error(code: str, message: str, status: int, resource: str = "") -> Response:
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>{request_id}</RequestId></Error>"
    )
    response = Response(
        body,
        status,
        media_type="application/xml",
        headers={"x-amz-request-id": request_id},
    )
    response.refused = True  # type: ignore[attr-defined]
    return response


def _cause(exc: BaseException, kind: type[E]) -> E | None:
    """The exception of `kind` that `exc` was raised from, if any (httpx wraps what a
    request's body stream raised)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _copy_source_bucket(request: Request) -> str | None:
    """The bucket a copy reads from, as the gateway reads it; AddressError if the header
    is not one `bucket/key` the front door and the gateway read alike."""
    sources = request.headers.getlist("x-amz-copy-source")
    if not sources:
        return None
    if len(sources) > 1:
        raise addressing.AddressError("InvalidArgument", "x-amz-copy-source is given twice")
    return addressing.copy_source(sources[0])[0]


class S3Front:
    def __init__(self, state: ServerState, store: buckets.BucketStore, socket: Path):
        self.state = state
        self.socket = socket
        self.store = store
        self.keys = KeyCache(state.db, state.box, state.settings.data_dir)
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        # Made on first use, inside the server's event loop; httpx is imported then, not
        # when the server starts (see `warm_up`).
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=str(self.socket)),
                timeout=httpx.Timeout(None, connect=10.0),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def _owner(self, bucket: str) -> str | None:
        with self.state.db.read_session() as session:
            return buckets.owner(session, bucket, self.store)

    def _owned(self, account_id: str) -> set[str]:
        with self.state.db.read_session() as session:
            return buckets.owned(session, account_id, self.store)

    def _claim(self, bucket: str, account_id: str) -> bool:
        with self.state.db.session() as session:
            claimed = buckets.claim(session, bucket, account_id, self.state.clock.now())
        if claimed:
            buckets.mark(self.store, bucket, account_id)
        return claimed

    def _exists(self, bucket: str) -> bool:
        # `bucket` is a valid bucket name (addressing.parse): never a path of its own.
        return (self.store.root / bucket).is_dir()

    def _forget(self, bucket: str) -> None:
        with self.state.db.session() as session:
            buckets.forget(session, bucket)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def __call__(self, request: Request) -> Response:
        import h11
        import httpx

        try:
            response = await self._handle(request)
        except connections.Refused:
            raise  # the client's body came too slowly: `connections.BodyGuard` answers
        except (httpx.LocalProtocolError, h11.LocalProtocolError) as exc:
            # What the client sent cannot be sent on as HTTP/1.1 as it stands.
            log.info("S3 request not forwarded: %s", exc)
            response = _error("InvalidRequest", f"The request cannot be served: {exc}", 400)
        except (httpx.HTTPError, h11.ProtocolError, OSError) as exc:
            refused = _cause(exc, connections.Refused)
            if refused is not None:
                raise refused from None  # the upload stopped while being sent on
            log.warning("S3 gateway unreachable: %s", exc)
            response = _error("ServiceUnavailable", "The S3 service is starting; try again", 503)
        except Exception:
            # Never a 500 with a traceback: the request is refused and the log says why.
            request_id = uuid.uuid4().hex[:16].upper()
            log.exception("S3 request failed (request %s)", request_id)
            response = _error(
                "ServiceUnavailable",
                f"The S3 service failed to serve the request; the server log has {request_id}",
                503,
            )
        if getattr(response, "refused", False) and (
            request.headers.get("content-length", "0") != "0"
            or "transfer-encoding" in request.headers
        ):
            # A refused upload's body is never read: the connection cannot carry another
            # request after it.
            response.headers["connection"] = "close"
        return response

    async def _handle(self, request: Request) -> Response:
        if signing_service(request) is None:
            return _error("AccessDenied", "Anonymous access is not allowed: sign the request", 403)
        if request.method not in _WITH_BODY and (
            request.headers.get("content-length", "0") not in ("", "0")
            or "transfer-encoding" in request.headers
        ):
            return _error(
                "InvalidRequest",
                f"A {request.method} request carries no body; send it without one "
                "(no Content-Length or Transfer-Encoding)",
                400,
            )
        raw_path = request.scope.get("raw_path", b"/").decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        authorizations = request.headers.getlist("authorization")
        try:
            # The key the gateway will verify the signature of: its account is checked.
            key_id, _ = addressing.credential(authorizations, query)
        except addressing.AddressError as exc:
            return _error(exc.code, exc.message, 400)
        if not authorizations:
            skew = timedelta(seconds=self.state.settings.max_clock_skew_seconds)
            refused = presigned.check(query, wall_now(), skew)
            if refused is not None:
                return _error(refused.code, refused.message, refused.status)
        record = await self._run(self.keys.get, key_id)
        if record is None:
            return _error(
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
                403,
            )
        account = record.account_id
        try:
            address = addressing.parse(raw_path, query)
            copied_from = _copy_source_bucket(request)
        except addressing.AddressError as exc:
            return _error(exc.code, exc.message, 400, raw_path[:200])
        bucket, key = address.bucket, address.key
        method = request.method
        if not bucket:
            if method != "GET":
                return _error("MethodNotAllowed", "Only ListBuckets is served at /", 405)
            return await self._list_buckets(request, address, account)
        subresource = bool(parse_qsl(query, keep_blank_values=True))
        # The bucket's own operations, as the gateway routes them (its key is empty).
        on_bucket = not key
        creating = method == "PUT" and on_bucket and not subresource
        owner = await self._run(self._owner, bucket)
        if creating and owner == account:
            return _error(
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you "
                "already own it.",
                409,
                bucket,
            )
        if creating and owner is not None:
            return _error(
                "BucketAlreadyExists",
                "The requested bucket name is not available. The bucket namespace is "
                "shared by all users of the system. Please select a different name "
                "and try again.",
                409,
                bucket,
            )
        if owner is not None and owner != account:
            return _error("AccessDenied", "Access Denied", 403, f"/{bucket}")
        if copied_from is not None and copied_from != bucket:
            source_owner = await self._run(self._owner, copied_from)
            if source_owner is not None and source_owner != account:
                return _error("AccessDenied", "Access Denied", 403, f"/{copied_from}")
        deleting = method == "DELETE" and on_bucket
        if deleting:
            # No agent uses the bucket from here (`bucket_marks`); marked again below if
            # it is not deleted.
            await self._run(buckets.unmark, self.store, bucket)
            if not subresource:
                # A bucket without objects is empty, whatever directories an aborted
                # upload left in it (`empty_dirs`).
                await self._run(empty_dirs.remove_empty_directories, self.store.root, bucket)
        response = await self._forward(request, address)
        if deleting and owner is not None and await self._run(self._exists, bucket):
            await self._run(buckets.mark, self.store, bucket, owner)
        if on_bucket and response.status_code < 300:
            # Whatever the gateway took the request for (a CreateBucket the front door
            # did not recognise included), a bucket it made is the caller's, and one it
            # removed is nobody's.
            exists = await self._run(self._exists, bucket)
            if method == "PUT" and owner is None and exists:
                if not await self._run(self._claim, bucket, account):
                    if response.background is not None:
                        await response.background()  # the gateway's answer, unsent: closed
                    return _error("BucketAlreadyExists", "The bucket name is taken", 409, bucket)
            if method == "DELETE" and not exists:
                await self._run(self._forget, bucket)
        return response

    async def _send(self, request: Request, address: addressing.Address) -> httpx.Response:
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in _HOP
        ]
        has_body = request.method in _WITH_BODY
        upstream = self.client.build_request(
            request.method,
            "http://s3/",
            headers=headers,
            content=request.stream() if has_body else None,
            # The request line's target, exactly as it was checked: from a URL, httpx
            # would normalise it (remove `.`/`..` segments, re-quote characters).
            extensions={"target": address.target.encode("latin-1")},
        )
        return await self.client.send(upstream, stream=True)

    async def _forward(self, request: Request, address: addressing.Address) -> Response:
        upstream = await self._send(request, address)
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_DROP}
        status = upstream.status_code
        if status == 200 and "content-range" in upstream.headers:
            status = 206
        if status == 206:
            headers = {
                k: v for k, v in headers.items() if not k.lower().startswith("x-amz-checksum")
            }
        return StreamingResponse(
            upstream.aiter_raw(),
            status_code=status,
            headers=headers,
            background=BackgroundTask(upstream.aclose),
        )

    async def _list_buckets(
        self, request: Request, address: addressing.Address, account: str
    ) -> Response:
        upstream = await self._send(request, address)
        try:
            body = await upstream.aread()
        finally:
            await upstream.aclose()
        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in _RESPONSE_DROP and k.lower() != "content-length"
        }
        if upstream.status_code != 200:
            return Response(body, upstream.status_code, headers=headers)
        owned = await self._run(self._owned, account)
        try:
            root = ElementTree.fromstring(body)
        except ElementTree.ParseError:
            return _error("InternalError", "The S3 service answered what is not XML", 500)
        ElementTree.register_namespace("", _NS.strip("{}"))
        for container in root.iter(f"{_NS}Buckets"):
            for entry in list(container):
                name = entry.findtext(f"{_NS}Name")
                if name not in owned:
                    container.remove(entry)
        for owner in root.iter(f"{_NS}Owner"):
            for field in owner:
                field.text = account
        text = ElementTree.tostring(root, xml_declaration=True, encoding="UTF-8")
        return Response(text, 200, headers=headers, media_type="application/xml")
