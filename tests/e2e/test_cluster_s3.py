"""A cluster node reaches S3 - its account's buckets, with credentials of its own,
through its agent's relay - and nothing else of the server: attacked from inside a real
node, and its credentials tried from outside."""

from __future__ import annotations

import json
import time

import pytest
from botocore.exceptions import ClientError

from tests.e2e.test_cluster_exec import life_cycle, run_on, up
from tests.e2e.test_clusters import wait_cluster
from tests.harness import REGION, DockyardServer

__all__ = ["life_cycle"]  # the exec tests' fixture, used here too

# Run on the node (`python attack.py`): each attempt prints one JSON line.
ATTACK = r"""
import json, os, re, socket, sys

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

relay = os.environ["AWS_ENDPOINT_URL_S3"]
host, port = relay.removeprefix("http://").split(":")
creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])


def report(name, value):
    print(json.dumps({"attempt": name, "result": value}), flush=True)


def signed(method, path, service, body=b"", headers=None):
    request = AWSRequest(method=method, url=relay + path, data=body, headers=headers or {})
    SigV4Auth(creds, service, "us-east-1").add_auth(request)
    prepared = request.prepare()
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in prepared.headers.items()
    )
    if body and "Content-Length" not in prepared.headers:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def exchange(raw, read_all=True):
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


s3 = boto3.client("s3")
s3.put_object(Bucket=sys.argv[1], Key="from-the-node.txt", Body=b"written on the node")
read = s3.get_object(Bucket=sys.argv[1], Key="from-the-node.txt")["Body"].read()
report("own bucket", read.decode())
try:
    s3.list_objects_v2(Bucket=sys.argv[2])
    report("other bucket", "listed")
except Exception as exc:
    report("other bucket", type(exc).__name__ + ": " + str(exc))

# The SageMaker API through the relay, signed as botocore signs it.
sagemaker = boto3.client("sagemaker", endpoint_url=relay)
try:
    sagemaker.list_training_jobs()
    report("sagemaker via relay", "answered")
except Exception as exc:
    report("sagemaker via relay", str(exc))
# The same, signed for s3 (the relay's scope) but sent to the API's address.
report("api signed for s3", exchange(signed("POST", "/", "s3", b"{}", {
    "X-Amz-Target": "SageMaker.ListTrainingJobs",
    "Content-Type": "application/x-amz-json-1.1"})).split("\r\n")[0])
# Operator endpoints, plainly and percent-encoded.
for path in ("/_dockyard/clock", "/%5Fdockyard/clock", "//_dockyard/clock"):
    report("operator " + path, exchange(signed("GET", path, "s3")).split("\r\n")[0])
# A request smuggled behind an allowed one on the same connection.
first = signed("GET", "/" + sys.argv[1] + "?list-type=2", "s3")
second = signed("POST", "/", "sagemaker", b"{}", {
    "X-Amz-Target": "SageMaker.ListTrainingJobs",
    "Content-Type": "application/x-amz-json-1.1"})
answer = exchange(first + second)
report("pipelined", re.findall(r"HTTP/1\.1 \d{3} [A-Za-z]+", answer))
report("pipelined body", "only S3 requests are relayed" in answer and "ListBucketResult" in answer)
# The server's own port, past the relay.
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=5)
    report("server port", "connected")
except OSError as exc:
    report("server port", type(exc).__name__)
"""


