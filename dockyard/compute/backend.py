"""The backend protocol: what the control plane asks of the machines that run jobs.

Every call returns quickly and is safe to repeat; work that takes time (staging data,
training, uploading) happens in the instances themselves, and `poll` reports where
they are. A handle is the backend's name for one instance of one job.
"""

from __future__ import annotations

import socket
from typing import Any, Protocol

from dockyard.compute.agent_exec import ExecRequest


class Backend(Protocol):
    def launch(self, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        """Start one instance per host spec (idempotent per job_key); answer their handles."""
        ...

    def assign(self, home_key: str, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        """Run a job on a warm pool's instances (those launched for `home_key`)."""
        ...

    def release(self, home_key: str, hosts: list[str]) -> bool:
        """Terminate a warm pool's instances; True once none is running (idempotent)."""
        ...

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        """Whether every instance of a warm pool is still running."""
        ...

    def handle(self, job_key: str, host: str) -> str:
        """The handle of `host` of `job_key`'s instances, launched or not."""
        ...

    def poll(self, handle: str) -> dict[str, Any]:
        """The instance's state (the agent's state.json), or {"phase": "launching"}."""
        ...

    def stop(self, handle: str) -> None:
        """Ask the instance to stop its job (SIGTERM, grace, SIGKILL)."""
        ...

    def alive(self, handle: str) -> bool:
        """Whether the instance's agent is still running."""
        ...

    def exec_start(self, handle: str, request: ExecRequest) -> str:
        """Hand a command to a running cluster node; answer its id for `exec_result`."""
        ...

    def exec_result(self, handle: str, exec_id: str) -> dict[str, Any] | None:
        """The command's {"exit_code", "output" (bytes), "truncated"}, or None while it
        runs (call again)."""
        ...

    def exec_cancel(self, handle: str, exec_id: str) -> None:
        """Forget a command the caller gave up on, if the node has not taken it yet."""
        ...

    def shell_connect(self, handle: str) -> socket.socket:
        """A new interactive shell session on a running cluster node: a connected
        socket speaking `agent_shell`'s frames. OSError if the node does not answer."""
        ...
