"""The Ray backend: instances on a Ray cluster's nodes instead of this host's processes.

The fleet is what the nodes offer (`dockyard/<type>` and `dockyard/az/<az>` custom
resources, `discover`). Each instance is a detached, named Ray actor (`<job key>/<host>`,
in a namespace of this data dir's own) that holds a `LocalBackend` of its node and runs
its one instance with it: the same agent, sandbox and `/opt/ml` contract as locally.
A job's instances are placed together in a detached placement group
(`pg:<job key>:<attempt>`; STRICT_SPREAD for several hosts, so `algo-1..N` are on
different nodes) whose bundles take their pool's type and AZ resources and the type's
GPUs (the actor's `num_gpus`: the ids Ray gives it are its instance's GPUs). Hosts on
different nodes meet over the job network their agents carry (`agent.overlay`).

What an instance reports reaches the control plane through actor calls, the backend
seam's shape (`InstanceState`, `InstanceLog` operations, metrics, its spec). An actor
that is gone - killed, or its node dead - is an instance that is not alive: the jobs
reconciler makes that an infrastructure failure. Actors are named and detached, so a
restarted server finds them again (`ray.get_actor`).

A warm pool's next job runs on the pool's own actor: an alias (the job's instance →
the pool's actor) is kept in the data dir. Every few seconds `sweep` ships what running
instances wrote to the server's data dir (`ray-shipped/`: their log as it grows), and
once all of a job's instances are over (a warm pool's: released) their files whole
(read from there afterwards); then it ends the actors and removes the placement group,
so the nodes' resources are free again.
"""

from __future__ import annotations

import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dockyard.clock import monotonic
from dockyard.compute.backends.instance_files import InstanceFiles
from dockyard.compute.backends.protocol import InstanceLog, InstanceRecords
from dockyard.compute.backends.ray_host import CALL_SECONDS, ActorLog, host_class, namespace
from dockyard.compute.wire.exec import ExecRequest
from dockyard.compute.wire.private_files import write_private
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import LAUNCHING, InstanceState
from dockyard.config import ConfigError, Settings
from dockyard.domain import fleet as fleet_rules
from dockyard.domain.metrics import Latest

log = logging.getLogger(__name__)

# How long a new job's placement group may wait for room on the cluster.
PLACEMENT_SECONDS = 120.0
# How often finished instances' actors are looked for (`sweep`).
SWEEP_SECONDS = 2.0
# What an instance's bundle takes of its node's `dockyard/az/<az>` resource (1 per node).
AZ_SHARE = 0.001


