"""One tenant's load and mistakes stay its own (issue 25, second round): each attack of
the red team's, run for real against a live server - node commands that once held every
thread, a replay ledger one tenant could fill for everyone - and the S3 front door's
edges (presigned lifetimes, a GET with a body, a bucket that an aborted upload left
"not empty")."""

from __future__ import annotations

import base64
import datetime as dt
import socket
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import requests
from botocore.exceptions import ClientError

from dockyard.api.cluster_exec import MAX_RUNNING_PER_ACCOUNT
from tests.e2e.test_cluster_exec import post, send_exec, signed_exec
from tests.e2e.test_clusters import group, wait_cluster, wait_nodes
from tests.harness import DockyardServer

ON_CREATE = b"#!/bin/sh\necho ready > /opt/ml/marker.txt\n"
# Runs until the test makes /opt/ml/go on the node.
HOLD = ["sh", "-c", "while [ ! -e /opt/ml/go ]; do sleep 0.1; done; echo released"]


def tenant(server: DockyardServer, name: str) -> tuple[tuple[str, str], str]:
    """A new account with a one-node cluster of its own (its lifecycle script in a bucket
    of its own): its key and the node's instance id."""
    account_id, key = server.new_account(name)
    bucket = f"lifecycle-{account_id}"
    server.own_bucket(bucket, key=key)
    server.client("s3", key=key).put_object(Bucket=bucket, Key="on_create.sh", Body=ON_CREATE)
    client = server.client(key=key)
    workers = group("workers", 1)
    workers["LifeCycleConfig"]["SourceS3Uri"] = f"s3://{bucket}"
    client.create_cluster(ClusterName=f"{name}-cluster", InstanceGroups=[workers])
    wait_cluster(server, client, f"{name}-cluster", "InService")
    [node] = wait_nodes(server, client, f"{name}-cluster", ["Running"])
    return key, str(node["InstanceId"])


def node_tree(server: DockyardServer, node: str) -> Path:
    return next((server.data_dir / "instances").glob(f"*-{node}/{node}")) / "opt" / "ml"


def command(cluster: str, node: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return {"ClusterName": cluster, "NodeId": node, "Command": argv, **extra}


def output(answer: dict[str, Any]) -> str:
    return base64.b64decode(answer["Output"]).decode()


# -- node commands ------------------------------------------------------------------------


def test_one_tenants_long_commands_never_hold_up_anothers(manual_server: DockyardServer) -> None:
    """Issue 25: sixteen `sleep 40` on one account's own node held every exec thread,
    and another account's `echo` on its own node waited 38 s. Two accounts now each run
    as many commands as they may (the rest refused, 429), all of them still running -
    as many as there were threads - and a third account's `echo` answers meanwhile."""
    server = manual_server
    victim_key, victim_node = tenant(server, "victim")
    attackers = [tenant(server, name) for name in ("attacker", "accomplice")]
    tries = MAX_RUNNING_PER_ACCOUNT + 4
    answers: list[tuple[int, dict[str, Any]]] = []

    def hold(key: tuple[str, str], cluster: str, node: str) -> None:
        body = command(cluster, node, HOLD, TimeoutSeconds=900)
        answers.append(post(server, body, key=key))

    threads = [
        threading.Thread(target=hold, args=(key, f"{name}-cluster", node))
        for name, (key, node) in zip(("attacker", "accomplice"), attackers, strict=True)
        for _ in range(tries)
    ]
    for thread in threads:
        thread.start()
    try:
        # What one account may not run more of is refused at once...
        deadline = time.monotonic() + 120
        while len(answers) < 2 * (tries - MAX_RUNNING_PER_ACCOUNT):
            assert time.monotonic() < deadline, answers
            time.sleep(0.1)
        for status, answer in answers:
            assert (status, answer["__type"]) == (429, "ThrottlingException"), answer
            assert "at once" in answer["message"]
        # ... and with every command the two may run still running, the victim's runs.
        status, answer = post(
            server, command("victim-cluster", victim_node, ["echo", "victim here"]), key=victim_key
        )
        assert status == 200 and output(answer) == "victim here\n", answer
        assert len(answers) == 2 * (tries - MAX_RUNNING_PER_ACCOUNT)
    finally:
        for _, node in attackers:
            (node_tree(server, node) / "go").touch()
        for thread in threads:
            thread.join(timeout=120)
    ran = [answer for status, answer in answers if status == 200]
    assert len(ran) == 2 * MAX_RUNNING_PER_ACCOUNT
    assert all(output(answer) == "released\n" for answer in ran)
    # Their commands over, the attackers may run more.
    key, node = attackers[0]
    status, answer = post(server, command("attacker-cluster", node, ["true"]), key=key)
    assert status == 200 and answer["ExitCode"] == 0, answer


def signed_at(server: DockyardServer, when: dt.datetime, body: Any, key: tuple[str, str]) -> Any:
    """An exec request signed as the CLI signs it, but at `when` (a client's clock)."""
    naive = when.astimezone(dt.UTC).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=naive):
        return signed_exec(server, body, key)


