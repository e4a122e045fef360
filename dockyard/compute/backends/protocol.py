"""The backend protocol: what the control plane asks of the machines that run jobs.

Every call returns quickly and is safe to repeat; work that takes time (staging data,
training, uploading) happens in the instances themselves, and `poll` reports where
they are. A handle is the backend's name for one instance of one job.

What an instance reports reaches the rest of dockyard through this seam only, in one
shape whichever backend ran it: its state (`poll`: an `InstanceState`), its log
(`open_log`: an `InstanceLog`, events in order with their times), its metrics
(`metrics`: the latest value of each of its MetricDefinitions), and what it was told
to run (`launched_spec`). Nobody else reads a backend's files.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol

from dockyard.compute.wire.exec import ExecRequest
from dockyard.compute.wire.log_format import Event
from dockyard.compute.wire.state import InstanceState
from dockyard.domain.metrics import Latest


class InstanceLog(Protocol):
    """One instance's log as its agent wrote it (see `wire.log_format.LogReader`): a snapshot
    of its events, addressed by position, each with its time (epoch ms). A log that
    does not exist has no events."""

    def __len__(self) -> int: ...

    def timestamp(self, position: int) -> int:
        """The time of event `position`."""
        ...

    def first_at(self, timestamp_ms: int) -> int:
        """The position of the first event at or after the time."""
        ...

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        """How far from `start` (or back from `stop`) events fit in `budget` bytes."""
        ...

    def read(self, start: int, stop: int) -> list[Event]: ...

    def lines(self, start: int, stop: int) -> Iterator[tuple[int, int, bytes]]:
        """(timestamp, position, raw line) for [start, stop), a chunk at a time."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> InstanceLog: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


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

    def poll(self, handle: str) -> InstanceState:
        """The instance's state as its agent reported it, or LAUNCHING."""
        ...

    def logged_hosts(self, job_key: str) -> list[str]:
        """The hosts of `job_key`'s instances that have a log, algo-1 first."""
        ...

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        """(job key, host) of every instance with a log whose job key starts with the
        prefix (a cluster's nodes: keys `<account>-<region>-cluster-<id>-<node>`)."""
        ...

    def open_log(self, job_key: str, host: str) -> InstanceLog:
        """The instance's log (none of its events if it has none); close it after."""
        ...

    def metrics(self, job_key: str, host: str) -> Latest:
        """The instance's latest metric values, as its agent scraped them."""
        ...

    def launched_spec(self, job_key: str, host: str) -> dict[str, Any] | None:
        """What the instance was launched to run (its host spec), None if unknown."""
        ...

    def stop(self, handle: str) -> None:
        """Ask the instance to stop its job (SIGTERM, grace, SIGKILL)."""
        ...

    def purge(self, job_key: str) -> bool:
        """Remove everything `job_key`'s instances left (a deleted job's), but what an
        instance still running keeps (a warm pool handed on lives in its home); True
        once nothing of it is left. Safe to repeat."""
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
        socket speaking `agent.shell`'s frames. OSError if the node does not answer."""
        ...