# Run on the node (`python dots.py OWN OTHER`): another account's bucket named through
# dot segments and the ways the server once read a request otherwise than the relay.
DOTS = r"""
import hashlib, json, os, socket, sys
from urllib.parse import quote

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

relay = os.environ["AWS_ENDPOINT_URL_S3"]
host, port = relay.removeprefix("http://").split(":")
creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
own, other = sys.argv[1], sys.argv[2]


def report(name, value):
    print(json.dumps({"attempt": name, "result": value}), flush=True)


def exchange(raw):
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(raw)
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def s3(method, line, signed_path, body=b"", headers=None, presign=False):
    # Signed for the path the gateway would serve; `line` is the request line's target.
    fields = dict(headers or {})
    if not presign:
        fields["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
    request = AWSRequest(method=method, url=relay + signed_path, data=body, headers=fields)
    if presign:
        S3SigV4QueryAuth(creds, "s3", "us-east-1", expires=300).add_auth(request)
        line += ("&" if "?" in line else "?") + request.url.split("?", 1)[1]
    else:
        S3SigV4Auth(creds, "s3", "us-east-1").add_auth(request)
    head = f"{method} {line} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
    if method in ("PUT", "POST"):
        head += f"Content-Length: {len(body)}\r\n"
    answer = exchange(head.encode() + b"\r\n" + body)
    return [answer.split("\r\n")[0], "the stranger's" in answer or "<Key>secret" in answer]


paths = {
    "own/../": (f"/{own}/../{{rest}}", "/{rest}"),
    "x/../": ("/x/../{rest}", "/{rest}"),
    "/./": ("/./{rest}", "/{rest}"),
    "%2e%2e": (f"/{own}/%2e%2e/{{rest}}", f"/{own}/../{{rest}}"),
    "%2F..%2F": (f"/{own}%2F..%2F{{rest}}", f"/{own}/../{{rest}}"),
    "%252e%252e": (f"/{own}/%252e%252e/{{rest}}", f"/{own}/%2e%2e/{{rest}}"),
    "//": ("//{rest}", "/{rest}"),
}
operations = {
    "get": ("GET", f"{other}/secret.txt", "", b"", False),
    "list": ("GET", other, "?list-type=2", b"", False),
    "put": ("PUT", f"{other}/planted.txt", "", b"planted", False),
    "delete": ("DELETE", f"{other}/secret.txt", "", b"", False),
    "presigned": ("GET", f"{other}/secret.txt", "", b"", True),
}
for name, (line, signed_path) in paths.items():
    for operation, (method, rest, query, body, presign) in operations.items():
        report(
            f"{operation} {name}",
            s3(method, line.format(rest=rest) + query, signed_path.format(rest=rest) + query,
               body, presign=presign),
        )
for source in (f"/{own}/../{other}/secret.txt", f"{own}/%2e%2e/{other}/secret.txt",
               f"{own}%2F..%2F{other}%2Fsecret.txt", f"//{other}/secret.txt"):
    target = f"/{own}/stolen.txt"
    report(f"copy {source}", s3("PUT", target, target, headers={"x-amz-copy-source": source}))
# What the server once took for its console, health and metrics pages though the relay
# took it for S3: a credential that is not one, a lower-case query key, obs-text.
scope = f"{creds.access_key}/20260101/us-east-1/s3/aws4_request"
for name, raw in {
    "metrics": f"GET /metrics?X-Amz-Credential={quote(scope[:-12] + 'x', safe='')} HTTP/1.1",
    "healthz": f"GET /healthz?x-amz-credential={quote(scope, safe='')} HTTP/1.1",
    "console": "GET /console/signin HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential="
    + scope.replace("/", "\xa0x/", 1) + ", SignedHeaders=host, Signature=00",
}.items():
    answer = exchange((raw + "\r\nHost: h\r\nConnection: close\r\n\r\n").encode("latin-1"))
    report("server page " + name, answer.split("\r\n")[0])
"""


def results(output: str) -> dict[str, object]:
    found: dict[str, object] = {}
    for line in output.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            found[item["attempt"]] = item["result"]
    return found


@pytest.fixture(autouse=True)
def attack_script(manual_server: DockyardServer, life_cycle: None) -> None:
    """Beside the exec tests' lifecycle scripts (`life_cycle`), the attack."""
    scripts = manual_server.data_dir / "s3" / "scripts" / "lifecycle"
    (scripts / "attack.py").write_text(ATTACK)
    (scripts / "dots.py").write_text(DOTS)


