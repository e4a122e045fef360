"""The embedded S3 service, through boto3 and the aws CLI, on dockyard's own endpoint:
buckets owned by accounts, objects, listings, ranges, copies, multipart, and the same
files the jobs read and write."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import io
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.harness import DockyardServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    running = DockyardServer(tmp_path_factory.mktemp("s3") / "data").start()
    yield running
    running.stop()


def code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def test_deep_keys_in_new_directories(server: DockyardServer) -> None:
    # The SDK v3 uploads its drivers as job/input/sm_drivers/...: objects in directories
    # that do not exist yet (rclone once hung here with its directory cache off).
    s3 = server.client("s3")
    s3.create_bucket(Bucket="deep-1")
    keys = [
        f"base/job-{i}/input/sm_drivers/scripts/{name}"
        for i in range(8)
        for name in ("__init__.py", "environment.py")
    ]
    for key in keys:
        s3.put_object(Bucket="deep-1", Key=key, Body=key.encode())
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket="deep-1")["Contents"]]
    assert sorted(listed) == sorted(keys)
    assert s3.get_object(Bucket="deep-1", Key=keys[-1])["Body"].read() == keys[-1].encode()


def test_buckets_objects_listings_ranges_and_copies(server: DockyardServer) -> None:
    s3 = server.client("s3")
    assert "dockyard-jobs" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.create_bucket(Bucket="objects-1")
    s3.head_bucket(Bucket="objects-1")
    for i in range(7):
        s3.put_object(Bucket="objects-1", Key=f"data/part-{i}.csv", Body=f"row {i}".encode())
    s3.put_object(Bucket="objects-1", Key="top.txt", Body=b"0123456789")
    got = s3.get_object(Bucket="objects-1", Key="top.txt", Range="bytes=2-5")
    assert got["Body"].read() == b"2345" and got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.head_object(Bucket="objects-1", Key="top.txt")["ContentLength"] == 10
    # Delimiters and pages, as the SDKs walk a prefix.
    top = s3.list_objects_v2(Bucket="objects-1", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["data/"]
    assert [o["Key"] for o in top["Contents"]] == ["top.txt"]
    keys, token = [], None
    while True:
        page = s3.list_objects_v2(
            Bucket="objects-1",
            Prefix="data/",
            MaxKeys=3,
            **({"ContinuationToken": token} if token else {}),
        )
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert keys == [f"data/part-{i}.csv" for i in range(7)]
    s3.copy_object(
        Bucket="objects-1", Key="copied.txt", CopySource={"Bucket": "objects-1", "Key": "top.txt"}
    )
    assert s3.get_object(Bucket="objects-1", Key="copied.txt")["Body"].read() == b"0123456789"
    s3.delete_object(Bucket="objects-1", Key="copied.txt")
    with pytest.raises(ClientError) as error:
        s3.get_object(Bucket="objects-1", Key="copied.txt")
    assert code(error) == "NoSuchKey"
    # The objects are files of the data dir's store, as the instance agents read them.
    assert (server.data_dir / "s3" / "objects-1" / "top.txt").read_bytes() == b"0123456789"


def test_a_200_mb_multipart_upload(server: DockyardServer, tmp_path: Path) -> None:
    s3 = server.client("s3")
    s3.create_bucket(Bucket="multipart-1")
    big = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with open(big, "wb") as out:
        for i in range(200):
            chunk = hashlib.sha256(str(i).encode()).digest() * (1024 * 1024 // 32)
            digest.update(chunk)
            out.write(chunk)
    config = TransferConfig(multipart_threshold=8 * 1024**2, multipart_chunksize=16 * 1024**2)
    s3.upload_file(str(big), "multipart-1", "big.bin", Config=config)
    head = s3.head_object(Bucket="multipart-1", Key="big.bin")
    assert head["ContentLength"] == 200 * 1024 * 1024
    back = tmp_path / "back.bin"
    s3.download_file("multipart-1", "big.bin", str(back), Config=config)
    check = hashlib.sha256()
    with open(back, "rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            check.update(block)
    assert check.hexdigest() == digest.hexdigest()


def test_the_aws_cli(server: DockyardServer, tmp_path: Path) -> None:
    env = {**server.aws_env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def aws(*args: str) -> str:
        if args[0] in ("cp", "rm", "mv", "sync"):
            args = (*args, "--only-show-errors")
        result = subprocess.run(
            ["aws", "--endpoint-url", server.endpoint, "s3", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "a.txt").write_text("a")
    (tmp_path / "up" / "sub").mkdir()
    (tmp_path / "up" / "sub" / "b.txt").write_text("b" * 10_000_000)
    aws("mb", "s3://cli-bucket-1")
    aws("cp", "--recursive", str(tmp_path / "up"), "s3://cli-bucket-1/up/")
    listed = aws("ls", "--recursive", "s3://cli-bucket-1/")
    assert "up/a.txt" in listed and "up/sub/b.txt" in listed
    assert "cli-bucket-1" in aws("ls")
    aws("cp", "s3://cli-bucket-1/up/sub/b.txt", str(tmp_path / "b.txt"))
    assert (tmp_path / "b.txt").read_text() == "b" * 10_000_000
    aws("rm", "--recursive", "s3://cli-bucket-1/up/")
    aws("rb", "s3://cli-bucket-1")
    assert "cli-bucket-1" not in aws("ls")


def test_a_bucket_belongs_to_the_account_that_made_it(server: DockyardServer) -> None:
    owner = server.client("s3")
    owner.create_bucket(Bucket="private-1")
    owner.put_object(Bucket="private-1", Key="model.bin", Body=b"the owner's")
    _, key = server.new_account("s3-other")
    other = server.client("s3", key=key)
    assert "private-1" not in [b["Name"] for b in other.list_buckets()["Buckets"]]
    attempts: dict[str, Any] = {
        "get": lambda: other.get_object(Bucket="private-1", Key="model.bin"),
        "head": lambda: other.head_object(Bucket="private-1", Key="model.bin"),
        "put": lambda: other.put_object(Bucket="private-1", Key="model.bin", Body=b"mine"),
        "delete": lambda: other.delete_object(Bucket="private-1", Key="model.bin"),
        "list": lambda: other.list_objects_v2(Bucket="private-1"),
        "delete bucket": lambda: other.delete_bucket(Bucket="private-1"),
        "upload": lambda: other.create_multipart_upload(Bucket="private-1", Key="x"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(ClientError) as error:
            attempt()
        assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, what
    with pytest.raises(ClientError) as error:
        other.create_bucket(Bucket="private-1")
    assert code(error) == "BucketAlreadyExists"
    # Copying out of it is reading it.
    other.create_bucket(Bucket="theirs-1")
    with pytest.raises(ClientError) as error:
        other.copy_object(
            Bucket="theirs-1", Key="stolen", CopySource={"Bucket": "private-1", "Key": "model.bin"}
        )
    assert code(error) == "AccessDenied"
    # Nor may its jobs read or write it: a job naming it is refused.
    for field, change in (
        (
            "InputDataConfig",
            {
                "InputDataConfig": [
                    {
                        "ChannelName": "train",
                        "DataSource": {
                            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://private-1/"}
                        },
                    }
                ]
            },
        ),
        ("OutputDataConfig", {"OutputDataConfig": {"S3OutputPath": "s3://private-1/out"}}),
    ):
        request: dict[str, Any] = {
            "TrainingJobName": f"thief-{field.lower()}",
            "AlgorithmSpecification": {
                "TrainingImage": "python:3.11",
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["python3", "-c", "pass"],
            },
            "RoleArn": "arn:aws:iam::123456789012:role/training",
            "OutputDataConfig": {"S3OutputPath": "s3://theirs-1/out"},
            "ResourceConfig": {
                "InstanceType": "ml.m5.xlarge",
                "InstanceCount": 1,
                "VolumeSizeInGB": 10,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
            **change,
        }
        with pytest.raises(ClientError) as error:
            server.client(key=key).create_training_job(**request)
        assert code(error) == "ValidationException"
        message = error.value.response["Error"]["Message"]
        assert field in message and "private-1" in message and "another account" in message
    assert owner.get_object(Bucket="private-1", Key="model.bin")["Body"].read() == b"the owner's"
    assert "theirs-1" not in [b["Name"] for b in owner.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as error:
        owner.create_bucket(Bucket="private-1")
    assert code(error) == "BucketAlreadyOwnedByYou"


def test_identity_is_dockyards(server: DockyardServer) -> None:
    # A key made with the operator CLI (`dockyard keys create`) works at once.
    _, key = server.new_account("s3-newcomer")
    newcomer = server.client("s3", key=key)
    newcomer.create_bucket(Bucket="newcomer-1")
    assert [b["Name"] for b in newcomer.list_buckets()["Buckets"]] == ["newcomer-1"]
    wrong = server.client("s3", key=(key[0], "not-the-secret-0000000000000000000000000"))
    with pytest.raises(ClientError) as error:
        wrong.list_objects_v2(Bucket="newcomer-1")
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = server.client("s3", key=("AKIAUNKNOWNUNKNOWN00", "x" * 40))
    with pytest.raises(ClientError) as error:
        unknown.list_buckets()
    assert code(error) == "InvalidAccessKeyId"
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{server.endpoint}/newcomer-1?list-type=2", timeout=10)
    assert anonymous.value.code == 403


def test_jobs_read_and_write_the_same_objects(server: DockyardServer) -> None:
    s3 = server.client("s3")
    s3.create_bucket(Bucket="training-1")
    s3.put_object(Bucket="training-1", Key="train/rows.csv", Body=b"1,2\n3,4\n")
    source = io.BytesIO()
    body = textwrap.dedent(
        """
        import os
        rows = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "rows.csv")).read()
        open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.txt"), "w").write(rows.upper())
        """
    ).encode()
    with tarfile.open(fileobj=source, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    s3.put_object(Bucket="training-1", Key="code/src.tar.gz", Body=source.getvalue())
    sm = server.client()
    sm.create_training_job(
        TrainingJobName="through-s3",
        AlgorithmSpecification={"TrainingImage": "python:3.11", "TrainingInputMode": "File"},
        RoleArn="arn:aws:iam::123456789012:role/training",
        HyperParameters={
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": '"s3://training-1/code/src.tar.gz"',
        },
        InputDataConfig=[
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://training-1/train/"}
                },
            }
        ],
        OutputDataConfig={"S3OutputPath": "s3://training-1/output"},
        ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    deadline = time.monotonic() + 120
    while (job := sm.describe_training_job(TrainingJobName="through-s3"))[
        "TrainingJobStatus"
    ] == "InProgress":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    artifact = job["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("s3://training-1/")
    archive = s3.get_object(Bucket="training-1", Key=artifact)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile("seen.txt")
        assert member is not None and member.read() == b"1,2\n3,4\n".upper()


def test_objects_outlive_a_restart(tmp_path: Path) -> None:
    server = DockyardServer(tmp_path / "data").start()
    try:
        s3 = server.client("s3")
        s3.create_bucket(Bucket="durable-1")
        s3.put_object(Bucket="durable-1", Key="k", Body=b"kept")
        server.kill()
        server.start()
        s3 = server.client("s3")
        assert s3.get_object(Bucket="durable-1", Key="k")["Body"].read() == b"kept"
        _, key = server.new_account("after-restart")
        with pytest.raises(ClientError) as error:
            server.client("s3", key=key).get_object(Bucket="durable-1", Key="k")
        assert code(error) == "AccessDenied"
    finally:
        server.stop()


# -- One request, one reading (issue 25, B1) ------------------------------------------
#
# The attack: sign a request for the path the gateway will serve (another account's
# object), and send a request line the front door once read as the caller's own bucket.
# Literal dot segments were removed by httpx on the way (so the gateway served
# /victim/key); percent-encoded ones are decoded by the gateway. Each is now refused
# before anything is sent on, with 400 InvalidURI.

VICTIM, OWN, SECRET = "victim-b1", "thief-b1", b"the victim's secret"
# (request line's path, the path signed: what the gateway would have served).
DOT_PATHS: dict[str, tuple[str, str]] = {
    "own/../": (f"/{OWN}/../{{rest}}", "/{rest}"),
    "x/../": ("/x/../{rest}", "/{rest}"),
    "/./": ("/./{rest}", "/{rest}"),
    ";/../": (f"/{OWN};/../{{rest}}", "/{rest}"),
    "%2e%2e": (f"/{OWN}/%2e%2e/{{rest}}", f"/{OWN}/../{{rest}}"),
    "%2E%2E": (f"/{OWN}/%2E%2E/{{rest}}", f"/{OWN}/../{{rest}}"),
    ".%2e": (f"/{OWN}/.%2e/{{rest}}", f"/{OWN}/../{{rest}}"),
    "..%2f": (f"/{OWN}/..%2f{{rest}}", f"/{OWN}/../{{rest}}"),
    "%2F..%2F": (f"/{OWN}%2F..%2F{{rest}}", f"/{OWN}/../{{rest}}"),
    "%252e%252e": (f"/{OWN}/%252e%252e/{{rest}}", f"/{OWN}/%2e%2e/{{rest}}"),
    "//": ("//{rest}", "/{rest}"),
}


def sigv4_request(
    server: DockyardServer,
    key: tuple[str, str],
    method: str,
    signed_path: str,
    line_path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    presigned: bool = False,
    host: str | None = None,
) -> tuple[int, bytes]:
    """Sign for `signed_path` (botocore, as S3 signs) and send `line_path` as the request
    line's target, byte for byte: (status, body)."""

    host = host or f"127.0.0.1:{server.port}"
    fields = dict(headers or {})
    if not presigned:
        fields["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    request = AWSRequest(
        method=method, url=f"http://{host}{signed_path}", data=body, headers=fields
    )
    if presigned:
        S3SigV4QueryAuth(Credentials(*key), "s3", "us-east-1", expires=300).add_auth(request)
        line_path += ("&" if "?" in line_path else "?") + request.url.split("?", 1)[1]
    else:
        S3SigV4Auth(Credentials(*key), "s3", "us-east-1").add_auth(request)
    headers = {name: value for name, value in request.headers.items() if name.lower() != "host"}
    return send_line(server, method, line_path, {"Host": host, **headers}, body)


