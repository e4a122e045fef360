"""An interactive shell on a HyperPod node (`dockyard clusters shell`, SSM's
start-session on AWS): a terminal streamed both ways through a signed WebSocket, to a
shell in a fresh sandbox of the node, for the node's account only."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from typing import Any
from urllib.parse import urlencode

import pytest

from dockyard.compute.backends.local import SANDBOX_UID_BASE
from tests.e2e.test_cluster_exec import cli, post, run_on, up
from tests.harness import REGION, DockyardServer, run_cli

PATH = "/_dockyard/clusters/shell"
ON_CREATE = "#!/bin/sh\necho ready > /opt/ml/marker.txt\n"


@pytest.fixture(autouse=True)
def life_cycle(manual_server: DockyardServer) -> None:
    scripts = manual_server.data_dir / "s3" / "scripts" / "lifecycle"
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "on_create.sh").write_text(ON_CREATE)


def signed(
    server: DockyardServer, query: dict[str, Any], key: tuple[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The shell's WebSocket URL and the headers that sign its upgrade, as the CLI's."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    access_key, secret = key or server.credentials()
    url = f"{server.endpoint}{PATH}?{urlencode(query)}"
    request = AWSRequest(
        method="GET", url=url, headers={"X-Dockyard-Nonce": secrets.token_hex(16)}
    )
    SigV4Auth(Credentials(access_key, secret), "sagemaker", REGION).add_auth(request)
    return "ws" + url.removeprefix("http"), dict(request.prepare().headers)


def read_until(connection: Any, needle: bytes, deadline: float = 60) -> bytes:
    seen = b""
    give_up = time.monotonic() + deadline
    while needle not in seen:
        left = give_up - time.monotonic()
        assert left > 0, seen
        try:
            message = connection.recv(timeout=left)
        except TimeoutError:
            continue
        assert isinstance(message, bytes), message
        seen += message
    return seen


def sandbox_processes(uid: int) -> list[str]:
    done = subprocess.run(
        ["pgrep", "-a", "-u", str(uid)], capture_output=True, text=True, check=False
    )
    return done.stdout.splitlines()


def test_the_cli_gets_a_terminal_on_the_node(manual_server: DockyardServer) -> None:
    server = manual_server
    node = up(server)
    done = cli(
        server, "clusters", "shell", "research", node, stdin="tty; hostname; id -u; exit 3\n"
    )
    assert done.returncode == 3, (done.stdout, done.stderr)
    lines = [line.strip() for line in done.stdout.replace("\r", "").splitlines()]
    assert re.search(r"(^|\$ )/dev/pts/\d+$", "\n".join(lines), re.M), done.stdout
    assert node in lines, done.stdout
    uids = [int(line) for line in lines if line.isdigit()]
    assert uids and all(uid >= SANDBOX_UID_BASE for uid in uids), done.stdout
    # Its end of input ends the shell, with the last command's status.
    done = cli(server, "clusters", "shell", "research", node, stdin="cat /opt/ml/marker.txt\n")
    assert done.returncode == 0 and "ready" in done.stdout, (done.stdout, done.stderr)
    # Another account finds no such cluster; nor is a node that does not exist.
    done = cli(server, "clusters", "shell", "research", "i-0", stdin="exit\n")
    assert done.returncode == 1 and "ResourceNotFound" in done.stderr, done.stderr


def test_the_websocket_is_signed_and_sized(manual_server: DockyardServer) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    server = manual_server
    node = up(server)
    query = {"ClusterName": "research", "NodeId": node, "Rows": 30, "Cols": 100}
    url, headers = signed(server, query)
    with connect(url, additional_headers=headers, open_timeout=60) as connection:
        connection.send(b"stty size; echo end-$((6*7))\n")
        assert b"30 100" in read_until(connection, b"end-42")
        connection.send(json.dumps({"Rows": 40, "Cols": 132}))
        connection.send(b"stty size; echo end-$((6*8))\n")
        assert b"40 132" in read_until(connection, b"end-48")
        # Ctrl-C reaches what runs in the foreground (cat, reading the terminal).
        # (Typed once the shell has handed the terminal over - its echo says so: what is
        # typed while readline has the terminal raw is no line to cat's canonical read.)
        connection.send(b"echo cat-$((3*3)); cat\n")
        read_until(connection, b"cat-9")
        connection.send(b"typed\n")
        read_until(connection, b"typed\r\ntyped")
        connection.send(b"\x03")
        # (Ctrl-C also drops what was typed ahead: the next line waits for the prompt.)
        seen = read_until(connection, b"^C")
        if b"$ " not in seen.split(b"^C", 1)[1]:
            read_until(connection, b"$ ")
        connection.send(b"echo after-$((2*21))\n")
        read_until(connection, b"after-42")
        connection.send(b"exit 4\n")
        outcome = None
        while outcome is None:
            message = connection.recv(timeout=60)
            if isinstance(message, str):
                outcome = json.loads(message)
        assert outcome == {"ExitCode": 4}

    # Another account's key: the cluster is not found, before any upgrade.
    _, stranger = server.new_account("stranger")
    url, headers = signed(server, query, key=stranger)
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers, open_timeout=60)
    assert refused.value.response.status_code == 400
    assert json.loads(refused.value.response.body)["__type"] == "ResourceNotFound"
    # Signed with the wrong secret, or not signed at all.
    url, headers = signed(server, query, key=(server.credentials()[0], "not-the-secret"))
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers, open_timeout=60)
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=60)
    assert refused.value.response.status_code == 403
    # Bad sizes are refused with a reason.
    url, headers = signed(server, {**query, "Rows": 0})
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers, open_timeout=60)
    answer = json.loads(refused.value.response.body)
    assert answer["__type"] == "ValidationException" and "Rows" in answer["message"]


def test_a_client_that_goes_leaves_no_shell_behind(manual_server: DockyardServer) -> None:
    from websockets.sync.client import connect

    server = manual_server
    node = up(server)
    code, uid_text = run_on(server, "research", node, "id", "-u")
    uid = int(uid_text)
    query = {"ClusterName": "research", "NodeId": node}
    url, headers = signed(server, query)
    with connect(url, additional_headers=headers, open_timeout=60) as connection:
        connection.send(b"sleep 1234 & echo started-$((40+2))\n")
        read_until(connection, b"started-42")
        # The background child may not have become `sleep` yet when the echo is read.
        deadline = time.monotonic() + 60
        while not any("sleep 1234" in line for line in sandbox_processes(uid)):
            assert time.monotonic() < deadline, sandbox_processes(uid)
            time.sleep(0.05)
    # Gone without a word (the connection closed, the shell still running).
    deadline = time.monotonic() + 60
    while sandbox_processes(uid):
        assert time.monotonic() < deadline, sandbox_processes(uid)
        time.sleep(0.1)


def test_a_node_that_goes_ends_its_shell(manual_server: DockyardServer) -> None:
    """The node is let go (its cluster deleted) while a shell is open: the session ends
    with the node's stop, and nothing of the shell is left."""
    from websockets.sync.client import connect

    server = manual_server
    node = up(server)
    _, uid_text = run_on(server, "research", node, "id", "-u")
    uid = int(uid_text)
    url, headers = signed(server, {"ClusterName": "research", "NodeId": node})
    with connect(url, additional_headers=headers, open_timeout=60) as connection:
        connection.send(b"echo open-$((40+2))\n")
        read_until(connection, b"open-42")
        server.client().delete_cluster(ClusterName="research")
        outcome: dict[str, Any] | None = None
        deadline = time.monotonic() + 90
        while outcome is None:
            assert time.monotonic() < deadline, "the shell outlived its node"
            try:
                message = connection.recv(timeout=1)
            except TimeoutError:
                continue
            if isinstance(message, str):
                outcome = json.loads(message)
        # Ended by the node's stop: killed, as a container's process is (137).
        assert outcome == {"ExitCode": 137}, outcome
    deadline = time.monotonic() + 60
    while sandbox_processes(uid):
        assert time.monotonic() < deadline, sandbox_processes(uid)
        time.sleep(0.1)