def node_environment(server: DockyardServer, cluster: str, node: str) -> dict[str, str]:
    code, output = run_on(server, cluster, node, "env")
    assert code == 0, output
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def test_a_node_reaches_its_accounts_s3_and_nothing_else(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    s3 = server.client("s3")
    s3.create_bucket(Bucket="node-data")
    _, stranger_key = server.new_account("stranger")
    server.client("s3", key=stranger_key).create_bucket(Bucket="stranger-data")

    code, output = run_on(
        server,
        "research",
        node,
        "python",
        "/opt/ml/input/data/lifecycle/attack.py",
        "node-data",
        "stranger-data",
        str(server.port),
    )
    found = results(output)
    assert code == 0, output
    assert found["own bucket"] == "written on the node"
    body = s3.get_object(Bucket="node-data", Key="from-the-node.txt")["Body"].read()
    assert body == b"written on the node"
    assert "AccessDenied" in str(found["other bucket"]), found
    assert "relay" in str(found["sagemaker via relay"]), found
    assert found["api signed for s3"] == "HTTP/1.1 403 Forbidden", found
    for path in ("/_dockyard/clock", "/%5Fdockyard/clock", "//_dockyard/clock"):
        assert found["operator " + path] == "HTTP/1.1 403 Forbidden", (path, found)
    # The allowed request is answered; the one smuggled behind it is refused, unsent.
    assert found["pipelined"] == ["HTTP/1.1 200 OK", "HTTP/1.1 403 Forbidden"], found
    assert found["pipelined body"] is True
    assert found["server port"] == "ConnectionRefusedError", found


def test_a_node_names_no_other_bucket_through_its_relay(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    server.client("s3").create_bucket(Bucket="node-own")
    _, stranger_key = server.new_account("stranger")
    stranger = server.client("s3", key=stranger_key)
    stranger.create_bucket(Bucket="stranger-box")
    stranger.put_object(Bucket="stranger-box", Key="secret.txt", Body=b"the stranger's")

    code, output = run_on(
        server,
        "research",
        node,
        "python",
        "/opt/ml/input/data/lifecycle/dots.py",
        "node-own",
        "stranger-box",
    )
    assert code == 0, output
    found = results(output)
    attempts = [name for name in found if not name.startswith("server page ")]
    assert len(attempts) == 7 * 5 + 4, found
    for name in attempts:
        status, exposed = found[name]  # type: ignore[misc]
        # The relay refuses the paths itself; a copy source is the server's to refuse.
        refused = "400 Bad Request" if name.startswith("copy ") else "403 Forbidden"
        assert status == f"HTTP/1.1 {refused}" and not exposed, (name, found[name])
    for page in ("metrics", "healthz", "console"):
        assert found["server page " + page] == "HTTP/1.1 403 Forbidden", (page, found)
    listed = stranger.list_objects_v2(Bucket="stranger-box")["Contents"]
    assert [o["Key"] for o in listed] == ["secret.txt"]
    body = stranger.get_object(Bucket="stranger-box", Key="secret.txt")["Body"].read()
    assert body == b"the stranger's"
    assert "Contents" not in server.client("s3").list_objects_v2(Bucket="node-own")


def test_a_nodes_credentials_are_its_own_and_go_with_it(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    env = node_environment(server, "research", node)
    assert env["AWS_ENDPOINT_URL_S3"].startswith("http://127.0.0.1:")
    assert env["AWS_DEFAULT_REGION"] == REGION
    key = (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    assert key[0] != server.credentials()[0]
    # Taken off the node, they still work for S3 only: never the SageMaker API.
    sagemaker = server.client(key=key)
    with pytest.raises(ClientError) as refused:
        sagemaker.list_clusters()
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    s3 = server.client("s3", key=key)
    s3.list_buckets()
    # The node goes (the cluster is deleted): its key goes with it.
    client = server.client()
    client.delete_cluster(ClusterName="research")
    wait_cluster(server, client, "research", "Gone")
    deadline = time.monotonic() + 120  # the server's key cache keeps a key 30 s
    while True:
        try:
            s3.list_buckets()
        except ClientError as error:
            assert error.response["Error"]["Code"] == "InvalidAccessKeyId"
            break
        assert time.monotonic() < deadline, "the deleted node's key still works"
        time.sleep(1)
