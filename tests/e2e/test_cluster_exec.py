"""Getting onto a HyperPod node (`dockyard clusters exec`, SSM's start-session on
AWS): commands run in the node's own sandbox - its host name, user, /opt/ml - for the
node's account only, and what runs there is attacked from inside like a job's code."""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from dockyard.compute.backends.local import SANDBOX_UID_BASE
from tests.e2e.test_clusters import group, wait_cluster, wait_nodes
from tests.harness import REGION, REPO, DockyardServer, dockyard_command

PATH = "/_dockyard/clusters/exec"
ON_CREATE = """#!/bin/sh
set -e
echo "made by on-create" > /opt/ml/marker.txt
echo "home too" > "$HOME/from-on-create"
"""
# Pending until the test lets it go on (a file it makes in the node's /opt/ml).
WAITS = """#!/bin/sh
while [ ! -e /opt/ml/go ]; do sleep 0.1; done
"""


@pytest.fixture(autouse=True)
def life_cycle(manual_server: DockyardServer) -> None:
    scripts = manual_server.data_dir / "s3" / "scripts" / "lifecycle"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "on_create.sh").write_text(ON_CREATE)
    (scripts / "waits.sh").write_text(WAITS)


def signed_exec(
    server: DockyardServer,
    body: dict[str, Any] | bytes,
    key: tuple[str, str] | None = None,
    service: str = "sagemaker",
    sign: bool = True,
) -> tuple[bytes, dict[str, str]]:
    """A request to the exec endpoint signed as the CLI signs it (botocore's SigV4
    signer, a random X-Dockyard-Nonce): its body and headers."""
    import secrets

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    access_key, secret = key or server.credentials()
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = AWSRequest(
        method="POST",
        url=server.endpoint + PATH,
        data=data,
        headers={"Content-Type": "application/json", "X-Dockyard-Nonce": secrets.token_hex(16)},
    )
    if sign:
        SigV4Auth(Credentials(access_key, secret), service, REGION).add_auth(request)
    return data, dict(request.prepare().headers)


