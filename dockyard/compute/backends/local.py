"""The local backend: each instance is an agent process on this host, in its own root.

Agents run in their own sessions and talk to the control plane only through files in
their root (`job.json` in, `state.json` and `logs/` out, `stop` to ask them to stop),
so they outlive a server restart and a restarted server finds them by their roots.
The agents run as root; the code they run does not (`agent.confinement`): each account's
instances run as a sandbox user of its own, which the backend gives out here.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dockyard.clock import monotonic
from dockyard.compute.backends.forks import AgentForks, ForkServerError
from dockyard.compute.backends.gpus import GpuShares
from dockyard.compute.backends.instance_files import InstanceFiles
from dockyard.compute.backends.protocol import InstanceRecords
from dockyard.compute.sandbox import uids as sandbox_uids
from dockyard.compute.sandbox.bwrap import unavailable as sandbox_unavailable
from dockyard.compute.sandbox.bwrap import unavailable_message as sandbox_unavailable_message
from dockyard.compute.sandbox.limits import remove_for
from dockyard.compute.sandbox.network import sweep as sweep_networks
from dockyard.compute.wire import exec as exec_wire
from dockyard.compute.wire import shell as shell_wire
from dockyard.compute.wire.forks import MODULE as AGENT_MODULE
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.private_files import write_private
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import LAUNCHING, InstanceState
from dockyard.config import Settings
from dockyard.domain import fleet as fleet_rules

log = logging.getLogger(__name__)

# How an agent's command line shows it, whether forked or started as a new interpreter.
AGENT_MARKER = AGENT_MODULE.encode()

# Sandbox users' uids (given out by the host's registry, `sandbox.uids`).
SANDBOX_UID_BASE = sandbox_uids.BASE
SANDBOX_UID_COUNT = sandbox_uids.COUNT


def end_agents(data_dir: Path, grace: float = 5.0) -> None:
    """Stop every agent under a data dir: SIGTERM (an idle warm-pool agent deletes its
    cache and exits), then SIGKILL after `grace` seconds.

    Agents outlive the server by design (warm pools survive restarts), so a server is
    stopped without this; it is for throwing a data dir away (tests, benchmarks).
    """
    running = set()
    instances = Path(data_dir) / "instances"
    for pid_file in instances.glob("*/*/agent.pid"):
        try:
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if AGENT_MARKER in command:
            running.add(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in running:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        give_up = monotonic() + grace
        while running and monotonic() < give_up:
            running = {pid for pid in running if _is_agent(pid)}
            time.sleep(0.05)
        if not running:
            break
    # Agents killed outright never left their network or removed their cgroup.
    for root in instances.glob("*/*/"):
        remove_for(root)
    sweep_networks(instances)


def _is_agent(pid: int) -> bool:
    try:
        if AGENT_MARKER not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
        # A zombie has exited: nothing of it runs any more.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _agent_holds(root: Path) -> bool:
    """Whether an agent runs in the instance root: it holds `agent.lock` while it lives
    (`Agent._hold_instance`), and the kernel lets go of it when the agent exits."""
    try:
        fd = os.open(root / "agent.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wake(home: Path) -> None:
    """One byte on the idle agent's FIFO; nobody listening is fine (it also polls)."""
    try:
        fd = os.open(home / "wake", os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return
        raise
    try:
        os.write(fd, b"w")
    except BlockingIOError:
        pass  # the pipe is full of wake-ups already
    finally:
        os.close(fd)


class LocalBackend(InstanceFiles):
    def __init__(
        self,
        data_dir: Path,
        gpu_shares: Mapping[str, list[tuple[int, ...]]] | None = None,
        *,
        agents_end_with_owner: bool = False,
    ) -> None:
        """`agents_end_with_owner`: the instances are this process's (a Ray actor's),
        so their agents end with it rather than outlive it (`agent.fork_server`)."""
        super().__init__(Path(data_dir).resolve() / "instances")
        # The host's GPUs, by pool, handed to instances as they start (`gpus`).
        self.gpus = GpuShares(Path(data_dir).resolve() / "gpus", gpu_shares or {})
        self.uids = Path(data_dir).resolve() / "sandbox" / "uids"
        # Agents come from the fork server (`agent.fork_server`), which reaps them; until an
        # agent has written its agent.pid, its PID is known from here.
        self._forks = AgentForks(
            Path(data_dir).resolve() / "agent-forks.log", end_with_owner=agents_end_with_owner
        )
        self._forked: dict[str, int] = {}
        # Handles of agents this process started itself (when the fork server could
        # not), so they are reaped rather than left as zombies; agents from before a
        # restart were reparented and need nothing.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        if self.root.is_dir():
            sweep_networks(self.root)  # of agents that died while the server was down
            self.sweep_purged()  # deleted jobs' files a restart left half removed

    def sandbox_uid(self, account_id: str) -> int:
        """The account's sandbox user: the same for all its instances, never another
        account's - nor any other data dir's on this host (`sandbox.uids`).

        Kept in the host's registry, so a restart answers the same; the data dir's own
        file per account (where uids were kept before) follows it.
        """
        account = account_id or "-"
        return sandbox_uids.registry().uid(self.uids.parent.parent, account, self.uids / account)

    def _job_file(self, path: Path, spec: JobSpec, gpus: tuple[int, ...] = ()) -> None:
        """Write the spec as the agent gets it (`job.json`, root's and private: it may
        hold S3 credentials): with its account's sandbox user, and the GPUs of this
        host it runs on."""
        sandbox = dict(spec.sandbox)
        if sandbox.get("mode", "bwrap") != "none":
            sandbox["uid"] = self.sandbox_uid(spec.account_id)
        write_private(path, replace(spec, sandbox=sandbox, gpus=list(gpus)).to_json())

    def handle(self, job_key: str, host: str) -> str:
        return str(self._root(job_key, host))

    @property
    def records(self) -> InstanceRecords:
        return self  # its instances' own files

    def launch(self, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        handles = []
        for spec in specs:
            root = self._root(job_key, spec.host)
            handles.append(str(root))
            attempt = spec.attempt
            if attempt > self._attempt(root):
                self._retire(root)  # a resumed job: fresh instances, same log stream
            elif (root / "agent.pid").exists() or self._started(str(root)):
                continue  # launched already (e.g. before a restart): never twice
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            (root / "attempt").write_text(str(attempt))
            # (self.alive is passed per call: held by GpuShares it would keep this
            # backend, and its fork server, alive after the server let go of it.)
            gpus = self.gpus.take(spec.pool, str(root), self.alive)
            self._job_file(root / "job.json", spec, gpus)
            pid = self._start_agent(root)
            # Written here as well as by the agent (which starts later): a server
            # sharing the data dir that steps the job next must find it launched.
            write_private(root / "agent.pid", f"{pid}\n")
        return handles

    def _start_agent(self, root: Path) -> int:
        """Start the agent of `root`; answer its PID."""
        try:
            pid = self._forked[str(root)] = self._forks.spawn(root)
            return pid
        except ForkServerError as exc:
            # Slower, never wrong: the agent as a new interpreter of its own.
            log.warning("starting the agent of %s without the fork server: %s", root, exc)
        with open(root / "agent.log", "ab") as agent_log:
            child = self._children[str(root)] = subprocess.Popen(
                [sys.executable, "-m", AGENT_MODULE, str(root)],
                stdin=subprocess.DEVNULL,
                stdout=agent_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=root,
            )
        return child.pid

    @staticmethod
    def _attempt(root: Path) -> int:
        try:
            return int((root / "attempt").read_text())
        except (FileNotFoundError, ValueError):
            return 1

    def _retire(self, root: Path) -> None:
        """Set the last attempt's files aside so a new agent starts in the same root."""
        attempt = self._attempt(root)
        for name in ("state.json", "agent.pid", "stop", "job.json"):
            path = root / name
            if path.exists():
                os.replace(path, root / f"{name}.attempt-{attempt}")
        child = self._children.pop(str(root), None)
        if child is not None:
            child.poll()  # reap it: it has exited (the job was stopped first)
        self._forked.pop(str(root), None)

    def assign(self, home_key: str, job_key: str, specs: Sequence[JobSpec]) -> list[str]:
        """Hand a job to a warm pool's running agents; answer the job's handles.

        The job gets its own directory per host (its job.json, state, logs); the
        pool's agent (the instance's home) is told where it is and woken. Safe to
        repeat: a host that has the job already is only woken again.
        """
        handles = []
        for spec in specs:
            home = self._root(home_key, spec.host)
            run = self._root(job_key, spec.host)
            handles.append(str(run))
            run.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not (run / "job.json").exists():
                # The pool's instance keeps the GPUs it started with.
                gpus = self.gpus.held_by(spec.pool, str(home))
                self._job_file(run / "job.json", spec, gpus)
            if not (run / "agent.pid").exists():
                # The same process: alive() and "never launch twice" read this file.
                shutil.copyfile(home / "agent.pid", run / "agent.pid")
            if not (run / "state.json").exists():
                (home / ".next.json.tmp").write_text(json.dumps({"run": str(run)}))
                os.replace(home / ".next.json.tmp", home / "next.json")
            _wake(home)
        return handles

    def release(self, home_key: str, hosts: list[str]) -> bool:
        """Terminate a warm pool's instances; True once none of them is running.

        The agent deletes the pool's cache as it exits; one that died without doing
        so has it deleted here. Safe to repeat.
        """
        gone = True
        for host in hosts:
            home = self._root(home_key, host)
            if not home.is_dir():
                continue
            if self.alive(str(home)):
                gone = False
                (home / "release").touch()
                _wake(home)
            else:
                shutil.rmtree(Layout(home).warm_pool_cache, ignore_errors=True)
        return gone

    def healthy(self, home_key: str, hosts: list[str]) -> bool:
        return all(self.alive(str(self._root(home_key, host))) for host in hosts)

    def poll(self, handle: str) -> InstanceState:
        child = self._children.get(handle)
        if child is not None and child.poll() is not None:
            del self._children[handle]
        try:
            state = json.loads((Path(handle) / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return dict(LAUNCHING)  # type: ignore[return-value]
        return state if isinstance(state, dict) else dict(LAUNCHING)  # type: ignore[return-value]

    def stop(self, handle: str) -> None:
        (Path(handle) / "stop").touch()

    def purge(self, job_key: str) -> bool:
        def held(root: Path) -> bool:
            if _agent_holds(root):
                return True
            remove_for(root)  # a cgroup an agent killed outright left behind
            return False

        return self.remove(job_key, held)

    def alive(self, handle: str) -> bool:
        child = self._children.get(handle)
        if child is not None:
            return child.poll() is None
        try:
            pid = int((Path(handle) / "agent.pid").read_text())
        except (FileNotFoundError, ValueError):
            # Forked a moment ago: its agent.pid is still to come.
            forked = self._forked.get(handle)
            return forked is not None and _is_agent(forked)
        self._forked.pop(handle, None)  # agent.pid says it from here
        # A warm pool's later jobs name the agent this process started for an earlier
        # one: ask the child itself, as a dead child is a zombie until it is reaped.
        for started in self._children.values():
            if started.pid == pid:
                return started.poll() is None
        # An agent still: not a PID reused by something else since, nor a zombie (an
        # agent that exited after its fork server did waits for the host's init).
        return _is_agent(pid)

    def _started(self, handle: str) -> bool:
        return handle in self._children or handle in self._forked

    # -- commands on a cluster's node (agent_exec) ---------------------------------------

    def exec_start(self, handle: str, request: exec_wire.ExecRequest) -> str:
        exec_id = uuid.uuid4().hex
        exec_wire.write_request(Path(handle), exec_id, request)
        _wake(Path(handle))
        return exec_id

    def exec_result(self, handle: str, exec_id: str) -> dict[str, Any] | None:
        return exec_wire.read_result(Path(handle), exec_id)

    def exec_cancel(self, handle: str, exec_id: str) -> None:
        exec_wire.cancel(Path(handle), exec_id)

    def shell_connect(self, handle: str) -> socket.socket:
        return shell_wire.connect(Path(handle))


# -- the registry's entry (`registry`) --------------------------------------------------


def create(settings: Settings, fleet: list[dict[str, Any]]) -> LocalBackend:
    """This host's backend, with the GPUs the fleet's groups list."""
    return LocalBackend(settings.data_dir, fleet_rules.gpu_shares(fleet_rules.expand(fleet)))


def problems(settings: Settings) -> list[str]:
    """The job sandbox's tools this host lacks (jobs fail to start without them)."""
    if settings.sandbox == "none":
        return []
    why = sandbox_unavailable()
    return [] if why is None else [sandbox_unavailable_message(why)]
