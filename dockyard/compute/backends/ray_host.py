"""A Ray node's side of the Ray backend (`backends.ray_cluster`): the actor that holds one
instance, a `LocalBackend` of its node running it with the same agent and sandbox; the
relay it opens for a cluster node's shell; an instance's log read through it; and
throwing away a data dir's actors. Ray is imported only inside: importing this module
does not start it."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from dockyard.compute.wire.log_format import Event
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import ENDED_PHASES

# How long one call to an actor may take before the instance counts as unreachable.
CALL_SECONDS = 30.0
# The one-time secret a node's shell relay wants first (`shell_relay`).
TOKEN_BYTES = 32
# Phases after which an instance does nothing more.
ENDED = ENDED_PHASES


def namespace(data_dir: Path) -> str:
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]
    return f"dockyard-{digest}"


def host_class() -> Any:
    """The actor class, made on first use: importing Ray is slow, and only a server
    with `--backend ray` needs it."""
    import ray

    from dockyard.compute.backends.gpus import GpuShares
    from dockyard.compute.backends.local import LocalBackend

    @ray.remote(num_cpus=0, max_restarts=0)
    class InstanceHost:
        """One instance on its node, run by a LocalBackend of the node's own."""

        def __init__(self, node_data_dir: str) -> None:
            self.node_data_dir = Path(node_data_dir)
            # The instance is this actor's: its agent, sandboxes and slirp4netns end
            # with the actor's process, however it ends (ray.kill, its node or the
            # cluster shut down) - not left running on a node nothing asks any more.
            self.backend = LocalBackend(self.node_data_dir, agents_end_with_owner=True)
            # (job key, host) of each instance it ran: the pool's own and its later jobs.
            self.instances: set[tuple[str, str]] = set()

        def call(self, method: str, *args: Any) -> Any:
            if method == "launch":
                self._take_gpus(args[1])
                self.instances.update((args[0], spec.host) for spec in args[1])
            elif method == "assign":
                self.instances.update((args[1], spec.host) for spec in args[2])
            return getattr(self.backend, method)(*args)

        def finished(self) -> bool:
            """Whether all its instances are over: each reported its end and no agent
            of it runs (a warm pool's agent waits for its next job: not over)."""
            if not self.instances:
                return False
            for job_key, host in self.instances:
                handle = self.backend.handle(job_key, host)
                if self.backend.alive(handle):
                    return False
                if self.backend.poll(handle).get("phase") not in ENDED:
                    return False
            return True

        def ran(self) -> list[tuple[str, str]]:
            return sorted(self.instances)

        def pack(self) -> list[tuple[str, str, dict[str, bytes]]]:
            """What its instances leave behind (logs, metrics, spec, state), to keep."""
            return [(key, host, self.backend.pack(key, host)) for key, host in self.instances]

        def _take_gpus(self, specs: list[JobSpec]) -> None:
            """The GPUs Ray gave this actor (its `num_gpus`) are its instance's share:
            the LocalBackend hands them out as it does a fleet group's `gpus`."""
            ids = tuple(int(i) for i in ray.get_gpu_ids() if str(i).isdigit())
            if not ids:
                return
            actor = ray.get_runtime_context().get_actor_id()
            self.backend.gpus = GpuShares(
                self.node_data_dir / "gpus" / "ray" / str(actor),
                {spec.pool: [ids] for spec in specs},
            )

        def log(self, job_key: str, host: str, operation: str, *args: Any) -> Any:
            with self.backend.open_log(job_key, host) as reader:
                if operation == "len":
                    return len(reader)
                if operation == "read":
                    return [(e.timestamp, e.message) for e in reader.read(*args)]
                if operation == "search":
                    return list(reader.search(*args))
                if operation == "fit":
                    start, stop, budget, from_end = args
                    return reader.fit(start, stop, budget, from_end=from_end)
                return getattr(reader, operation)(*args)

        def shell_relay(self, job_key: str, host: str) -> tuple[str, int, bytes]:
            """A listener on the node for one connection that starts with the token
            answered here; it is then joined to a new session with the agent. Anyone
            else reaching the port (another job's code, through its way out) is cut off."""
            upstream = self.backend.shell_connect(self.backend.handle(job_key, host))
            address = ray.util.get_node_ip_address()
            listener = socket.create_server((address, 0))
            token = secrets.token_bytes(TOKEN_BYTES)
            threading.Thread(
                target=relay_one, args=(listener, token, upstream), daemon=True
            ).start()
            return address, int(listener.getsockname()[1]), token

        def endpoint(self) -> tuple[str, int]:
            """Where this instance's agent takes its job network's datagrams: the node's
            address and a port free on it now (the agent binds it as it starts)."""
            address = ray.util.get_node_ip_address()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.bind((address, 0))
                return address, int(probe.getsockname()[1])

    return InstanceHost