def send_exec(
    server: DockyardServer, data: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        connection.request("POST", PATH, body=data, headers=headers)
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    return response.status, json.loads(payload)


def post(
    server: DockyardServer,
    body: dict[str, Any] | bytes,
    key: tuple[str, str] | None = None,
    service: str = "sagemaker",
    sign: bool = True,
) -> tuple[int, dict[str, Any]]:
    """The exec endpoint, called as the CLI calls it."""
    return send_exec(server, *signed_exec(server, body, key, service, sign))


def run_on(
    server: DockyardServer,
    cluster: str,
    node: str,
    *argv: str,
    stdin: bytes = b"",
    key: tuple[str, str] | None = None,
) -> tuple[int, str]:
    status, answer = post(
        server,
        {
            "ClusterName": cluster,
            "NodeId": node,
            "Command": list(argv),
            "Stdin": base64.b64encode(stdin).decode(),
        },
        key=key,
    )
    assert status == 200, answer
    return int(answer["ExitCode"]), base64.b64decode(answer["Output"]).decode()


def up(server: DockyardServer, name: str = "research") -> str:
    client = server.client()
    client.create_cluster(ClusterName=name, InstanceGroups=[group("workers", 1)])
    wait_cluster(server, client, name, "InService")
    [node] = wait_nodes(server, client, name, ["Running"])
    return str(node["InstanceId"])


def cli(server: DockyardServer, *args: str, stdin: str = "") -> Any:
    """`dockyard clusters ...` with the server's endpoint and data dir (their credentials)."""
    return subprocess.run(
        dockyard_command(args[0], args[1], "--endpoint-url", server.endpoint, *args[2:]),
        cwd=REPO,
        env={**os.environ, "DOCKYARD_DATA_DIR": str(server.data_dir), "COLUMNS": "200"},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_exec_runs_in_the_nodes_sandbox(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    # The node's host name, an unprivileged user of its account, the node's own files.
    assert run_on(server, "research", node, "hostname") == (0, f"{node}\n")
    code, uid = run_on(server, "research", node, "id", "-u")
    assert code == 0 and int(uid) != 0 and int(uid) >= SANDBOX_UID_BASE
    assert run_on(server, "research", node, "cat", "/opt/ml/marker.txt") == (
        0,
        "made by on-create\n",
    )
    assert run_on(server, "research", node, "sh", "-c", 'cat "$HOME/from-on-create"') == (
        0,
        "home too\n",
    )
    # A failing command's exit code and output (stderr too) come back.
    assert run_on(server, "research", node, "sh", "-c", "echo oops >&2; exit 7") == (
        7,
        "oops\n",
    )
    code, output = run_on(server, "research", node, "no-such-program")
    assert code == 127 and "cannot run no-such-program" in output
    # stdin reaches the command; what one command writes the next one sees.
    assert run_on(server, "research", node, "cat", stdin=b"piped\n") == (0, "piped\n")
    run_on(server, "research", node, "sh", "-c", "echo kept > /opt/ml/kept.txt")
    assert run_on(server, "research", node, "cat", "/opt/ml/kept.txt") == (0, "kept\n")


def test_what_runs_on_a_node_cannot_reach_the_server(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    data = server.data_dir.resolve()
    for secret in ("dockyard.db", "master.key", "operator.key", "credentials"):
        code, output = run_on(server, "research", node, "cat", str(data / secret))
        assert code != 0 and "No such file" in output, (secret, output)
    code, output = run_on(server, "research", node, "ls", str(data / "instances"))
    assert code != 0
    # The server's port on the host's loopback: the node's loopback is its own.
    probe = f"import socket; socket.create_connection(('127.0.0.1', {server.port}), timeout=5)"
    code, output = run_on(server, "research", node, sys.executable, "-c", probe)
    assert code != 0 and ("ConnectionRefused" in output or "timed out" in output), output
    # No capabilities, no way back to root.
    code, output = run_on(server, "research", node, "grep", "^CapEff", "/proc/self/status")
    assert code == 0 and output.split()[1] == "0000000000000000"


def test_only_the_nodes_account_gets_on_it(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    account_id = server.client().describe_cluster(ClusterName="research")["ClusterArn"]
    account_id = account_id.split(":")[4]
    command = {"ClusterName": "research", "NodeId": node, "Command": ["hostname"]}
    _, key = server.new_account("stranger")
    status, answer = post(server, command, key=key)
    assert (status, answer["__type"]) == (400, "ResourceNotFound")
    assert "research" in answer["message"] and node not in json.dumps(answer)
    # A key of the account whose policy does not allow ssm:StartSession.
    reader = server.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "sagemaker:*", "Resource": "*"}],
            }
        ),
    )
    status, answer = post(server, command, key=reader)
    assert (status, answer["__type"]) == (400, "AccessDeniedException")
    assert "ssm:StartSession" in answer["message"]
    # Unsigned, signed for another service, or signed with a wrong secret.
    status, answer = post(server, command, sign=False)
    assert (status, answer["__type"]) == (403, "MissingAuthenticationTokenException")
    status, answer = post(server, command, service="s3")
    assert (status, answer["__type"]) == (403, "InvalidSignatureException")
    status, answer = post(server, command, key=(server.credentials()[0], "not-the-secret"))
    assert (status, answer["__type"]) == (403, "InvalidSignatureException")