def send_line(
    server: DockyardServer, method: str, target: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, bytes]:
    """One request whose request line's target is `target`, byte for byte."""

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if method in ("PUT", "POST"):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def thief(server: DockyardServer) -> tuple[str, str]:
    """The victim (the development account) holds VICTIM/key; the thief, an account of
    its own, owns OWN. Answers the thief's key."""
    victim = server.client("s3")
    victim.create_bucket(Bucket=VICTIM)
    victim.put_object(Bucket=VICTIM, Key="key", Body=SECRET)
    _, key = server.new_account("thief-b1")
    server.client("s3", key=key).create_bucket(Bucket=OWN)
    return key


def victims_keys(server: DockyardServer) -> list[str]:
    listed = server.client("s3").list_objects_v2(Bucket=VICTIM).get("Contents", [])
    return sorted(o["Key"] for o in listed)


@pytest.mark.parametrize("operation", ["get", "list", "put", "delete", "presigned get"])
def test_dot_segments_never_reach_another_accounts_bucket(
    server: DockyardServer, thief: tuple[str, str], operation: str
) -> None:
    method = {"list": "GET", "put": "PUT", "delete": "DELETE"}.get(operation, "GET")
    rest = VICTIM if operation == "list" else f"{VICTIM}/key"
    query = "?list-type=2" if operation == "list" else ""
    body = b"planted by the thief" if operation == "put" else b""
    for encoding, (line, signed) in DOT_PATHS.items():
        status, answer = sigv4_request(
            server,
            thief,
            method,
            signed.format(rest=rest) + query,
            line.format(rest=rest) + query,
            body,
            presigned=operation == "presigned get",
        )
        assert status == 400 and b"<Code>InvalidURI</Code>" in answer, (encoding, answer)
        assert SECRET not in answer and b"<Key>key</Key>" not in answer, encoding
    assert victims_keys(server) == ["key"]
    assert server.client("s3").get_object(Bucket=VICTIM, Key="key")["Body"].read() == SECRET


