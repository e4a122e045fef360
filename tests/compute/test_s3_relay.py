"""A node's S3 relay (`agent.s3_relay`) in front of a real HTTP server standing for
dockyard's endpoint: S3 requests pass unchanged (their signatures still hold), anything
else is refused before a byte of it is sent on."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dockyard.compute.agent.s3_relay import S3Relay, refusal

S3_AUTH = (
    b"AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20261202/us-east-1/s3/aws4_request, "
    b"SignedHeaders=host;x-amz-date, Signature=00"
)
API_AUTH = S3_AUTH.replace(b"/s3/", b"/sagemaker/")
# A byte the relay's old (bytes) pattern took for part of a key id, the server's (text)
# for a space.
OBS_TEXT_AUTH = S3_AUTH.replace(b"AKIAEXAMPLE", b"AKIA\xa0EXAMPLE")


class Upstream(ThreadingHTTPServer):
    """Records each request it gets; answers 200 with the body it read."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Upstream

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.seen.append(
            {"method": self.command, "path": self.path, "headers": headers, "body": body}
        )
        answer = b"echo:" + body
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _serve


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def relay(upstream: Upstream) -> Iterator[S3Relay]:
    opened = S3Relay.open(None, ("127.0.0.1", upstream.server_address[1]))
    yield opened
    opened.close()


def raw(relay: S3Relay, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", relay.port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def head(method: str, path: str, auth: bytes = S3_AUTH, extra: str = "") -> bytes:
    return (
        (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-Amz-Date: 20261202T000000Z\r\n"
            f"{extra}Authorization: "
        ).encode()
        + auth
        + b"\r\n"
    )


@pytest.mark.parametrize(
    ("method", "target", "headers", "why"),
    [
        (b"GET", b"/", [(b"authorization", S3_AUTH)], None),
        (b"PUT", b"/my-data/a/b.txt", [(b"authorization", S3_AUTH)], None),
        (b"GET", b"/my-data?list-type=2", [(b"authorization", S3_AUTH)], None),
        (
            b"GET",
            b"/my-data/k?X-Amz-Credential=AKIA%2F20261202%2Fus-east-1%2Fs3%2Faws4_request",
            [],
            None,
        ),
        (b"POST", b"/", [(b"authorization", API_AUTH)], "only S3 requests are relayed"),
        (b"POST", b"/", [(b"authorization", S3_AUTH)], "only S3 requests are relayed"),
        (b"GET", b"/my-data", [(b"authorization", API_AUTH)], "signed for s3"),
        (b"GET", b"/_dockyard/clock", [(b"authorization", S3_AUTH)], "to / or a bucket"),
        (b"GET", b"/%5Fdockyard/clock", [(b"authorization", S3_AUTH)], "to / or a bucket"),
        (b"GET", b"//_dockyard/clock", [(b"authorization", S3_AUTH)], "to / or a bucket"),
        (b"GET", b"/UPPER/x", [(b"authorization", S3_AUTH)], "to / or a bucket"),
        (b"GET", b"http://127.0.0.1:8080/b", [(b"authorization", S3_AUTH)], "origin form"),
        (b"GET", b"/my-data", [], "not signed"),
        (b"GET", b"/my-data", [(b"authorization", b"Basic Zm9vOmJhcg==")], "not a SigV4"),
        # Whatever the server reads the credential from, it is for s3.
        (
            b"GET",
            b"/my-data",
            [(b"authorization", S3_AUTH), (b"authorization", API_AUTH)],
            "signed for s3",
        ),
        (
            b"GET",
            b"/my-data?X-Amz-Credential=AKIA%2Fd%2Fr%2Fsagemaker%2Faws4_request",
            [(b"authorization", S3_AUTH)],
            "signed for s3",
        ),
        (
            b"GET",
            b"/my-data",
            [(b"authorization", S3_AUTH), (b"upgrade", b"websocket")],
            "upgrades",
        ),
        # Dot segments name another bucket once a reader removes them (issue 25, B1).
        (b"GET", b"/my-data/../other/k", [(b"authorization", S3_AUTH)], "'..' segment"),
        (b"GET", b"/my-data/%2e%2E/other/k", [(b"authorization", S3_AUTH)], "'..' segment"),
        (b"GET", b"/my-data/..%2Fother/k", [(b"authorization", S3_AUTH)], "'..' segment"),
        (b"GET", b"/my-data%2F.%2Fk", [(b"authorization", S3_AUTH)], "'.' segment"),
        (b"GET", b"/my-data/%252e%252e/k", [(b"authorization", S3_AUTH)], "segment"),
        (b"GET", b"/my-data/a%zz", [(b"authorization", S3_AUTH)], "percent-escape"),
        (b"GET", b"/my-data/a%00", [(b"authorization", S3_AUTH)], "control character"),
        (b"GET", b"/my-data/k#/../../x", [(b"authorization", S3_AUTH)], "#fragment"),
        (b"GET", b"/my-data/a..b/.hidden/x.y/...", [(b"authorization", S3_AUTH)], None),
        # Signed for s3 as the relay read it, not as the server reads it: the server
        # served such a request as its metrics, health or console page.
        (
            b"GET",
            b"/metrics?X-Amz-Credential=AKIA%2Fd%2Fr%2Fs3%2Fnot-aws4",
            [],
            "not a SigV4 credential",
        ),
        (
            b"GET",
            b"/healthz?x-amz-credential=AKIA%2Fd%2Fr%2Fs3%2Faws4_request",
            [],
            "not signed",
        ),
        (b"GET", b"/console/signin", [(b"authorization", OBS_TEXT_AUTH)], "not a SigV4"),
    ],
)
def test_what_passes(
    method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], why: str | None
) -> None:
    found = refusal(method, target, headers)
    assert (found is None) if why is None else (found is not None and why in found), found