def test_requests_that_fail_fill_no_ledger(manual_server: DockyardServer) -> None:
    """Issue 25: 49,100 exec requests that failed validation (`{}`), signed 14 minutes
    ahead, filled the 50,000 signatures every account shared in 39 s, and every account
    was refused exec and shell for half an hour. Now a request that fails is not
    recorded (sent again, it fails the same way, never "already used"), a signature
    more than 5 minutes from the server's time is refused, and each key has a ledger of
    its own (tests/api/test_replays.py)."""
    server = manual_server
    victim_key, victim_node = tenant(server, "victim")
    attacker_key, attacker_node = tenant(server, "attacker")
    now = dt.datetime.now(dt.UTC)
    failing = signed_exec(server, {}, attacker_key)
    for _ in range(3):
        status, answer = send_exec(server, *failing)
        assert (status, answer["__type"]) == (400, "ValidationException"), answer
    # Someone else's node, or none at all: not found, each time, and nothing is spent.
    elsewhere = signed_exec(server, command("victim-cluster", victim_node, ["id"]), attacker_key)
    for _ in range(2):
        status, answer = send_exec(server, *elsewhere)
        assert (status, answer["__type"]) == (400, "ResourceNotFound"), answer
    # Dated 14 minutes ahead, as the attack's were: refused before anything is read.
    ahead = signed_at(server, now + dt.timedelta(minutes=14), {}, attacker_key)
    status, answer = send_exec(server, *ahead)
    assert (status, answer["__type"]) == (403, "InvalidSignatureException"), answer
    assert "Signature not yet current" in answer["message"] and "5 min" in answer["message"]
    late = signed_at(
        server,
        now - dt.timedelta(minutes=7),
        command("attacker-cluster", attacker_node, ["true"]),
        attacker_key,
    )
    status, answer = send_exec(server, *late)
    assert (status, answer["__type"]) == (403, "InvalidSignatureException"), answer
    assert "Signature expired" in answer["message"]
    # Within the window a request runs, once.
    soon = signed_at(
        server,
        now + dt.timedelta(minutes=3),
        command("attacker-cluster", attacker_node, ["echo", "once"]),
        attacker_key,
    )
    status, answer = send_exec(server, *soon)
    assert status == 200 and output(answer) == "once\n", answer
    status, answer = send_exec(server, *soon)
    assert (status, answer["__type"]) == (403, "InvalidSignatureException"), answer
    assert "already used" in answer["message"]
    status, answer = post(
        server, command("victim-cluster", victim_node, ["echo", "fine"]), key=victim_key
    )
    assert status == 200 and output(answer) == "fine\n", answer


# -- the S3 front door --------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    running = DockyardServer(tmp_path_factory.mktemp("isolation-s3") / "data").start()
    yield running
    running.stop()


def presign(server: DockyardServer, bucket: str, key: str, expires: int, ahead: float = 0) -> str:
    """A presigned GET, signed `ahead` seconds from now by the client's clock."""
    s3 = server.client("s3", signature_version="s3v4")
    when = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(seconds=ahead)
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        return str(
            s3.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
            )
        )


def s3_error(response: requests.Response) -> tuple[int, str, str]:
    from xml.etree import ElementTree

    root = ElementTree.fromstring(response.content)
    return response.status_code, str(root.findtext("Code")), str(root.findtext("Message"))