def test_a_copy_source_names_its_bucket_once(
    server: DockyardServer, thief: tuple[str, str]
) -> None:
    for source in (
        f"/{OWN}/../{VICTIM}/key",
        f"/x/../{VICTIM}/key",
        f"/./{VICTIM}/key",
        f"//{VICTIM}/key",
        f"{OWN}/%2e%2e/{VICTIM}/key",
        f"{OWN}/%2E%2E/{VICTIM}/key",
        f"{OWN}/..%2F{VICTIM}%2Fkey",
        f"{OWN}%2F..%2F{VICTIM}%2Fkey",  # the gateway panicked on this one
        f"{OWN}/%252e%252e/{VICTIM}/key",
        f"{VICTIM.replace('-', '%2D')}/key",  # a bucket the gateway does not decode
    ):
        path = f"/{OWN}/stolen"
        status, answer = sigv4_request(
            server, thief, "PUT", path, path, headers={"x-amz-copy-source": source}
        )
        assert status == 400 and b"<Code>InvalidArgument</Code>" in answer, (source, answer)
        assert b"x-amz-copy-source" in answer, (source, answer)
    s3 = server.client("s3", key=thief)
    assert "Contents" not in s3.list_objects_v2(Bucket=OWN, Prefix="stolen")


def test_keys_with_dots_inside_a_segment_still_work(
    server: DockyardServer, thief: tuple[str, str]
) -> None:
    s3 = server.client("s3", key=thief)
    keys = ["a..b", ".hidden", "x.y", "...", "dir/.hidden/..b/c.", "dots/..x/.y./z"]
    for key in keys:
        s3.put_object(Bucket=OWN, Key=key, Body=key.encode())
        assert s3.get_object(Bucket=OWN, Key=key)["Body"].read() == key.encode()
    s3.copy_object(Bucket=OWN, Key="copy/a..b", CopySource={"Bucket": OWN, "Key": "a..b"})
    assert s3.get_object(Bucket=OWN, Key="copy/a..b")["Body"].read() == b"a..b"
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=OWN)["Contents"]]
    assert set(keys) | {"copy/a..b"} <= set(listed)
    presigner = server.client("s3", key=thief, signature_version="s3v4")
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": OWN, "Key": ".hidden"})

    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.read() == b".hidden"
    # A key that *is* a dot segment cannot be written: here an object is a file.
    with pytest.raises(ClientError) as error:
        s3.put_object(Bucket=OWN, Key="dir/../x", Body=b"")
    assert code(error) == "InvalidURI"


