"""The local backend: each instance is an agent process on this host, in its own root.

Agents run in their own sessions and talk to the control plane only through files in
their root (`job.json` in, `state.json` and `logs/` out, `stop` to ask them to stop),
so they outlive a server restart and a restarted server finds them by their roots.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dockyard.clock import monotonic
from dockyard.compute.agent_env import Layout


def _write_private(path: Path, text: str) -> None:
    # A spec may carry S3 credentials: readable by its owner only; replaced atomically.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def end_agents(data_dir: Path, grace: float = 5.0) -> None:
    """Stop every agent under a data dir: SIGTERM (an idle warm-pool agent deletes its
    cache and exits), then SIGKILL after `grace` seconds.

    Agents outlive the server by design (warm pools survive restarts), so a server is
    stopped without this; it is for throwing a data dir away (tests, benchmarks).
    """
    running = set()
    for pid_file in (Path(data_dir) / "instances").glob("*/*/agent.pid"):
        try:
            pid = int(pid_file.read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if b"dockyard.compute.agent" in command:
            running.add(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in running:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        give_up = monotonic() + grace
        while running and monotonic() < give_up:
            running = {pid for pid in running if Path(f"/proc/{pid}").exists()}
            time.sleep(0.05)
        if not running:
            return


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


class LocalBackend:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir).resolve() / "instances"
        # Handles of agents this process started, so they are reaped rather than left
        # as zombies; agents from before a restart were reparented and need nothing.
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _root(self, job_key: str, host: str) -> Path:
        return self.root / job_key / host

    def launch(self, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        handles = []
        for spec in host_specs:
            root = self._root(job_key, spec["host"])
            handles.append(str(root))
            attempt = int(spec.get("attempt", 1))
            if attempt > self._attempt(root):
                self._retire(root)  # a resumed job: fresh instances, same log stream
            elif (root / "agent.pid").exists() or str(root) in self._children:
                continue  # launched already (e.g. before a restart): never twice
            root.mkdir(parents=True, exist_ok=True)
            (root / "attempt").write_text(str(attempt))
            _write_private(root / "job.json", json.dumps(spec, indent=2))
            with open(root / "agent.log", "ab") as log:
                self._children[str(root)] = subprocess.Popen(
                    [sys.executable, "-m", "dockyard.compute.agent", str(root)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=root,
                )
        return handles

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

    def assign(self, home_key: str, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        """Hand a job to a warm pool's running agents; answer the job's handles.

        The job gets its own directory per host (its job.json, state, logs); the
        pool's agent (the instance's home) is told where it is and woken. Safe to
        repeat: a host that has the job already is only woken again.
        """
        handles = []
        for spec in host_specs:
            home = self._root(home_key, spec["host"])
            run = self._root(job_key, spec["host"])
            handles.append(str(run))
            run.mkdir(parents=True, exist_ok=True)
            if not (run / "job.json").exists():
                _write_private(run / "job.json", json.dumps(spec, indent=2))
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

    def poll(self, handle: str) -> dict[str, Any]:
        child = self._children.get(handle)
        if child is not None and child.poll() is not None:
            del self._children[handle]
        try:
            return dict(json.loads((Path(handle) / "state.json").read_text()))
        except (FileNotFoundError, ValueError):
            return {"phase": "launching"}

    def stop(self, handle: str) -> None:
        (Path(handle) / "stop").touch()

    def alive(self, handle: str) -> bool:
        child = self._children.get(handle)
        if child is not None:
            return child.poll() is None
        try:
            pid = int((Path(handle) / "agent.pid").read_text())
        except (FileNotFoundError, ValueError):
            return False
        # A warm pool's later jobs name the agent this process started for an earlier
        # one: ask the child itself, as a dead child is a zombie until it is reaped.
        for started in self._children.values():
            if started.pid == pid:
                return started.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
