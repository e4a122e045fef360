"""Slow and idle clients against a live server, from raw sockets (issue 25).

Before: a connection whose headers never ended (or came a byte every few seconds) was
held for good, a header had no size limit (one 200 MiB header held the event loop for
over 30 s), and a body sent one byte short of its Content-Length was buffered and
waited for forever - 40 of them held 160 MiB, unauthenticated. Each test here is the
attack; the server under test has short deadlines (seconds, not the default 20) and a
small budget for bodies, so the tests are quick, and every wait is a poll with a
generous deadline: nothing here asserts how long anything took.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.harness import DockyardServer, run_cli

HEADER_TIMEOUT = 3
BODY_TIMEOUT = 6
MIN_RATE = 1024
BUDGET_MIB = 16
MIB = 1024 * 1024
# Far longer than any deadline above, on a loaded machine.
PATIENCE = 90
API_HEAD = (
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-amz-json-1.1\r\n"
    b"X-Amz-Target: SageMaker.ListTrainingJobs\r\n"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    running = DockyardServer(tmp_path_factory.mktemp("slow") / "data")
    running.extra_env = {
        "DOCKYARD_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "DOCKYARD_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "DOCKYARD_BODY_MIN_RATE_BYTES": str(MIN_RATE),
        "DOCKYARD_BODY_BUDGET_MIB": str(BUDGET_MIB),
    }
    running.start()
    yield running
    running.stop()


def connect(server: DockyardServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=PATIENCE)


def until_closed(sock: socket.socket, trickle: bytes = b"") -> bytes:
    """Everything the server sends until it closes the connection (sending `trickle`
    every half second until then, as a slow client would); fails if it never does."""
    got = b""
    deadline = time.monotonic() + PATIENCE
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if trickle and not got:
                try:
                    sock.sendall(trickle)
                except OSError:
                    trickle = b""  # closed: the next read says so
            continue
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk
    raise AssertionError(f"the server kept the connection open; it sent {got[:200]!r}")


def status_and_error(answer: bytes) -> tuple[int, str, str]:
    """(status, error code, message) of an answer with an AWS error body, JSON or XML."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if body.startswith(b"{"):
        error = json.loads(body)
        return status, error["__type"], error["message"]
    text = body.decode()
    code = text.split("<Code>", 1)[1].split("</Code>", 1)[0]
    message = text.split("<Message>", 1)[1].split("</Message>", 1)[0]
    return status, code, message


def healthy(server: DockyardServer) -> bool:
    with urllib.request.urlopen(server.endpoint + "/healthz", timeout=30) as response:
        return bool(response.status == 200)


@pytest.mark.parametrize("trickle", [b"", b"a"], ids=["stalled", "a-byte-at-a-time"])
def test_headers_that_never_end_are_answered_and_closed(
    server: DockyardServer, trickle: bytes
) -> None:
    """A byte every half second used to keep such a connection for good (uvicorn's only
    timer, keep-alive's, stops at any byte)."""
    sock = connect(server)
    sock.sendall(
        b"POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: SageMaker.ListTrainingJobs\r\nX-a: "
    )
    answer = until_closed(sock, trickle)
    status, code, message = status_and_error(answer)
    assert (status, code) == (408, "RequestTimeout")
    assert "headers were not received" in message
    assert healthy(server)


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(
    server: DockyardServer,
) -> None:
    assert until_closed(connect(server)) == b""


def test_a_kept_alive_connection_has_the_same_deadline_for_its_next_request(
    server: DockyardServer,
) -> None:
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ")
    status, code, _ = status_and_error(until_closed(sock, b"a"))
    assert (status, code) == (408, "RequestTimeout")


def test_headers_over_the_limit_are_refused_at_once(server: DockyardServer) -> None:
    """httptools keeps an unfinished header whole, growing it by copying: 200 MiB of one
    header held the event loop for over 30 s."""
    sock = connect(server)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-a: ")
    sent = 0
    try:
        while sent < 256 * MIB:
            sock.sendall(b"a" * MIB)
            sent += MIB
    except OSError:
        pass  # closed while we still sent
    assert sent < 256 * MIB
    answer = until_closed(sock)
    if answer:  # unless the reset came first and took the answer with it
        status, code, _ = status_and_error(answer)
        assert (status, code) == (431, "RequestHeaderSectionTooLarge")
    assert healthy(server)


def held(server: DockyardServer) -> int:
    """The bytes of request bodies the server holds, as its /metrics say."""
    with urllib.request.urlopen(server.endpoint + "/metrics", timeout=30) as response:
        text = response.read().decode()
    line = next(line for line in text.splitlines() if line.startswith("dockyard_request_body"))
    return int(float(line.split()[-1]))


def until_held(server: DockyardServer, size: int) -> None:
    deadline = time.monotonic() + PATIENCE
    while held(server) != size:
        assert time.monotonic() < deadline, f"the server holds {held(server)} bytes, not {size}"
        time.sleep(0.1)


def test_a_body_that_stops_is_refused_and_what_it_held_given_back(
    server: DockyardServer,
) -> None:
    """Bodies sent a byte short of their Content-Length, unauthenticated: they fill the
    server's budget for bodies (a request beyond it is answered 503), are answered 408
    once they stop coming, and what they held is given back."""
    stalled = []
    for _ in range(BUDGET_MIB // 4):
        sock = connect(server)
        sock.sendall(API_HEAD + b"Content-Length: %d\r\n\r\n" % (4 * MIB))
        sock.sendall(b"{" * (4 * MIB - 1))
        stalled.append(sock)
    until_held(server, BUDGET_MIB // 4 * (4 * MIB - 1))

    def another() -> tuple[int, str, str]:
        # A small body, read whole before it is refused (a refusal with unread bytes
        # resets the connection, and can take the answer with it).
        sock = connect(server)
        sock.sendall(API_HEAD + b"Content-Length: 100\r\n\r\n" + b" " * 100)
        return status_and_error(until_closed(sock))

    status, code, message = another()
    assert (status, code) == (503, "ServiceUnavailable"), message
    assert "too many request bodies" in message
    for sock in stalled:
        status, code, message = status_and_error(until_closed(sock))
        assert (status, code) == (408, "RequestTimeout")
        assert "body did not arrive in time" in message
    until_held(server, 0)
    # The same request is read again now, and answered by the API (unsigned: a 4xx).
    status, code, _ = another()
    assert status != 503 and code != "RequestTimeout"
    assert 400 <= status < 500


def test_a_body_trickled_below_the_minimum_rate_is_refused(server: DockyardServer) -> None:
    sock = connect(server)
    sock.sendall(API_HEAD + b"Content-Length: 1000000\r\n\r\n")
    status, code, _ = status_and_error(until_closed(sock, b"{" * 100))
    assert (status, code) == (408, "RequestTimeout")


def test_a_slow_body_above_the_minimum_rate_is_served(server: DockyardServer) -> None:
    size = 48 * 1024
    sock = connect(server)
    sock.sendall(API_HEAD + b"Content-Length: %d\r\n\r\n" % size)
    sent = 0
    while sent < size:  # 8 KiB a second: eight times the minimum
        sock.sendall(b" " * 4096)
        sent += 4096
        time.sleep(0.5)
    status, code, _ = status_and_error(until_closed(sock))
    assert code != "RequestTimeout"
    # Unsigned: the API's own answer, once the body is in.
    assert 400 <= status < 500


def test_an_s3_upload_that_stops_is_refused_in_s3s_words(server: DockyardServer) -> None:
    s3 = server.client("s3")
    s3.create_bucket(Bucket="stops")
    request = AWSRequest(
        method="PUT",
        url=f"{server.endpoint}/stops/part.bin",
        headers={"Content-Length": str(MIB), "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"},
    )
    S3SigV4Auth(Credentials(*server.credentials()), "s3", "us-east-1").add_auth(request)
    head = [b"PUT /stops/part.bin HTTP/1.1", b"Host: 127.0.0.1:%d" % server.port]
    head += [f"{name}: {value}".encode() for name, value in request.headers.items()]
    sock = connect(server)
    sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + b"x" * (100 * 1024))
    status, code, _ = status_and_error(until_closed(sock))
    assert (status, code) == (408, "RequestTimeout")
    assert "Contents" not in s3.list_objects_v2(Bucket="stops")


def test_big_s3_uploads_and_normal_clients_are_unaffected(
    server: DockyardServer, tmp_path: Path
) -> None:
    """Uploads are streamed to the gateway, outside the bodies' budget: one of more than
    the whole budget, and a multipart one, go through at full speed."""
    assert server.client().list_training_jobs()["TrainingJobSummaries"] == []
    s3 = server.client("s3")
    s3.create_bucket(Bucket="big")
    whole = bytes(range(256)) * (24 * MIB // 256)
    s3.put_object(Bucket="big", Key="whole.bin", Body=whole)
    assert s3.get_object(Bucket="big", Key="whole.bin")["Body"].read() == whole
    big = tmp_path / "big.bin"
    big.write_bytes(whole * 3)
    config = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)
    s3.upload_file(str(big), "big", "parts.bin", Config=config)
    assert s3.head_object(Bucket="big", Key="parts.bin")["ContentLength"] == 72 * MIB


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--header-timeout", "0", "header_timeout_seconds must be at least 1 (got 0)"),
        ("--body-budget-mib", "4", "body_budget_mib must be at least 8 (got 4)"),
    ],
)
def test_limits_that_cannot_work_stop_the_server_at_start(
    tmp_path: Path, flag: str, value: str, said: str
) -> None:
    started = run_cli("serve", flag, value, data_dir=tmp_path / "data", check=False)
    assert started.returncode != 0
    assert said in started.stdout + started.stderr
