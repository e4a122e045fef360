"""The Ray backend: instances on a Ray cluster's nodes instead of this host's processes.

Each instance is a detached, named Ray actor (`<job key>/<host>`, in a namespace of this
data dir's own) that holds a `LocalBackend` of its node and runs its one instance with
it: the same agent, sandbox, `/opt/ml` contract and GPU shares as locally, on whichever
node Ray placed the actor. A job's instances are placed together in a detached
placement group (`pg:<job key>`; STRICT_SPREAD for several hosts, so `algo-1..N` are on
different nodes).

What an instance reports reaches the control plane through actor calls, the backend
seam's shape (`InstanceState`, `InstanceLog` operations, metrics, its spec). An actor
that is gone - killed, or its node dead - is an instance that is not alive: the jobs
reconciler makes that an infrastructure failure. Actors are named and detached, so a
restarted server finds them again (`ray.get_actor`).

A warm pool's next job runs on the pool's own actor: an alias (the job's instance →
the pool's actor) is kept in the data dir. Finished instances' actors stay until their
pool is released (their logs are read from them): see docs/status.md for what is still
to come (shipping logs back, cross-node rendezvous, fleet discovery, Ray GPUs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from dockyard.compute.agent_exec import ExecRequest
from dockyard.compute.instance_state import LAUNCHING, InstanceState
from dockyard.compute.log_index import Event
from dockyard.compute.private_files import write_private
from dockyard.domain.metrics import Latest

log = logging.getLogger(__name__)

# How long one call to an actor may take before the instance counts as unreachable.
CALL_SECONDS = 30.0
# How long a new job's placement group may wait for room on the cluster.
PLACEMENT_SECONDS = 120.0


def namespace(data_dir: Path) -> str:
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]
    return f"dockyard-{digest}"


def _host_class() -> Any:
    """The actor class, made on first use: importing Ray is slow, and only a server
    with `--backend ray` needs it."""
    import ray

    from dockyard.compute.local import LocalBackend

    @ray.remote(num_cpus=0, max_restarts=0)
    class InstanceHost:
        """One instance on its node, run by a LocalBackend of the node's own."""

        def __init__(self, node_data_dir: str) -> None:
            self.backend = LocalBackend(Path(node_data_dir))

        def call(self, method: str, *args: Any) -> Any:
            return getattr(self.backend, method)(*args)

        def log(self, job_key: str, host: str, operation: str, *args: Any) -> Any:
            with self.backend.open_log(job_key, host) as reader:
                if operation == "len":
                    return len(reader)
                if operation == "read":
                    return [(e.timestamp, e.message) for e in reader.read(*args)]
                if operation == "lines":
                    return list(reader.lines(*args))
                if operation == "fit":
                    start, stop, budget, from_end = args
                    return reader.fit(start, stop, budget, from_end=from_end)
                return getattr(reader, operation)(*args)

        def node(self) -> str:
            return str(ray.get_runtime_context().get_node_id())

    return InstanceHost