def test_a_presigned_url_lives_a_week_at_most(s3_server: DockyardServer) -> None:
    """Issue 25: a URL signed for ten years, or dated a year ahead (so good from now
    until a year and a week from now), was served. S3 caps X-Amz-Expires at a week and
    refuses a date in the future; so does dockyard, in S3's words."""
    server = s3_server
    server.own_bucket("presigned")
    server.client("s3").put_object(Bucket="presigned", Key="secret.txt", Body=b"secret")
    refused = s3_error(requests.get(presign(server, "presigned", "secret.txt", 10 * 365 * 86400)))
    assert refused == (
        400,
        "AuthorizationQueryParametersError",
        "X-Amz-Expires must be less than a week (in seconds); that is, the given "
        "X-Amz-Expires must be less than 604800 seconds",
    )
    url = presign(server, "presigned", "secret.txt", 604800, ahead=365 * 86400)
    assert s3_error(requests.get(url)) == (403, "AccessDenied", "Request is not yet valid")
    # A week, and a client clock a minute fast (within the allowed skew), are fine.
    for expires, ahead in ((604800, 0), (60, 60)):
        served = requests.get(presign(server, "presigned", "secret.txt", expires, ahead))
        assert (served.status_code, served.content) == (200, b"secret")
    # Expired (as the gateway said already), and lifetimes that are not numbers.
    old = presign(server, "presigned", "secret.txt", 60, ahead=-3600)
    assert s3_error(requests.get(old)) == (403, "AccessDenied", "Request has expired")
    for wrong, words in (("abc", "should be a number"), ("-5", "must be non-negative")):
        url = presign(server, "presigned", "secret.txt", 60).replace(
            "X-Amz-Expires=60", f"X-Amz-Expires={wrong}"
        )
        status, code, message = s3_error(requests.get(url))
        assert (status, code) == (400, "AuthorizationQueryParametersError") and words in message


def raw_request(server: DockyardServer, data: bytes) -> bytes:
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        connection.sendall(data)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    finally:
        connection.close()
    return answer


def test_a_request_with_a_body_it_cannot_have_is_refused(s3_server: DockyardServer) -> None:
    """Issue 25: a GET with a Content-Length and a body made the front door forward the
    length without the body; h11 raised and the client got a 500. A body on a method
    that takes none is a 400 with an S3 error (and the connection is closed: the body
    was never read)."""
    server = s3_server
    server.own_bucket("bodies")
    key_id = server.credentials()[0]
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={key_id}/20261203/us-east-1/s3/aws4_request, "
        f"SignedHeaders=host, Signature={'0' * 64}"
    )
    for method, extra in (
        ("GET", "Content-Length: 5\r\n"),
        ("DELETE", "Content-Length: 5\r\n"),
        ("HEAD", "Content-Length: 5\r\n"),
        ("GET", "Transfer-Encoding: chunked\r\n"),
    ):
        body = b"5\r\nhello\r\n0\r\n\r\n" if "chunked" in extra else b"hello"
        answer = raw_request(
            server,
            f"{method} /bodies/x HTTP/1.1\r\nHost: s3\r\nAuthorization: {authorization}\r\n"
            f"{extra}\r\n".encode()
            + body,
        )
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 400 "), answer[:300]
        assert b"connection: close" in head
        if method != "HEAD":
            assert b"<Code>InvalidRequest</Code>" in answer and b"carries no body" in answer
    assert b"Traceback" not in (server.data_dir / "server.log").read_bytes()
    # The same requests without a body are served as ever.
    s3 = server.client("s3")
    s3.put_object(Bucket="bodies", Key="x", Body=b"x")
    assert s3.get_object(Bucket="bodies", Key="x")["Body"].read() == b"x"


def test_a_bucket_without_objects_can_be_deleted(s3_server: DockyardServer) -> None:
    """Issue 25: a multipart upload started and aborted left its key's directory, and
    DeleteBucket said BucketNotEmpty of a bucket that lists no objects."""
    server = s3_server
    s3 = server.client("s3")
    s3.create_bucket(Bucket="aborted")
    upload = s3.create_multipart_upload(Bucket="aborted", Key="private/deep/data.bin")
    s3.upload_part(
        Bucket="aborted",
        Key="private/deep/data.bin",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"part" * 1000,
    )
    s3.abort_multipart_upload(
        Bucket="aborted", Key="private/deep/data.bin", UploadId=upload["UploadId"]
    )
    assert s3.list_objects_v2(Bucket="aborted").get("Contents", []) == []
    s3.delete_bucket(Bucket="aborted")
    with pytest.raises(ClientError) as gone:
        s3.head_bucket(Bucket="aborted")
    assert gone.value.response["Error"]["Code"] == "404"
    # A bucket with an object is not empty: it stays, and so does the object.
    s3.create_bucket(Bucket="kept")
    s3.put_object(Bucket="kept", Key="a/b/c.txt", Body=b"c")
    (server.data_dir / "s3" / "kept" / "a" / "empty").mkdir()
    with pytest.raises(ClientError) as refused:
        s3.delete_bucket(Bucket="kept")
    assert refused.value.response["Error"]["Code"] == "BucketNotEmpty"
    assert s3.get_object(Bucket="kept", Key="a/b/c.txt")["Body"].read() == b"c"