def test_a_bucket_the_gateway_made_is_its_makers(
    server: DockyardServer, thief: tuple[str, str]
) -> None:
    # The gateway creates a bucket for a PUT the front door did not take for a
    # CreateBucket (a stray query, trailing slashes): it is still the caller's, not left
    # unowned (which made it the development account's).
    for bucket, target in (("squat-b1", "/squat-b1?=x"), ("squat-b2", "/squat-b2//")):
        status, answer = sigv4_request(server, thief, "PUT", target, target)
        assert status == 200, answer
        assert bucket in [
            b["Name"] for b in server.client("s3", key=thief).list_buckets()["Buckets"]
        ]
        assert bucket not in [b["Name"] for b in server.client("s3").list_buckets()["Buckets"]]
        with pytest.raises(ClientError) as error:
            server.client("s3").put_object(Bucket=bucket, Key="k", Body=b"")
        assert code(error) == "AccessDenied"
    status, _ = sigv4_request(server, thief, "DELETE", "/squat-b2?x", "/squat-b2?x")
    assert status == 204
    server.client("s3").create_bucket(Bucket="squat-b2")  # forgotten, so free again


def test_what_stays_the_gateways_to_read_stays_in_the_bucket(
    server: DockyardServer, thief: tuple[str, str]
) -> None:
    # Not paths the front door reads, but the gateway's own: a listing's prefix, the
    # keys of a DeleteObjects body and of a browser (POST form) upload, the Host header.
    s3 = server.client("s3", key=thief)
    for prefix in (f"../{VICTIM}/", "../", f"x/../../{VICTIM}/"):
        page = s3.list_objects_v2(Bucket=OWN, Prefix=prefix)
        assert "Contents" not in page and "CommonPrefixes" not in page, prefix
    s3.delete_objects(Bucket=OWN, Delete={"Objects": [{"Key": f"../{VICTIM}/key"}]})
    form = (
        f'--b\r\nContent-Disposition: form-data; name="key"\r\n\r\n../{VICTIM}/planted\r\n'
        '--b\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\nx\r\n--b--\r\n'
    ).encode()
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    status, _ = sigv4_request(server, thief, "POST", f"/{OWN}", f"/{OWN}", form, headers)
    assert status == 400
    for host in (f"{VICTIM}.127.0.0.1:{server.port}", f"{VICTIM}.s3.amazonaws.com"):
        status, answer = sigv4_request(server, thief, "GET", "/key", "/key", host=host)
        assert status == 404 and SECRET not in answer, (host, answer)
    assert victims_keys(server) == ["key"]