def relay_one(listener: socket.socket, token: bytes, upstream: socket.socket) -> None:
    """Accept connections until one brings the token (or none does within the call
    time), then carry bytes both ways between it and `upstream` until either ends."""
    listener.settimeout(CALL_SECONDS)
    client = None
    try:
        while client is None:
            candidate, _ = listener.accept()
            candidate.settimeout(CALL_SECONDS)
            try:
                said = b""
                while len(said) < len(token):
                    chunk = candidate.recv(len(token) - len(said))
                    if not chunk:
                        break
                    said += chunk
            except OSError:
                said = b""
            if hmac.compare_digest(said, token):
                candidate.settimeout(None)
                client = candidate
            else:
                candidate.close()
    except OSError:
        upstream.close()
        return
    finally:
        listener.close()

    def pump(source: socket.socket, sink: socket.socket) -> None:
        """One direction; its end is passed on as an end of writing (the other
        direction goes on), a broken connection as the end of both."""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            ends = [(sink, socket.SHUT_WR)]
        except OSError:
            ends = [(sink, socket.SHUT_RDWR), (source, socket.SHUT_RDWR)]
        for end, how in ends:
            try:
                end.shutdown(how)
            except OSError:
                pass

    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


class ActorLog:
    """An instance's log read through its actor, one call per operation (each a fresh
    snapshot: a log only grows, so positions stay valid)."""

    def __init__(self, get: Callable[[Any], Any], actor: Any, job_key: str, host: str) -> None:
        self._get = get
        self._actor = actor
        self._key = (job_key, host)

    def _call(self, operation: str, *args: Any) -> Any:
        return self._get(self._actor.log.remote(*self._key, operation, *args))

    def __len__(self) -> int:
        return int(self._call("len"))

    def timestamp(self, position: int) -> int:
        return int(self._call("timestamp", position))

    def first_at(self, timestamp_ms: int) -> int:
        return int(self._call("first_at", timestamp_ms))

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        return int(self._call("fit", start, stop, budget, from_end))

    def read(self, start: int, stop: int) -> list[Event]:
        return [Event(t, m) for t, m in self._call("read", start, stop)]

    def search(
        self, start: int, stop: int, terms: Sequence[str] = ()
    ) -> Iterator[tuple[int, int, int, str | None]]:
        yield from (tuple(item) for item in self._call("search", start, stop, tuple(terms)))  # type: ignore[misc]

    def close(self) -> None:
        pass

    def __enter__(self) -> ActorLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def end_all(address: str, data_dir: Path) -> None:
    """End every actor and placement group of a data dir's (`local.end_agents` for Ray):
    for throwing a data dir away (tests, benchmarks), never for a server's restart."""
    import ray
    from ray.util.placement_group import get_placement_group, remove_placement_group

    ray.init(
        address=address,
        namespace=namespace(data_dir),
        ignore_reinit_error=True,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        for entry in ray.util.list_named_actors(all_namespaces=False):
            try:
                ray.kill(ray.get_actor(str(entry)))
            except ValueError:
                continue
        for marker in (Path(data_dir) / "ray-placed").glob("*"):
            job_key, _, attempt = marker.name.rpartition(".")
            try:
                remove_placement_group(get_placement_group(f"pg:{job_key}:{attempt}"))
            except ValueError:
                continue
    finally:
        ray.shutdown()
