"""A cluster node's way to S3: a relay its agent serves inside the node's network.

A HyperPod node reaches S3 with its instance group's role (a lifecycle script copies
its marker there, a job reads its data). A node here runs in the job sandbox, whose
network reaches nothing of the server (`sandbox.network`), so its agent - outside the
sandbox, on the host's network - listens on 127.0.0.1 inside the node's network
namespace and passes S3 requests on to dockyard's endpoint. The node signs them itself
with credentials of its own (its account's, allowed S3 only, deleted with the node):
the relay adds nothing, so the server checks the signature and the bucket's owner as
for any caller, and the node can do with S3 exactly what its account can.

Only S3 passes. Each request is parsed (h11) and checked before any of it is sent on:
signed for `s3` - every credential it names, in its Authorization headers and its
query, and the one the server itself reads to decide that a request is S3's -,
addressed to `/` or a bucket (a name S3 allows, so never `/_dockyard/...` or the
SageMaker API at `POST /`), no protocol upgrade. The target and the credentials are
read by the server's own functions (`dockyard.domain.s3_addressing`), so the relay and the
server cannot take one request for two different things; a target the server would
refuse (`.`/`..` segments, `//`, bad escapes) is refused here already. Requests on one
connection are checked one by one, so nothing rides behind an allowed one; each goes
to the server on a connection of its own. A refusal is an S3 error (403 AccessDenied)
saying why.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

import h11

from dockyard.compute.sandbox import netns
from dockyard.domain import s3_addressing as addressing

HOST = "127.0.0.1"
# Connections served at once; more are answered 503 SlowDown.
MAX_CONNECTIONS = 32
# A client that sends nothing for this long is dropped.
IDLE_SECONDS = 60.0
# The server's answer to one request (a big object streams: this is per read).
UPSTREAM_SECONDS = 300.0
CHUNK = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024

# Connection-level headers are the relay's own business on each side (what frames a
# body - Content-Length, Transfer-Encoding - is kept, so h11 frames it the same way on
# the other side); Expect is answered by the relay (botocore never signs it, and
# dockyard's front door drops it).
_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
        b"proxy-authorization",
        b"proxy-authenticate",
    }
)


def refusal(method: bytes, target: bytes, headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """Why a request from a node is not passed on; None when it is an S3 request."""
    if any(name.lower() == b"upgrade" for name, _ in headers):
        return "protocol upgrades are not relayed"
    text = target.decode("latin-1")
    if not text.startswith("/"):
        return "the request target must be a path (origin form)"
    # Split by hand, as the server's HTTP parser splits it: urlsplit reads `//name/...`
    # as a host, not the path the server sees.
    raw_path, _, query = text.partition("?")
    try:
        address = addressing.parse(raw_path, query)
    except addressing.AddressError as exc:
        return f"only S3 requests (to / or a bucket) are relayed: {exc.message}"
    if method.upper() == b"POST" and not address.bucket:
        return "only S3 requests are relayed"
    # Every credential the request names, wherever the server or the gateway might read
    # one from, and in the form the server reads it (its headers are latin-1 text).
    authorizations = [v.decode("latin-1") for n, v in headers if n.lower() == b"authorization"]
    for value in authorizations:
        found = addressing.credential_scope(value)
        if found is None:
            return "the Authorization header is not a SigV4 signature"
        if found[1] != "s3":
            return "only requests signed for s3 are relayed"
    for key, credential in parse_qsl(query, keep_blank_values=True):
        if key.lower() == "x-amz-credential":
            fields = credential.split("/")
            if len(fields) != 5 or fields[4] != "aws4_request":
                return "the query's X-Amz-Credential is not a SigV4 credential"
            if fields[3] != "s3":
                return "only requests signed for s3 are relayed"
    # And the one the server reads to route it: only a request it takes for S3 reaches
    # S3 (one it does not is its console's, health's or metrics').
    signed = addressing.signing_service(authorizations[0] if authorizations else None, query)
    if signed is None:
        return "the request is not signed (SigV4, with the node's credentials)"
    if signed[1] != "s3":
        return "only requests signed for s3 are relayed"
    return None


def relay_environment(access: dict[str, Any], port: int) -> dict[str, str]:
    """What points a node's AWS tools (the CLI, boto3, the SDKs) at its relay, signing
    with its credentials: `access` is the node spec's `s3` (see `JobSpec.node`)."""
    region = str(access.get("region") or "us-east-1")
    return {
        "AWS_ACCESS_KEY_ID": str(access["access_key_id"]),
        "AWS_SECRET_ACCESS_KEY": str(access["secret_access_key"]),
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ENDPOINT_URL_S3": f"http://{HOST}:{port}",
    }


def _error(status: int, code: str, message: str) -> tuple[h11.Response, bytes]:
    """An S3 error answer, after which the connection closes."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    ).encode()
    headers = [
        (b"content-type", b"application/xml"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    reason = HTTPStatus(status).phrase.encode()
    return h11.Response(status_code=status, headers=headers, reason=reason), body


def _busy() -> bytes:
    """503 SlowDown, written before any request was read (h11 answers requests only)."""
    response, body = _error(503, "SlowDown", "too many connections to S3 at once")
    head = b"".join(b"%s: %s\r\n" % (name, value) for name, value in response.headers)
    return b"HTTP/1.1 503 Service Unavailable\r\n" + head + b"\r\n" + body


class _Closed(Exception):
    """The node's side of a connection went away or broke the protocol."""


