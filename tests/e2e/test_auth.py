"""Identity: every request is SigV4-verified; the failures answer AWS's codes."""

from __future__ import annotations

import datetime as dt

import pytest
from botocore.exceptions import ClientError

from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer, run_cli, signed_post

TARGET = "SageMaker.ListTrainingJobs"


def test_valid_signature_passes(server: DockyardServer) -> None:
    status, body = signed_post(server, TARGET, b"{}")
    assert status == 200 and isinstance(body["TrainingJobSummaries"], list)


def test_unknown_access_key(server: DockyardServer) -> None:
    status, error = signed_post(server, TARGET, b"{}", key=("AKIANOTAREALKEY00000", "whatever"))
    assert (status, error["__type"]) == (403, "UnrecognizedClientException")


def test_wrong_secret(server: DockyardServer) -> None:
    access_key, _ = server.credentials()
    status, error = signed_post(server, TARGET, b"{}", key=(access_key, "x" * 40))
    assert (status, error["__type"]) == (403, "InvalidSignatureException")
    assert "signature we calculated does not match" in error["message"]


def test_body_changed_after_signing(server: DockyardServer) -> None:
    status, error = signed_post(server, TARGET, b'{"MaxResults": 5}', tamper=b'{"MaxResults": 6}')
    assert (status, error["__type"]) == (403, "InvalidSignatureException")


@pytest.mark.parametrize("minutes", [-20, 20])
def test_stale_or_future_date(server: DockyardServer, minutes: int) -> None:
    when = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(minutes=minutes)
    status, error = signed_post(server, TARGET, b"{}", signed_at=when)
    assert (status, error["__type"]) == (403, "InvalidSignatureException")
    assert (
        "Signature expired" in error["message"] or "Signature not yet current" in error["message"]
    )


def test_small_skew_is_tolerated(server: DockyardServer) -> None:
    when = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=4)
    status, _ = signed_post(server, TARGET, b"{}", signed_at=when)
    assert status == 200


def test_missing_authentication(server: DockyardServer) -> None:
    status, error = signed_post(server, TARGET, b"{}", sign=False)
    assert (status, error["__type"]) == (403, "MissingAuthenticationTokenException")


def test_credentials_scoped_to_another_service(server: DockyardServer) -> None:
    status, error = signed_post(server, TARGET, b"{}", service="s3")
    assert (status, error["__type"]) == (403, "InvalidSignatureException")
    assert "'sagemaker'" in error["message"]


def test_boto3_sees_auth_errors_as_client_errors(server: DockyardServer) -> None:
    client = server.client(key=("AKIANOTAREALKEY00000", "nope"))
    with pytest.raises(ClientError) as excinfo:
        client.list_training_jobs()
    assert excinfo.value.response["Error"]["Code"] == "UnrecognizedClientException"


def test_secret_is_not_stored_in_clear(server: DockyardServer) -> None:
    _, secret = server.credentials()
    for path in server.data_dir.glob("dockyard.db*"):
        assert secret.encode() not in path.read_bytes(), path
    assert oct((server.data_dir / "credentials").stat().st_mode & 0o777) == "0o600"
    # Printed once in the start-up banner for the person who ran `make run`, never in a log line.
    lines = [line for line in server.log_path.read_text().splitlines() if secret in line]
    assert len(lines) == 1 and "aws_secret_access_key" in lines[0]


def test_target_and_content_type_must_be_signed(server: DockyardServer) -> None:
    # A captured signed request replayed as another operation: a signature that did not
    # cover X-Amz-Target (or Content-Type) must not delete anything.
    client = server.client()
    client.create_training_job(**job_request("replayed-1", "print('done')"))
    wait_for(client, "replayed-1", {"Completed", "Failed"})
    body = b'{"TrainingJobName": "replayed-1"}'
    for unsigned in (
        {"X-Amz-Target": "SageMaker.DeleteTrainingJob"},
        {"Content-Type": "application/x-amz-json-1.1"},
    ):
        status, error = signed_post(server, "SageMaker.DeleteTrainingJob", body, unsigned=unsigned)
        assert (status, error["__type"]) == (400, "IncompleteSignatureException")
        assert next(iter(unsigned)).lower() in error["message"]
    assert client.describe_training_job(TrainingJobName="replayed-1")["TrainingJobName"]