def test_an_s3_request_passes_unchanged(upstream: Upstream, relay: S3Relay) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=30)
    headers = {
        "Host": "127.0.0.1:9",
        "X-Amz-Date": "20261202T000000Z",
        "Authorization": S3_AUTH.decode(),
        "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
    }
    # Two requests on one kept-alive connection, each checked and passed on.
    for body in (b"first object", b"second"):
        connection.request("PUT", "/my-data/key.txt", body=body, headers=headers)
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"echo:" + body)
    connection.request("HEAD", "/my-data/key.txt", headers=headers)
    response = connection.getresponse()
    assert response.status == 200 and response.read() == b""
    connection.close()
    assert [s["body"] for s in upstream.seen] == [b"first object", b"second", b""]
    sent = upstream.seen[0]["headers"]
    # What the client signed reaches the server as it was (its Host, its signature).
    assert sent["host"] == "127.0.0.1:9" and sent["authorization"] == S3_AUTH.decode()
    assert sent["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"


def test_a_chunked_body_and_expect_continue(upstream: Upstream, relay: S3Relay) -> None:
    request = head(
        "PUT", "/my-data/streamed", extra="Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
    )
    answer = raw(relay, request + b"\r\n" + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 100 ")
    assert b"HTTP/1.1 200 " in answer and answer.endswith(b"echo:hello world")
    assert upstream.seen[0]["body"] == b"hello world"
    assert "expect" not in upstream.seen[0]["headers"]  # the relay gave the 100 itself


def test_a_refused_request_is_never_sent_on(upstream: Upstream, relay: S3Relay) -> None:
    allowed = head("GET", "/my-data") + b"\r\n"
    smuggled = head("POST", "/", auth=API_AUTH, extra="Content-Length: 2\r\n") + b"\r\n{}"
    answer = raw(relay, allowed + smuggled + allowed)
    assert answer.count(b"HTTP/1.1 200 ") == 1 and b"HTTP/1.1 403 Forbidden" in answer
    assert b"<Code>AccessDenied</Code>" in answer and b"only S3 requests" in answer
    # Only the first reached the server; the connection ended at the refusal.
    assert [(s["method"], s["path"]) for s in upstream.seen] == [("GET", "/my-data")]
    garbage = raw(relay, b"NOT HTTP AT ALL\r\n\r\n")
    assert garbage.startswith(b"HTTP/1.1 400 ") and upstream.seen[1:] == []


def test_a_server_that_is_down_is_a_503(upstream: Upstream) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    relay = S3Relay.open(None, ("127.0.0.1", closed_port))
    try:
        answer = raw(relay, head("GET", "/my-data") + b"\r\n")
    finally:
        relay.close()
    assert answer.startswith(b"HTTP/1.1 503 ") and b"ServiceUnavailable" in answer
    # Closed: nothing listens any more.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", relay.port), timeout=5).close()


# Pieces of request targets, credentials and headers, for the relay and the server to
# read: whatever the relay passes, the server reads as an S3 request to the same bucket.
TARGET_PIECES = [
    "/",
    "my-data",
    "b",
    ".",
    "..",
    "%2e",
    "%2E",
    "%2f",
    "%2F",
    "%25",
    "%5c",
    "\\",
    ";",
    "?",
    "&",
    "=",
    "#",
    "%",
    "_dockyard",
    "metrics",
    "console",
    "X-Amz-Credential=",
    "x-amz-credential=",
    "AKIA%2Fd%2Fr%2Fs3%2Faws4_request",
    "AKIA%2Fd%2Fr%2Fs3%2Fx",
]
AUTHORIZATIONS = [S3_AUTH, API_AUTH, OBS_TEXT_AUTH, b"Basic Zm9vOmJhcg==", S3_AUTH + b"\xa0"]


@settings(max_examples=400, deadline=None)
@given(
    method=st.sampled_from([b"GET", b"PUT", b"POST", b"DELETE", b"HEAD", b"post"]),
    pieces=st.lists(st.sampled_from(TARGET_PIECES), max_size=8),
    authorizations=st.lists(st.sampled_from(AUTHORIZATIONS), max_size=2),
)
def test_what_the_relay_passes_the_server_serves_as_s3(
    method: bytes, pieces: list[str], authorizations: list[bytes]
) -> None:
    import posixpath
    from urllib.parse import unquote

    from starlette.requests import Request

    from dockyard.api.s3 import is_s3
    from dockyard.domain import s3_addressing as addressing

    target = ("/" + "".join(pieces)).encode()
    headers = [(b"authorization", value) for value in authorizations]
    if refusal(method, target, headers) is not None:
        return
    # As uvicorn hands the request to the app: the path before `?`, headers as sent.
    raw_path, _, query = target.decode().partition("?")
    scope = {
        "type": "http",
        "method": method.decode(),
        "path": unquote(raw_path),
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "headers": headers,
    }
    assert is_s3(Request(scope)), target
    # Never the API (POST /), nor an operator route; the bucket the front door checks
    # is the one any reader finds, dot segments removed or not, before or after decoding.
    address = addressing.parse(raw_path, query)
    assert address.bucket or method.upper() != b"POST", target
    assert not scope["path"].startswith("/_"), target
    for reading in (raw_path, unquote(raw_path)):
        first = posixpath.normpath(reading).lstrip("/").partition("/")[0]
        assert first == address.bucket, (target, reading)
