"""Running a command on a cluster's node, for the node's account: what `aws ssm
start-session` is to a HyperPod node (`dockyard clusters exec|shell`).

The node is found in the caller's account only (another account's cluster is not
found, as for every cluster operation), must be Running, and the command is handed
to its agent through the backend, which runs it in a fresh sandbox of the node.
Unlike the API's operations the request waits for the command, as `exec` answers with
its output: the caller (`api.cluster_exec`) asks `outcome` again and again, each look
a short call, and waits between them on the event loop, so a command that runs for an
hour holds no thread of the server's.
"""

from __future__ import annotations

import base64
import binascii
import socket
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.clock import monotonic
from dockyard.compute.backends.protocol import Backend, NodeAccess, node_access
from dockyard.compute.wire.exec import MAX_STDIN_BYTES, MAX_TIMEOUT_SECONDS, ExecRequest
from dockyard.domain.clusters import NodeStatus
from dockyard.services import clusters
from dockyard.services.errors import (
    ConflictException,
    ResourceNotFound,
    ServiceError,
    ValidationException,
)
from dockyard.store.tables import ClusterNode

DEFAULT_TIMEOUT_SECONDS = 300.0
MAX_ARGS = 4096
MAX_ARGV_BYTES = 256 * 1024
# How long past the command's own timeout the caller waits for the agent's answer.
GRACE_SECONDS = 30.0


class ExecTimeout(ServiceError):
    code = "RequestTimeoutException"
    status = 504


@dataclass(frozen=True)
class NodeTarget:
    """A Running node of the caller's, as the backend names it."""

    cluster_arn: str
    cluster_name: str
    instance_id: str
    handle: str


def command_from(params: dict[str, Any]) -> ExecRequest:
    """The command a request asks for: {"Command": [argv...], "Stdin": base64,
    "TimeoutSeconds": n, "WorkingDirectory": "/abs/dir"} (all but Command optional)."""
    argv = params.get("Command")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValidationException("Command must be a non-empty list of strings (the argv)")
    if len(argv) > MAX_ARGS or sum(len(a.encode()) for a in argv) > MAX_ARGV_BYTES:
        raise ValidationException(
            f"Command is too long: at most {MAX_ARGS} arguments and {MAX_ARGV_BYTES} bytes"
        )
    if any("\0" in a for a in argv) or not argv[0]:
        raise ValidationException("Command's arguments must be non-empty and hold no NUL")
    stdin_text = params.get("Stdin", "")
    if not isinstance(stdin_text, str):
        raise ValidationException("Stdin must be a base64 string")
    try:
        stdin = base64.b64decode(stdin_text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValidationException(f"Stdin must be base64: {exc}") from exc
    if len(stdin) > MAX_STDIN_BYTES:
        raise ValidationException(
            f"Stdin must be at most {MAX_STDIN_BYTES} bytes (got {len(stdin)})"
        )
    timeout = params.get("TimeoutSeconds", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 1 <= timeout <= MAX_TIMEOUT_SECONDS
    ):
        raise ValidationException(
            f"TimeoutSeconds must be a number from 1 to {MAX_TIMEOUT_SECONDS:g} (got {timeout!r})"
        )
    cwd = params.get("WorkingDirectory")
    if cwd is not None and (
        not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd or len(cwd) > 4096
    ):
        raise ValidationException("WorkingDirectory must be an absolute path")
    return ExecRequest(argv=list(argv), stdin=stdin, timeout=float(timeout), cwd=cwd)


def locate(
    session: Session,
    backend: Backend,
    account_id: str,
    region: str,
    cluster_name: Any,
    node_id: Any,
) -> NodeTarget:
    """The caller's Running node `node_id` (an instance id) of cluster `cluster_name`."""
    if not isinstance(cluster_name, str) or not cluster_name:
        raise ValidationException("ClusterName must name a cluster (its name or ARN)")
    if not isinstance(node_id, str) or not node_id:
        raise ValidationException("NodeId must name a node (its instance id, i-...)")
    cluster = clusters.find(session, account_id, region, cluster_name)
    node = session.scalar(
        select(ClusterNode).where(
            ClusterNode.cluster_id == cluster.id, ClusterNode.instance_id == node_id
        )
    )
    if node is None:
        raise ResourceNotFound(f"Node {node_id!r} is not a node of cluster {cluster.name}")
    if node.status != NodeStatus.RUNNING.value or node.shutdown_requested:
        status = NodeStatus.SHUTTING_DOWN.value if node.shutdown_requested else node.status
        raise ValidationException(
            f"Node {node_id} of cluster {cluster.name} is {status}; commands run only on a "
            "Running node"
        )
    key = clusters.node_key(cluster, node)
    return NodeTarget(cluster.arn, cluster.name, node.instance_id, backend.handle(key, node_id))


def _access(backend: Backend) -> NodeAccess:
    """The backend's way onto its nodes; a backend without one reaches none."""
    access = node_access(backend)
    if access is None:
        raise ConflictException("This server's backend cannot run commands on a node")
    return access


def open_shell(backend: Backend, target: NodeTarget) -> socket.socket:
    """A new interactive shell session on the node (`wire.shell`'s frames)."""
    if backend.poll(target.handle).get("phase") != "running" or not backend.alive(target.handle):
        raise ConflictException(
            f"Node {target.instance_id} of cluster {target.cluster_name} is not up; "
            "shells run only on a Running node"
        )
    try:
        return _access(backend).shell_connect(target.handle)
    except OSError as exc:
        raise ConflictException(
            f"Node {target.instance_id} of cluster {target.cluster_name} does not answer: "
            f"{exc.strerror or exc}"
        ) from exc


def start(backend: Backend, target: NodeTarget, request: ExecRequest) -> str:
    """Hand the command to the node's agent; answer its id, for `outcome`."""
    if backend.poll(target.handle).get("phase") != "running" or not backend.alive(target.handle):
        raise ConflictException(
            f"Node {target.instance_id} of cluster {target.cluster_name} is not up; "
            "commands run only on a Running node"
        )
    return _access(backend).exec_start(target.handle, request)


def outcome(
    backend: Backend, target: NodeTarget, exec_id: str, request: ExecRequest, deadline: float
) -> dict[str, Any] | None:
    """The command's exit code and output once it ended, None while it runs (ask again
    later: each look is short, so the caller waits between looks without holding a
    thread). A node that stopped, or no answer by `deadline` (monotonic), cancels it."""
    result = _access(backend).exec_result(target.handle, exec_id)
    if result is not None:
        return {
            "ExitCode": result["exit_code"],
            "Output": base64.b64encode(result["output"]).decode(),
            "OutputTruncated": result["truncated"],
        }
    if not backend.alive(target.handle):
        _access(backend).exec_cancel(target.handle, exec_id)
        raise ConflictException(f"Node {target.instance_id} stopped before the command finished")
    if monotonic() > deadline:
        _access(backend).exec_cancel(target.handle, exec_id)
        raise ExecTimeout(
            f"Node {target.instance_id} did not answer within "
            f"{request.timeout + GRACE_SECONDS:g} seconds"
        )
    return None


def cancel(backend: Backend, target: NodeTarget, exec_id: str) -> None:
    """Stop a command nobody waits for any more."""
    _access(backend).exec_cancel(target.handle, exec_id)