def _status_line(server: DockyardServer, head: bytes, body_start: bytes) -> bytes:
    """Send a request's head and only the start of its body, then read the answer: a
    server that waited for the whole (never sent) body would time out here."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(head + body_start)
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    return answer


def test_an_oversized_body_is_refused_before_it_is_read(server: DockyardServer) -> None:
    # Issue 12: a 1 GiB unauthenticated POST was read whole (2.1 GB of server memory)
    # before its 413. By Content-Length: refused with nothing of the body read.
    head = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Amz-Target: SageMaker.ListTrainingJobs\r\n"
        b"Content-Type: application/x-amz-json-1.1\r\nContent-Length: 1073741824\r\n\r\n"
    )
    answer = _status_line(server, head, b"{")
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"connection: close" in answer.lower()
    # Chunked, with no length: read up to the limit (4 MiB) and no further.
    head = head.replace(b"Content-Length: 1073741824", b"Transfer-Encoding: chunked")
    chunk = b"x" * (1 << 20)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))
    answer = _status_line(server, head, body)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    # And the server goes on answering.
    assert server.client().list_training_jobs()["TrainingJobSummaries"] is not None


def test_a_disabled_or_deleted_key_stops_working_at_once(server: DockyardServer) -> None:
    """`dockyard keys disable|enable|delete` on the database, with the server running:
    the key stops (and starts) working at its next request, though the server had it
    cached - for the API, S3 and a console session signed in with it."""
    import httpx

    account_id, key = server.new_account("revoked")
    api = server.client(key=key)
    s3 = server.client("s3", key=key)
    # Each is used first, so the server has the key in its caches.
    assert api.list_training_jobs()["TrainingJobSummaries"] == []
    s3.create_bucket(Bucket="revoked-keys-bucket")
    console = httpx.Client(base_url=server.endpoint, timeout=60)
    form = {"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]}
    assert console.post("/console/signin", data=form).status_code == 303
    assert console.get("/console/jobs").status_code == 200

    done = run_cli("keys", "disable", key[0], data_dir=server.data_dir)
    assert "disabled" in done.stdout
    listed = run_cli("keys", "ls", "--account", account_id, data_dir=server.data_dir).stdout
    assert key[0] in listed and "Inactive" in listed

    def refused_everywhere() -> None:
        with pytest.raises(ClientError) as excinfo:
            api.list_training_jobs()
        assert excinfo.value.response["Error"]["Code"] == "UnrecognizedClientException"
        with pytest.raises(ClientError) as excinfo:
            s3.list_objects_v2(Bucket="revoked-keys-bucket")
        assert excinfo.value.response["Error"]["Code"] == "InvalidAccessKeyId"
        signed_out = console.get("/console/jobs")
        assert (
            signed_out.status_code == 303 and "/console/signin" in signed_out.headers["location"]
        )

    refused_everywhere()
    again = httpx.Client(base_url=server.endpoint, timeout=60).post("/console/signin", data=form)
    assert again.status_code == 403 and "disabled" in again.text

    assert "enabled" in run_cli("keys", "enable", key[0], data_dir=server.data_dir).stdout
    assert api.list_training_jobs()["TrainingJobSummaries"] == []
    assert s3.list_objects_v2(Bucket="revoked-keys-bucket")["Name"] == "revoked-keys-bucket"
    assert console.post("/console/signin", data=form).status_code == 303
    assert console.get("/console/jobs").status_code == 200

    assert "deleted" in run_cli("keys", "delete", key[0], data_dir=server.data_dir).stdout
    refused_everywhere()
    listed = run_cli("keys", "ls", "--account", account_id, data_dir=server.data_dir).stdout
    assert key[0] not in listed
    # A deleted key is gone for good.
    back = run_cli("keys", "enable", key[0], data_dir=server.data_dir, check=False)
    assert back.returncode != 0 and key[0] in back.stderr