def test_bad_requests_and_nodes_that_are_not_up(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    cases: list[tuple[dict[str, Any] | bytes, str, str]] = [
        (b"{not json", "SerializationException", "not valid JSON"),
        (b"[1]", "SerializationException", "JSON object"),
        ({"ClusterName": "research", "NodeId": node}, "ValidationException", "Command"),
        ({"ClusterName": "research", "NodeId": node, "Command": []}, "ValidationException", ""),
        (
            {"ClusterName": "research", "NodeId": node, "Command": ["x"], "Stdin": "%%"},
            "ValidationException",
            "base64",
        ),
        (
            {"ClusterName": "research", "NodeId": node, "Command": ["x"], "TimeoutSeconds": 0},
            "ValidationException",
            "TimeoutSeconds",
        ),
        ({"NodeId": node, "Command": ["x"]}, "ValidationException", "ClusterName"),
        ({"ClusterName": "nope", "NodeId": node, "Command": ["x"]}, "ResourceNotFound", "nope"),
        (
            {"ClusterName": "research", "NodeId": "i-0", "Command": ["x"]},
            "ResourceNotFound",
            "i-0",
        ),
    ]
    for body, code, words in cases:
        status, answer = post(server, body)
        assert (status, answer["__type"]) == (400, code), (body, answer)
        assert words in answer["message"], (body, answer)

    # A node still running its OnCreate script is Pending: nothing runs on it yet.
    client = server.client()
    waiting = group("waits", 1)
    waiting["LifeCycleConfig"]["OnCreate"] = "waits.sh"
    client.create_cluster(ClusterName="slow", InstanceGroups=[waiting])
    [pending] = wait_nodes(server, client, "slow", ["Pending"])
    status, answer = post(
        server, {"ClusterName": "slow", "NodeId": pending["InstanceId"], "Command": ["id"]}
    )
    assert (status, answer["__type"]) == (400, "ValidationException")
    assert "is Pending" in answer["message"]
    instance_id = pending["InstanceId"]
    root = next((server.data_dir / "instances").glob(f"*-{instance_id}/{instance_id}"))
    # Once its OnCreate runs (its tree laid out), it may go on.
    deadline = time.monotonic() + 60
    while not (root / "opt/ml/input/data/lifecycle/waits.sh").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (root / "opt" / "ml" / "go").touch()
    wait_nodes(server, client, "slow", ["Running"])
    assert run_on(server, "slow", pending["InstanceId"], "hostname")[0] == 0


def test_the_cli(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    done = cli(server, "clusters", "exec", "research", node, "--", "sh", "-c", "echo out; exit 3")
    assert (done.returncode, done.stdout) == (3, "out\n"), done.stderr
    done = cli(
        server, "clusters", "exec", "--stdin", "research", node, "--", "wc", "-c", stdin="abc"
    )
    assert (done.returncode, done.stdout.strip()) == (0, "3"), done.stderr
    done = cli(server, "clusters", "exec", "research", "i-0", "--", "true")
    assert done.returncode == 1 and "ResourceNotFound" in done.stderr
    # `clusters shell` (a terminal) is tested in test_cluster_shell.py.


def test_a_node_that_goes_ends_its_commands(manual_server: DockyardServer) -> None:
    import threading

    server = manual_server
    node = up(server)
    answers: list[tuple[int, dict[str, Any]]] = []
    command = ["sh", "-c", "touch /opt/ml/started; exec sleep 600"]
    body = {"ClusterName": "research", "NodeId": node, "Command": command}
    running = threading.Thread(target=lambda: answers.append(post(server, body)))
    running.start()
    started = next((server.data_dir / "instances").glob(f"*-{node}/{node}")) / "opt/ml/started"
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and not answers, answers
        time.sleep(0.05)
    client = server.client()
    client.delete_cluster(ClusterName="research")
    wait_cluster(server, client, "research", "Gone")
    running.join(timeout=120)
    [(status, answer)] = answers
    # Killed with the node (128 + SIGKILL), or the node was gone before it answered.
    assert (status, answer.get("ExitCode")) == (200, 137) or answer["__type"] == (
        "ConflictException"
    ), answer


def test_a_signed_command_runs_once(manual_server: DockyardServer) -> None:
    """A captured exec request (a proxy's log, a shared terminal) sent again would run
    its command again, with its stdin, for up to 15 minutes: each signature is spent."""
    server = manual_server
    node = up(server)
    body = {
        "ClusterName": "research",
        "NodeId": node,
        "Command": ["sh", "-c", "echo ran >> /opt/ml/runs; cat /opt/ml/runs | wc -l"],
    }
    data, headers = signed_exec(server, body)
    status, answer = send_exec(server, data, headers)
    assert status == 200 and base64.b64decode(answer["Output"]) == b"1\n", answer
    for _ in range(2):
        status, answer = send_exec(server, data, headers)
        assert (status, answer["__type"]) == (403, "InvalidSignatureException"), answer
        assert "already used" in answer["message"]
    assert run_on(server, "research", node, "cat", "/opt/ml/runs") == (0, "ran\n")
    # The same command signed anew runs (the CLI signs every call anew, and twice in
    # one second too).
    assert post(server, body)[0] == 200
    for _ in range(2):
        done = cli(server, "clusters", "exec", "research", node, "--", "true")
        assert done.returncode == 0, done.stderr