class RayBackend:
    def __init__(self, address: str, data_dir: Path) -> None:
        import ray

        self._ray = ray
        self.data_dir = Path(data_dir).resolve()
        # Where each node keeps its instances' roots: the same path on every node.
        self.node_data_dir = str(self.data_dir)
        self.namespace = namespace(self.data_dir)
        ray.init(
            address=address,
            namespace=self.namespace,
            ignore_reinit_error=True,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        self._host = host_class()
        self._aliases_file = self.data_dir / "ray-aliases.json"
        # Pools offered by the nodes' resources (`discover`): pool key -> (the resources
        # one instance's bundle takes, its GPUs).
        self._offered: dict[str, tuple[dict[str, float], int]] = {}
        # Instances' files shipped from their nodes: running ones' as they grow, ended
        # ones' whole (read from here once their actor is gone).
        self._shipped = InstanceFiles(self.data_dir / "ray-shipped")
        # Each job attempt placed once (`launch`): an instance lost after that is not
        # started again.
        self._placed = self.data_dir / "ray-placed"
        # Placing a job and sweeping ended ones never interleave: a placement group
        # whose actors are still to come is not an orphan.
        self._lock = threading.RLock()
        # For the server's life (a daemon thread): what it does is safe to cut off.
        threading.Thread(target=self._sweep_forever, name="ray-sweep", daemon=True).start()

    # -- the fleet --------------------------------------------------------------------

    def discover(self, gpus_of: Mapping[str, int]) -> list[dict[str, Any]]:
        """The fleet groups the cluster's live nodes offer (`dockyard/<type>` and
        `dockyard/az/<az>` resources, docs/ray.md); from here on an instance of such a
        pool is placed only on a node that offers it, with its type's GPUs."""
        nodes = [
            (str(node.get("NodeID", "?")), dict(node.get("Resources") or {}))
            for node in self._ray.nodes()
            if node.get("Alive")
        ]
        groups = fleet_rules.discovered_groups(nodes, gpus_of)
        self._offered = {
            fleet_rules.pool_key(g["instance_type"], g["availability_zone"], None): (
                {
                    fleet_rules.type_resource(g["instance_type"]): 1.0,
                    # Any share of the zone's marker: it only says where the node is.
                    fleet_rules.az_resource(g["availability_zone"]): AZ_SHARE,
                },
                gpus_of.get(g["instance_type"], 0),
            )
            for g in groups
        }
        return groups

    def _bundle(self, spec: JobSpec) -> tuple[dict[str, float], int]:
        resources, gpus = self._offered.get(spec.pool, ({}, 0))
        bundle = {"CPU": 0.01, **resources}
        if gpus:
            bundle["GPU"] = float(gpus)
        return bundle, gpus

    # -- actors ---------------------------------------------------------------------

    def get(self, ref: Any, timeout: float = CALL_SECONDS) -> Any:
        return self._ray.get(ref, timeout=timeout)

    def _aliases(self) -> dict[str, str]:
        try:
            found = json.loads(self._aliases_file.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def _alias(self, name: str, home: str) -> None:
        write_private(self._aliases_file, json.dumps({**self._aliases(), name: home}))

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

    @property
    def records(self) -> InstanceRecords:
        return self  # its actors' reports, and the shipped files of those that ended

    def launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        with self._lock:
            return self._launch(job_key, specs)

    def _launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        """Start each host's actor in the job's placement group; safe to repeat. An
        instance whose actor is gone after its attempt was placed is lost, never
        started again: the control plane sees it not alive."""
        from ray.util.placement_group import (
            get_placement_group,
            placement_group,
            remove_placement_group,
        )
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        new = []
        for spec in specs:
            actor_name = f"{job_key}/{spec.host}"
            actor = self._actor(actor_name)
            launched = self._launched_attempt(actor, job_key, spec) if actor else None
            if actor is not None and launched is not None and launched < spec.attempt:
                # A plan job resumed in a later block: fresh instances, placed anew (on
                # whichever node offers the block's capacity now).
                self._retire(actor, actor_name, launched)
                actor = None
            if actor is not None:
                self._call(actor, "launch", job_key, [spec])  # launched already: a no-op
                continue
            if not (self._placed / f"{job_key}.{spec.attempt}").exists():
                new.append(spec)  # never placed: start it
        if new:
            attempt = new[0].attempt
            # Earlier attempts are over: their placement groups (one Ray may have moved
            # off a dead node) must not hold the capacity this one needs.
            for earlier in range(1, attempt):
                try:
                    remove_placement_group(get_placement_group(f"pg:{job_key}:{earlier}"))
                except ValueError:
                    continue
            bundles = [self._bundle(spec) for spec in new]
            group = placement_group(
                [bundle for bundle, _ in bundles],
                strategy="STRICT_SPREAD" if len(new) > 1 else "PACK",
                name=f"pg:{job_key}:{attempt}",
                lifetime="detached",
            )
            try:
                self.get(group.ready(), timeout=PLACEMENT_SECONDS)
            except self._ray.exceptions.GetTimeoutError:
                remove_placement_group(group)
                raise
            self._placed.mkdir(mode=0o700, exist_ok=True)
            (self._placed / f"{job_key}.{attempt}").touch()
            actors = [
                self._host.options(
                    name=f"{job_key}/{spec.host}",
                    lifetime="detached",
                    num_gpus=bundles[index][1],
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=index
                    ),
                ).remote(self.node_data_dir)
                for index, spec in enumerate(new)
            ]
            overlay = self._overlay(new, actors)
            for actor, spec in zip(actors, new, strict=True):
                if attempt > 1:
                    # The stream goes on where the last attempt's node left it; its
                    # end state is history, not this attempt's.
                    self._shipped.set_state_aside(job_key, spec.host)
                    shipped = self._shipped.pack(job_key, spec.host)
                    logs = {k: v for k, v in shipped.items() if k.startswith("logs/")}
                    self._call(actor, "unpack", job_key, spec.host, logs)
                self._call(actor, "launch", job_key, [replace(spec, overlay=overlay)])
        return [self.handle(job_key, spec.host) for spec in specs]

    def _launched_attempt(self, actor: Any, job_key: str, spec: JobSpec) -> int | None:
        """The attempt the actor's instance runs; None if it does not answer (lost with
        its node: not replaced here)."""
        try:
            launched = self._call(actor, "launched_spec", job_key, spec.host)
        except self._ray.exceptions.RayError:
            return None
        return launched.attempt if isinstance(launched, JobSpec) else 1

    def _retire(self, actor: Any, name: str, attempt: int) -> None:
        """End an instance's actor before its job's next attempt: its files are kept
        first, its placement group goes, and its name is freed for the successor."""
        from ray.util.placement_group import get_placement_group, remove_placement_group

        job_key = name.rpartition("/")[0]
        try:
            for key, host, files in self.get(actor.pack.remote()):
                self._shipped.unpack(key, host, files)
        except self._ray.exceptions.RayError:
            pass  # lost with its node
        self._ray.kill(actor)
        try:
            remove_placement_group(get_placement_group(f"pg:{job_key}:{attempt}"))
        except ValueError:
            pass
        deadline = monotonic() + CALL_SECONDS
        while self._actor(name) is not None:  # until the name is free
            if monotonic() > deadline:
                raise RuntimeError(f"Ray did not end the actor {name}")
            time.sleep(0.05)

    def _overlay(self, specs: list[JobSpec], actors: list[Any]) -> dict[str, Any] | None:
        """The job network of a job whose hosts are on several nodes (`agent.overlay`):
        a secret of the job's and each host's node address and UDP port."""
        if len(specs[0].hosts) < 2:
            return None
        endpoints = self.get([actor.endpoint.remote() for actor in actors])
        return {
            "key": secrets.token_hex(16),
            "peers": {
                spec.host: list(endpoint) for spec, endpoint in zip(specs, endpoints, strict=True)
            },
        }

    def assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        with self._lock:  # the sweep rewrites the aliases too
            return self._assign(home_key, job_key, specs)

    def _assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        handles = []
        for spec in specs:
            home = self._actor_name(home_key, spec.host)
            actor = self._actor(home)
            if actor is None:
                raise RuntimeError(f"the warm pool's instance {home} is gone")
            self._call(actor, "assign", home_key, job_key, [spec])
            self._alias(f"{job_key}/{spec.host}", home)
            handles.append(self.handle(job_key, spec.host))
        return handles

    def release(self, home_key: str, hosts: list[str]) -> bool:
        """Tell the pool's agents to go; their actors end once they have (`sweep`)."""
        gone = True
        for host in hosts:
            actor = self._actor(self._actor_name(home_key, host))
            if actor is None:
                continue
            try:
                gone = bool(self._call(actor, "release", home_key, [host])) and gone
            except self._ray.exceptions.RayError:
                continue  # its node is gone, and the agent with it
        return gone

    # -- ending actors ------------------------------------------------------------------

    def _sweep_forever(self) -> None:
        while True:
            time.sleep(SWEEP_SECONDS)
            try:
                self.sweep()
            except Exception:  # the next pass tries again
                log.exception("sweeping ended Ray instances failed")

    def sweep(self) -> None:
        """End the actors of jobs whose instances are all over, keeping their files
        first, and remove placement groups no actor is left in (a dead node's, or one
        left by a crash). Safe to repeat: a pass that stops half way is finished by the
        next."""
        from ray.util.placement_group import (
            get_placement_group,
            placement_group_table,
            remove_placement_group,
        )

        with self._lock:
            by_job: dict[str, list[str]] = {}
            for job_key, _host, name in self._job_actors("", aliases=False):
                by_job.setdefault(job_key, []).append(name)
            for names in by_job.values():
                actors = [a for a in (self._actor(n) for n in names) if a is not None]
                try:
                    if not all(self.get(a.finished.remote()) for a in actors):
                        # Still running: what they wrote since the last pass comes here
                        # now, so a node that dies takes seconds of log with it, no more.
                        for actor in actors:
                            self._ship_growth(actor)
                        continue
                    for actor in actors:
                        for key, host, files in self.get(actor.pack.remote()):
                            self._shipped.unpack(key, host, files)
                except self._ray.exceptions.RayError:
                    continue  # a node is down: its actor is noticed gone next time
                for actor in actors:
                    self._ray.kill(actor)
                for name in names:
                    self._alias_gone(name)
            live = {key for key, _host, _name in self._job_actors("", aliases=False)}
            for group in placement_group_table().values():
                name = str(group.get("name") or "")
                job_key, _, attempt = name.removeprefix("pg:").rpartition(":")
                # Only this data dir's own (the table holds every namespace's).
                mine = (
                    name.startswith("pg:")
                    and "/" not in job_key
                    and (self._placed / f"{job_key}.{attempt}").exists()
                )
                if not mine or group.get("state") == "REMOVED":
                    continue
                if job_key not in live:
                    try:
                        remove_placement_group(get_placement_group(name))
                    except ValueError:
                        continue  # removed meanwhile

    def _ship_growth(self, actor: Any) -> None:
        for job_key, host in self.get(actor.ran.remote()):
            sizes = self._shipped.sizes(job_key, host)
            parts = self._call(actor, "since", job_key, host, sizes)
            self._shipped.extend(job_key, host, parts)

    def _alias_gone(self, home: str) -> None:
        aliases = self._aliases()
        kept = {alias: name for alias, name in aliases.items() if name != home}
        if kept != aliases:
            write_private(self._aliases_file, json.dumps(kept))

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        return all(self.alive(self.handle(home_key, host)) for host in hosts)

    def poll(self, handle: str) -> InstanceState:
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is None:
            # Ended (its files kept here) or lost with its node (LAUNCHING, not alive).
            ended = self._shipped.state(job_key, host)
            return ended or dict(LAUNCHING)  # type: ignore[return-value]
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

    def purge(self, job_key: str) -> bool:
        """The shipped files of a job none of whose actors is left. (What its agents
        left on their nodes - the tree is removed as an instance ends - stays there.)"""
        if any(key == job_key for key, _, _ in self._job_actors(job_key, aliases=False)):
            return False
        return self._shipped.remove(job_key)

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

    def _job_actors(self, prefix: str, aliases: bool = True) -> list[tuple[str, str, str]]:
        """(job key, host, actor name) of every instance whose job key starts with the
        prefix: named actors, and (`aliases`) jobs run on a warm pool's actor."""
        found = []
        for entry in self._ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"] if isinstance(entry, dict) else str(entry)
            if isinstance(entry, dict) and entry.get("namespace") != self.namespace:
                continue
            key, _, host = name.rpartition("/")
            if key.startswith(prefix):
                found.append((key, host, name))
        for alias, home in (self._aliases() if aliases else {}).items():
            key, _, host = alias.rpartition("/")
            if key.startswith(prefix):
                found.append((key, host, home))
        return sorted(set(found))

    def logged_hosts(self, job_key: str) -> list[str]:
        hosts = set(self._shipped.logged_hosts(job_key))
        for key, _host, name in self._job_actors(job_key):
            actor = self._actor(name)
            if key == job_key and actor is not None:
                try:
                    hosts.update(self._call(actor, "logged_hosts", job_key))
                except self._ray.exceptions.RayError:
                    continue
        return sorted(hosts, key=lambda h: int(h.removeprefix("algo-")) if h[5:].isdigit() else 0)

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        found = set(self._shipped.logged_instances(key_prefix))
        for key, _host, name in self._job_actors(key_prefix):
            actor = self._actor(name)
            if actor is None:
                continue
            try:
                found.update(tuple(x) for x in self._call(actor, "logged_instances", key))
            except self._ray.exceptions.RayError:
                continue
        return sorted(found)

    def _reporter(self, job_key: str, host: str) -> Any:
        """The instance's actor while it has one (a resumed job's new one), else None:
        its files are kept here once it ended, or were lost with its node."""
        return self._actor(self._actor_name(job_key, host))

    def open_log(self, job_key: str, host: str) -> InstanceLog:
        actor = self._reporter(job_key, host)
        if actor is None:
            return self._shipped.open_log(job_key, host)
        return ActorLog(self.get, actor, job_key, host)

    def metrics(self, job_key: str, host: str) -> Latest:
        actor = self._reporter(job_key, host)
        if actor is None:
            return self._shipped.metrics(job_key, host)
        try:
            found = self._call(actor, "metrics", job_key, host)
        except self._ray.exceptions.RayError:
            return {}
        return {str(k): (float(v[0]), int(v[1])) for k, v in dict(found).items()}

    def launched_spec(self, job_key: str, host: str) -> JobSpec | None:
        actor = self._reporter(job_key, host)
        if actor is None:
            return self._shipped.launched_spec(job_key, host)
        try:
            spec = self._call(actor, "launched_spec", job_key, host)
        except self._ray.exceptions.RayError:
            return None
        return spec if isinstance(spec, JobSpec) else None

    # -- commands on cluster nodes ----------------------------------------------------

    def _node_call(self, handle: str, method: str, *args: Any) -> Any:
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is None:
            raise OSError(f"the node's instance {name} is gone")
        try:
            return self._call(actor, method, self._call(actor, "handle", job_key, host), *args)
        except self._ray.exceptions.RayError as exc:
            raise OSError(f"the node's instance {name} does not answer: {exc}") from exc

    def exec_start(self, handle: str, request: ExecRequest) -> str:
        return str(self._node_call(handle, "exec_start", request))

    def exec_result(self, handle: str, exec_id: str) -> dict[str, Any] | None:
        found = self._node_call(handle, "exec_result", exec_id)
        return found if isinstance(found, dict) else None

    def exec_cancel(self, handle: str, exec_id: str) -> None:
        self._node_call(handle, "exec_cancel", exec_id)

    def shell_connect(self, handle: str) -> socket.socket:
        """A session with the node's agent, through a relay its actor opens for this one
        connection on its node (`InstanceHost.shell_relay`): the first bytes sent must
        be the one-time token it answered."""
        name, job_key, host = self._split(handle)
        actor = self._actor(name)
        if actor is None:
            raise OSError(f"the node's instance {name} is gone")
        try:
            address, port, token = self.get(actor.shell_relay.remote(job_key, host))
        except self._ray.exceptions.RayError as exc:
            raise OSError(f"the node's instance {name} does not answer: {exc}") from exc
        sock = socket.create_connection((address, port), timeout=CALL_SECONDS)
        sock.settimeout(None)
        sock.sendall(token)
        return sock


# -- the registry's entry (`registry`) --------------------------------------------------


def check(settings: Settings) -> None:
    if not settings.ray_address:
        raise ConfigError("the ray backend needs the cluster's address: --ray-address HOST:PORT")


def create(settings: Settings, fleet: list[dict[str, Any]]) -> RayBackend:
    """The Ray cluster's backend; its fleet is what its nodes offer (`discover`)."""
    return RayBackend(settings.ray_address, settings.data_dir)


def problems(settings: Settings) -> list[str]:
    # The nodes run the instances in sandboxes of their own; this host is checked as one.
    from dockyard.compute.backends import local

    return local.problems(settings)