def test_a_signed_upgrade_opens_one_shell(manual_server: DockyardServer) -> None:
    """A captured upgrade request replayed is no second shell: each signature once."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    server = manual_server
    node = up(server)
    url, headers = signed(server, {"ClusterName": "research", "NodeId": node})
    with connect(url, additional_headers=headers, open_timeout=60) as first:
        first.send(b"echo one-$((40+2))\n")
        read_until(first, b"one-42")
        for _ in range(2):
            with pytest.raises(InvalidStatus) as refused:
                connect(url, additional_headers=headers, open_timeout=60)
            assert refused.value.response.status_code == 403
            answer = json.loads(refused.value.response.body)
            assert answer["__type"] == "InvalidSignatureException", answer
            assert "already used" in answer["message"]
        first.send(b"exit 0\n")
    # Signed anew, another shell opens.
    url, headers = signed(server, {"ClusterName": "research", "NodeId": node})
    with connect(url, additional_headers=headers, open_timeout=60) as second:
        second.send(b"echo two-$((40+2))\n")
        read_until(second, b"two-42")


def test_a_disabled_key_keeps_no_shell(manual_server: DockyardServer) -> None:
    """`dockyard keys disable` ends the shells the key opened, and it opens no more
    and runs nothing, at once; `dockyard keys enable` lets it in again."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    server = manual_server
    node = up(server)
    account_id = server.client().describe_cluster(ClusterName="research")["ClusterArn"]
    key = server.new_key(account_id.split(":")[4])
    _, uid_text = run_on(server, "research", node, "id", "-u", key=key)
    query = {"ClusterName": "research", "NodeId": node}
    url, headers = signed(server, query, key=key)
    uid = int(uid_text)
    with connect(url, additional_headers=headers, open_timeout=60) as connection:
        connection.send(b"sleep 4321 & echo open-$((40+2))\n")
        read_until(connection, b"open-42")
        deadline = time.monotonic() + 60
        while not any("sleep 4321" in line for line in sandbox_processes(uid)):
            assert time.monotonic() < deadline, sandbox_processes(uid)
            time.sleep(0.05)
        run_cli("keys", "disable", key[0], data_dir=server.data_dir)
        outcome: dict[str, Any] | None = None
        deadline = time.monotonic() + 60
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                assert time.monotonic() < deadline, "the shell outlived its key"
                try:
                    message = connection.recv(timeout=1)
                except TimeoutError:
                    continue
                if isinstance(message, str):
                    outcome = json.loads(message)
        assert outcome is not None and outcome["__type"] == "UnrecognizedClientException"
        assert key[0] in outcome["message"]
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    # Nothing of the shell is left on the node.
    deadline = time.monotonic() + 60
    while any("sleep 4321" in line for line in sandbox_processes(uid)):
        assert time.monotonic() < deadline, sandbox_processes(uid)
        time.sleep(0.1)
    url, headers = signed(server, query, key=key)
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers, open_timeout=60)
    assert refused.value.response.status_code == 403
    command = {"ClusterName": "research", "NodeId": node, "Command": ["true"]}
    status, answer = post(server, command, key=key)
    assert (status, answer["__type"]) == (403, "UnrecognizedClientException")
    run_cli("keys", "enable", key[0], data_dir=server.data_dir)
    assert post(server, command, key=key)[0] == 200