class ActorLog:
    """An instance's log read through its actor, one call per operation (each a fresh
    snapshot: a log only grows, so positions stay valid)."""

    def __init__(self, backend: RayBackend, actor: Any, job_key: str, host: str) -> None:
        self._backend = backend
        self._actor = actor
        self._key = (job_key, host)

    def _call(self, operation: str, *args: Any) -> Any:
        if self._actor is None:
            return 0 if operation in ("len", "first_at", "fit") else []
        return self._backend.get(self._actor.log.remote(*self._key, operation, *args))

    def __len__(self) -> int:
        return int(self._call("len") or 0)

    def timestamp(self, position: int) -> int:
        return int(self._call("timestamp", position))

    def first_at(self, timestamp_ms: int) -> int:
        return int(self._call("first_at", timestamp_ms))

    def fit(self, start: int, stop: int, budget: int, *, from_end: bool = False) -> int:
        if self._actor is None:
            return start
        return int(
            self._backend.get(
                self._actor.log.remote(*self._key, "fit", start, stop, budget, from_end)
            )
        )

    def read(self, start: int, stop: int) -> list[Event]:
        return [Event(t, m) for t, m in self._call("read", start, stop)]

    def lines(self, start: int, stop: int) -> Iterator[tuple[int, int, bytes]]:
        yield from (tuple(item) for item in self._call("lines", start, stop))  # type: ignore[misc]

    def close(self) -> None:
        pass

    def __enter__(self) -> ActorLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class RayBackend:
    def __init__(self, address: str, data_dir: Path, node_data_dir: Path | None = None) -> None:
        import ray

        self._ray = ray
        self.data_dir = Path(data_dir).resolve()
        # Where each node keeps its instances' roots (the same path on every node).
        self.node_data_dir = str((node_data_dir or self.data_dir).resolve())
        self.namespace = namespace(self.data_dir)
        ray.init(
            address=address,
            namespace=self.namespace,
            ignore_reinit_error=True,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        self._host = _host_class()
        self._aliases_file = self.data_dir / "ray-aliases.json"

    # -- actors ---------------------------------------------------------------------

    def get(self, ref: Any, timeout: float = CALL_SECONDS) -> Any:
        return self._ray.get(ref, timeout=timeout)

    def _aliases(self) -> dict[str, str]:
        try:
            found = json.loads(self._aliases_file.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def _alias(self, name: str, home: str | None) -> None:
        aliases = self._aliases()
        if home is None:
            aliases.pop(name, None)
        else:
            aliases[name] = home
        write_private(self._aliases_file, json.dumps(aliases))

    def _actor_name(self, job_key: str, host: str) -> str:
        name = f"{job_key}/{host}"
        return self._aliases().get(name, name)

    def _actor(self, name: str) -> Any:
        try:
            return self._ray.get_actor(name)
        except ValueError:
            return None

    def _call(self, actor: Any, method: str, *args: Any) -> Any:
        return self.get(actor.call.remote(method, *args))

    @staticmethod
    def _split(handle: str) -> tuple[str, str, str]:
        actor, job_key, host = handle.split("#", 2)
        return actor, job_key, host

    def handle(self, job_key: str, host: str) -> str:
        return f"{self._actor_name(job_key, host)}#{job_key}#{host}"

    # -- the Backend protocol ---------------------------------------------------------

    def launch(self, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        """Start each host's actor in the job's placement group; safe to repeat. An
        instance whose actor is gone after it was placed (its placement group exists)
        is lost, never started again: the control plane sees it not alive."""
        from ray.util.placement_group import get_placement_group, placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        new = []
        for spec in host_specs:
            actor = self._actor(f"{job_key}/{spec['host']}")
            if actor is not None:
                self._call(actor, "launch", job_key, [spec])  # idempotent; a resumed job
                continue
            name = f"pg:{job_key}:{spec.get('attempt', 1)}"
            try:
                get_placement_group(name)
            except ValueError:
                new.append(spec)  # never placed: start it
        if new:
            attempt = new[0].get("attempt", 1)
            group = placement_group(
                [{"CPU": 0.01} for _ in new],
                strategy="STRICT_SPREAD" if len(new) > 1 else "PACK",
                name=f"pg:{job_key}:{attempt}",
                lifetime="detached",
            )
            self.get(group.ready(), timeout=PLACEMENT_SECONDS)
            for index, spec in enumerate(new):
                actor = self._host.options(
                    name=f"{job_key}/{spec['host']}",
                    lifetime="detached",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=index
                    ),
                ).remote(self.node_data_dir)
                self._call(actor, "launch", job_key, [spec])
        return [self.handle(job_key, spec["host"]) for spec in host_specs]

    def assign(self, home_key: str, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        handles = []
        for spec in host_specs:
            home = self._actor_name(home_key, spec["host"])
            actor = self._actor(home)
            if actor is None:
                raise RuntimeError(f"the warm pool's instance {home} is gone")
            self._call(actor, "assign", home_key, job_key, [spec])
            self._alias(f"{job_key}/{spec['host']}", home)
            handles.append(self.handle(job_key, spec["host"]))
        return handles

    def release(self, home_key: str, hosts: list[str]) -> bool:
        gone = True
        for host in hosts:
            name = self._actor_name(home_key, host)
            actor = self._actor(name)
            if actor is None:
                continue
            try:
                done = self._call(actor, "release", home_key, [host])
            except self._ray.exceptions.RayError:
                done = True
            if done:
                self._end(actor, name)
            gone = gone and bool(done)
        return gone

    def _end(self, actor: Any, name: str) -> None:
        """The instance is over for good: its actor goes, and its placement group."""
        from ray.util.placement_group import get_placement_group, remove_placement_group

        job_key, _, host = name.rpartition("/")
        spec = None
        try:
            spec = self._call(actor, "launched_spec", job_key, host)
        except self._ray.exceptions.RayError:
            pass
        self._ray.kill(actor)
        try:
            group = get_placement_group(f"pg:{job_key}:{(spec or {}).get('attempt', 1)}")
        except ValueError:
            return
        remove_placement_group(group)

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        return all(self.alive(self.handle(home_key, host)) for host in hosts)

    def poll(self, handle: str) -> InstanceState:
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is None:
            return dict(LAUNCHING)  # type: ignore[return-value]
        try:
            local = self._call(actor, "handle", job_key, host)
            state = self._call(actor, "poll", local)
        except self._ray.exceptions.RayError:
            return dict(LAUNCHING)  # type: ignore[return-value]
        return state if isinstance(state, dict) else dict(LAUNCHING)  # type: ignore[return-value]

    def stop(self, handle: str) -> None:
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is not None:
            try:
                self._call(actor, "stop", self._call(actor, "handle", job_key, host))
            except self._ray.exceptions.RayError:
                pass

    def alive(self, handle: str) -> bool:
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is None:
            return False
        try:
            return bool(self._call(actor, "alive", self._call(actor, "handle", job_key, host)))
        except self._ray.exceptions.RayError:
            return False  # its node died with it: an infrastructure failure

    # -- what instances report --------------------------------------------------------

    def _job_actors(self, prefix: str) -> list[tuple[str, str, str]]:
        """(job key, host, actor name) of every instance whose job key starts with the
        prefix: named actors, and jobs run on a warm pool's actor."""
        found = []
        for entry in self._ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"] if isinstance(entry, dict) else str(entry)
            if isinstance(entry, dict) and entry.get("namespace") != self.namespace:
                continue
            key, _, host = name.rpartition("/")
            if key.startswith(prefix):
                found.append((key, host, name))
        for alias, home in self._aliases().items():
            key, _, host = alias.rpartition("/")
            if key.startswith(prefix):
                found.append((key, host, home))
        return sorted(set(found))

    def logged_hosts(self, job_key: str) -> list[str]:
        hosts: set[str] = set()
        for key, _host, name in self._job_actors(job_key):
            actor = self._actor(name)
            if key == job_key and actor is not None:
                try:
                    hosts.update(self._call(actor, "logged_hosts", job_key))
                except self._ray.exceptions.RayError:
                    continue
        return sorted(hosts, key=lambda h: int(h.removeprefix("algo-")) if h[5:].isdigit() else 0)

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for key, _host, name in self._job_actors(key_prefix):
            actor = self._actor(name)
            if actor is None:
                continue
            try:
                found.update(tuple(x) for x in self._call(actor, "logged_instances", key))
            except self._ray.exceptions.RayError:
                continue
        return sorted(found)

    def open_log(self, job_key: str, host: str) -> ActorLog:
        return ActorLog(self, self._actor(self._actor_name(job_key, host)), job_key, host)

    def metrics(self, job_key: str, host: str) -> Latest:
        actor = self._actor(self._actor_name(job_key, host))
        if actor is None:
            return {}
        try:
            found = self._call(actor, "metrics", job_key, host)
        except self._ray.exceptions.RayError:
            return {}
        return {str(k): (float(v[0]), int(v[1])) for k, v in dict(found).items()}

    def launched_spec(self, job_key: str, host: str) -> dict[str, Any] | None:
        actor = self._actor(self._actor_name(job_key, host))
        if actor is None:
            return None
        try:
            spec = self._call(actor, "launched_spec", job_key, host)
        except self._ray.exceptions.RayError:
            return None
        return spec if isinstance(spec, dict) else None

    # -- cluster nodes' commands: not on Ray yet ----------------------------------------

    def exec_start(self, handle: str, request: ExecRequest) -> str:
        raise OSError("commands on cluster nodes are not available on the Ray backend yet")

    def exec_result(self, handle: str, exec_id: str) -> dict[str, Any] | None:
        raise OSError("commands on cluster nodes are not available on the Ray backend yet")

    def exec_cancel(self, handle: str, exec_id: str) -> None:
        return None

    def shell_connect(self, handle: str) -> socket.socket:
        raise OSError("shells on cluster nodes are not available on the Ray backend yet")
