"""The backend seam: what the control plane asks of the machines that run instances.

`Backend` is the lifecycle only - ten members a new backend must have. Every call
returns quickly and is safe to repeat; work that takes time (staging data, training,
uploading) happens in the instances themselves, and `poll` reports where they are. A
handle is the backend's name for one instance of one job; a job key names a job's (or a
cluster node's) instances.

What instances report besides their state - logs, metrics, the spec they were launched
with - is read through the backend's `records` (`InstanceRecords`), in one shape
whichever backend ran them. Nobody else reads a backend's files.

What only some backends can do is a capability they declare by having it: `NodeAccess`
(commands and shells on a running cluster node) and `FleetDiscovery` (the fleet from
what the machines say they are). `node_access`/`fleet_discovery` answer a backend's, or
None.

Everything here is typed with the wire's values (`compute.wire`): nothing of the agent
or the sandbox is imported, so the control plane above never loads them.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from dockyard.compute.wire.exec import ExecRequest
from dockyard.compute.wire.log_format import Event
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import InstanceState
from dockyard.domain.metrics import Latest


class InstanceLog(Protocol):
    """One instance's log: a snapshot of its events, addressed by position, each with its
    time (epoch ms). A log that does not exist has no events."""

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

    def search(
        self, start: int, stop: int, terms: Sequence[str] = ()
    ) -> Iterator[tuple[int, int, int, str | None]]:
        """(timestamp, position, size in bytes, message) of each event in [start, stop),
        a chunk at a time; the message is None where it cannot hold every one of `terms`
        (told without decoding it: a search costs what it reads, not what it decodes)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> InstanceLog: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class InstanceRecords(Protocol):
    """What instances reported, by job key and host, running or ended."""

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

    def launched_spec(self, job_key: str, host: str) -> JobSpec | None:
        """What the instance was launched to run, None if unknown."""
        ...


class Backend(Protocol):
    def launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        """Start one instance per spec (idempotent per job key and host, and per
        `attempt`: a later attempt gets fresh instances); answer their handles."""
        ...

    def assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
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

    def stop(self, handle: str) -> None:
        """Ask the instance to stop its job (SIGTERM, grace, SIGKILL)."""
        ...

    def alive(self, handle: str) -> bool:
        """Whether the instance's agent is still running."""
        ...

    def purge(self, job_key: str) -> bool:
        """Remove everything `job_key`'s instances left (a deleted job's), but what an
        instance still running keeps (a warm pool handed on lives in its home); True
        once nothing of it is left. Safe to repeat."""
        ...

    @property
    def records(self) -> InstanceRecords:
        """What the backend's instances reported (logs, metrics, specs)."""
        ...


@runtime_checkable
class NodeAccess(Protocol):
    """Commands and shells on a running cluster node (what SSM is to a HyperPod node)."""

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
        socket speaking `wire.shell`'s frames. OSError if the node does not answer."""
        ...


@runtime_checkable
class FleetDiscovery(Protocol):
    """A backend whose machines say what they are: the fleet groups they make up."""

    def discover(self, gpus_of: Mapping[str, int]) -> list[dict[str, Any]]:
        """Fleet groups (`domain.fleet`'s config shape) from the machines, given each
        instance type's GPU count."""
        ...


def node_access(backend: object) -> NodeAccess | None:
    return backend if isinstance(backend, NodeAccess) else None


def fleet_discovery(backend: object) -> FleetDiscovery | None:
    return backend if isinstance(backend, FleetDiscovery) else None