def presign_by_hand(host: str, path: str, key: tuple[str, str], extra: list[str]) -> str:
    """A SigV4 presigned GET target for `path`, its query ending with `extra` (encoded
    `name=value` pairs), all of them signed."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{stamp[:8]}/us-east-1/s3/aws4_request"
    pairs = [
        "X-Amz-Algorithm=AWS4-HMAC-SHA256",
        f"X-Amz-Credential={quote(f'{key[0]}/{scope}', safe='')}",
        f"X-Amz-Date={stamp}",
        "X-Amz-Expires=300",
        "X-Amz-SignedHeaders=host",
        *extra,
    ]
    # Sorted by name, a repeated name's values in their order (as the gateway sorts).
    ordered = sorted(pairs, key=lambda pair: pair.split("=", 1)[0])
    canonical = "\n".join(
        ["GET", path, "&".join(ordered), f"host:{host}\n", "host", "UNSIGNED-PAYLOAD"]
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    text = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}"
    signing = ("AWS4" + key[1]).encode()
    for part in (stamp[:8], "us-east-1", "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, text.encode(), hashlib.sha256).hexdigest()
    return f"{path}?{'&'.join(pairs)}&X-Amz-Signature={signature}"


def test_the_account_checked_is_the_one_that_signed(
    server: DockyardServer, thief: tuple[str, str]
) -> None:
    # The gateway verifies the Authorization header if there is one (read leniently:
    # spaces removed), else the query's first X-Amz-Credential; the front door once took
    # the first credential its pattern found, the query's last. Naming the victim's key
    # where the front door looked, and signing with the thief's where the gateway
    # looked, read the victim's object.

    host = f"127.0.0.1:{server.port}"
    victims = quote(f"{server.credentials()[0]}/20260101/us-east-1/s3/aws4_request", safe="")
    named = f"X-Amz-Credential={victims}"
    path = f"/{VICTIM}/key"
    attempts: dict[str, tuple[str, dict[str, str]]] = {}
    # A presigned URL with a second credential, the victim's, last (signed by hand:
    # botocore keeps one value of a repeated parameter in what it signs).
    attempts["two query credentials"] = (presign_by_hand(host, path, thief, [named]), {})
    # A header the front door could not read (a space in its credential) beside a query
    # credential naming the victim.
    signed = AWSRequest(
        method="GET",
        url=f"http://{host}{path}?{named}",
        headers={"x-amz-content-sha256": hashlib.sha256(b"").hexdigest()},
    )
    S3SigV4Auth(Credentials(*thief), "s3", "us-east-1").add_auth(signed)
    headers = {k: v for k, v in signed.headers.items() if k.lower() != "host"}
    headers["Authorization"] = headers["Authorization"].replace("/", " /", 1)
    attempts["unreadable header"] = (f"{path}?{named}", headers)
    # A header naming the victim's key beside the thief's presigned query (the gateway
    # refused this one already: it verifies the header).
    own = AWSRequest(method="GET", url=f"http://{host}{path}")
    S3SigV4QueryAuth(Credentials(*thief), "s3", "us-east-1", expires=300).add_auth(own)
    victim_header = {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={server.credentials()[0]}/20260101/"
        f"us-east-1/s3/aws4_request, SignedHeaders=host, Signature={'0' * 64}"
    }
    attempts["header and query"] = (f"{path}?{own.url.split('?', 1)[1]}", victim_header)
    for name, (target, extra) in attempts.items():
        status, answer = send_line(server, "GET", target, {"Host": host, **extra})
        assert status == 400 and SECRET not in answer, (name, answer)
    # Each way alone still works for the thief's own objects.
    s3 = server.client("s3", key=thief)
    s3.put_object(Bucket=OWN, Key="mine.txt", Body=b"mine")
    presigner = server.client("s3", key=thief, signature_version="s3v4")
    url = presigner.generate_presigned_url("get_object", Params={"Bucket": OWN, "Key": "mine.txt"})

    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.read() == b"mine"