class S3Relay:
    """Listens in a network namespace; passes S3 requests on to `upstream`."""

    def __init__(self, listener: socket.socket, upstream: tuple[str, int]) -> None:
        self.listener = listener
        self.upstream = upstream
        self.port = int(listener.getsockname()[1])
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="dockyard-s3-relay", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, namespace: str | None, upstream: tuple[str, int]) -> S3Relay:
        """A relay on 127.0.0.1 (a free port) inside `namespace` (a path naming a
        network namespace), or in this process's own network when None."""
        if namespace is None:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.bind((HOST, 0))
            listener.listen(MAX_CONNECTIONS)
        else:
            listener = netns.listen(namespace, HOST, 0, MAX_CONNECTIONS)
        return cls(listener, upstream)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._open)
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    # -- connections ------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self._slots.acquire(blocking=False):
                with contextlib.suppress(OSError):
                    conn.sendall(_busy())
                conn.close()
                continue
            with self._lock:
                if self._closed:
                    conn.close()
                    self._slots.release()
                    return
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(IDLE_SECONDS)
            client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
            while self._one(conn, client):
                client.start_next_cycle()
        except (_Closed, OSError, h11.ProtocolError):
            pass
        except Exception as exc:  # noqa: BLE001 - one connection's fault ends only it
            print(f"dockyard agent: S3 relay: {exc!r}", file=sys.stderr, flush=True)
        finally:
            with self._lock:
                self._open.discard(conn)
            conn.close()
            self._slots.release()

    def _one(self, conn: socket.socket, client: h11.Connection) -> bool:
        """Serve one request; answers whether the connection may carry another."""
        try:
            event = _next(conn, client)
        except h11.RemoteProtocolError as exc:
            _answer(conn, client, 400, "InvalidRequest", f"malformed request: {exc}")
            return False
        if not isinstance(event, h11.Request):
            return False  # closed between requests
        why = refusal(event.method, event.target, event.headers)
        if why is not None:
            _answer(conn, client, 403, "AccessDenied", f"dockyard's S3 relay: {why}")
            return False
        try:
            upstream = socket.create_connection(self.upstream, timeout=UPSTREAM_SECONDS)
        except OSError as exc:
            _answer(
                conn,
                client,
                503,
                "ServiceUnavailable",
                f"dockyard's S3 service cannot be reached from this node: {exc.strerror or exc}",
            )
            return False
        with upstream:
            finished = self._forward(conn, client, upstream, event)
        return finished and client.our_state is h11.DONE and client.their_state is h11.DONE

    def _forward(
        self,
        conn: socket.socket,
        client: h11.Connection,
        upstream: socket.socket,
        request: h11.Request,
    ) -> bool:
        server = h11.Connection(h11.CLIENT)
        headers = [(name, value) for name, value in request.headers if name.lower() not in _HOP]
        if request.http_version == b"1.0" and not any(n.lower() == b"host" for n, _ in headers):
            _answer(conn, client, 400, "InvalidRequest", "a Host header is required")
            return False
        upstream.sendall(
            server.send(h11.Request(method=request.method, target=request.target, headers=headers))
            or b""
        )
        if client.they_are_waiting_for_100_continue:
            conn.sendall(
                client.send(h11.InformationalResponse(status_code=100, headers=[])) or b""
            )
        # The body, until it ends or the server stops taking it (it may answer first).
        sent_all = True
        while True:
            event = _next(conn, client)
            if isinstance(event, h11.Data):
                try:
                    upstream.sendall(server.send(event) or b"")
                except OSError:
                    sent_all = False
                    break
            elif isinstance(event, h11.EndOfMessage):
                try:
                    upstream.sendall(server.send(h11.EndOfMessage(headers=event.headers)) or b"")
                except OSError:
                    sent_all = False
                break
            else:
                raise _Closed()
        # The answer, streamed back.
        while True:
            answer = _next(upstream, server)
            if isinstance(answer, h11.InformationalResponse):
                continue  # 100 Continue was the relay's to give
            if isinstance(answer, h11.Response):
                kept = [(n, v) for n, v in answer.headers if n.lower() not in _HOP]
                conn.sendall(
                    client.send(
                        h11.Response(
                            status_code=answer.status_code, headers=kept, reason=answer.reason
                        )
                    )
                    or b""
                )
            elif isinstance(answer, h11.Data):
                conn.sendall(client.send(answer) or b"")
            elif isinstance(answer, h11.EndOfMessage):
                conn.sendall(client.send(h11.EndOfMessage()) or b"")
                return sent_all
            else:
                raise _Closed()


def _next(sock: socket.socket, conn: h11.Connection) -> object:
    """The next h11 event of `conn`, reading from `sock` as it needs."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            try:
                data = sock.recv(CHUNK)
            except TimeoutError as exc:
                raise _Closed() from exc
            conn.receive_data(data)
            continue
        if event is h11.PAUSED:
            raise _Closed()
        return event


def _answer(
    conn: socket.socket, client: h11.Connection, status: int, code: str, message: str
) -> None:
    if client.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    response, body = _error(status, code, message)
    with contextlib.suppress(OSError, h11.LocalProtocolError):
        conn.sendall(client.send(response) or b"")
        conn.sendall(client.send(h11.Data(data=body)) or b"")
        conn.sendall(client.send(h11.EndOfMessage()) or b"")
