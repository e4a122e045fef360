"""The local backend's agents, started through its fork server (`agent.fork_server`).

Each test launches real jobs through `LocalBackend` on a temporary data dir, in the
sandbox as the server runs them, and looks at the agents as the host sees them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.compute.backends import forks
from dockyard.compute.backends.local import LocalBackend, end_agents
from dockyard.compute.sandbox.bwrap import unavailable
from dockyard.compute.wire.spec import JobSpec
from tests.compute.test_agent import wait_for

pytestmark = pytest.mark.skipif(unavailable() is not None, reason="needs the job sandbox")

SLEEPER = ["python3", "-c", "import time; print('ran', flush=True); time.sleep(120)"]


class Data:
    """A data dir with its LocalS3 and the specs the control plane would write."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "data"
        self.s3 = tmp_path / "s3"
        (self.s3 / "bkt").mkdir(parents=True)

    def spec(self, name: str, entrypoint: list[str]) -> JobSpec:
        return JobSpec(
            job_name=name,
            resource_config={"InstanceType": "ml.m5.large", "InstanceCount": 1},
            entrypoint=entrypoint,
            python=sys.executable,
            output_path="s3://bkt/out",
            max_runtime_seconds=300,
            stop_grace_seconds=1,
            s3={"root": str(self.s3)},
            network_isolation=True,
            account_id="111111111111",
            sandbox={"limits": {"memory_bytes": 2 * 1024**3, "pids": 512}},
        )


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Data]:
    found = Data(tmp_path)
    yield found
    end_agents(found.dir, grace=2)


def _launch(backend: LocalBackend, data: Data, name: str, entrypoint: list[str]) -> str:
    [handle] = backend.launch(name, [data.spec(name, entrypoint)])
    return handle


def _phase(backend: LocalBackend, handle: str) -> str:
    return str(backend.poll(handle).get("phase"))


def _finished(backend: LocalBackend, handle: str) -> str | None:
    phase = _phase(backend, handle)
    done = phase in ("completed", "failed", "stopped") and not backend.alive(handle)
    return phase if done else None


def _output(handle: str) -> list[str]:
    try:
        lines = (Path(handle) / "logs" / "output.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line)["m"] for line in lines]


def _agent_pid(handle: str) -> int:
    return int((Path(handle) / "agent.pid").read_text())


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _ppid(pid: int) -> int:
    return int(_status(pid)["PPid"])


def _gone(pid: int) -> bool:
    try:
        return _status(pid)["State"].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_forked_agent_starts_as_a_new_one_would(data: Data) -> None:
    backend = LocalBackend(data.dir)
    handle = _launch(backend, data, "forked", SLEEPER)
    wait_for(lambda: _phase(backend, handle) == "training", what="the job to run")
    pid = _agent_pid(handle)
    server = backend._forks.pid
    assert server is not None and _ppid(pid) == server  # forked: the fork server reaps it
    # Recognised as an agent wherever dockyard looks (end_agents, the network's members).
    assert b"dockyard.compute.agent" in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert os.getsid(pid) == pid  # a session of its own, as start_new_session gave it
    assert os.readlink(f"/proc/{pid}/cwd") == handle
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2")
    assert os.readlink(f"/proc/{pid}/fd/1") == str(Path(handle) / "agent.log")
    # Nothing of the fork server's own: its request and reply pipes stay with it.
    theirs = {os.readlink(f"/proc/{server}/fd/{fd}") for fd in (0, 1)}
    assert not theirs & {
        os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
    }

    # The same signal dispositions, credentials and umask as an agent started as a new
    # interpreter, as the backend started them before it had a fork server.
    root = data.dir / "instances" / "by-hand" / "algo-1"
    root.mkdir(parents=True)
    backend._job_file(root / "job.json", data.spec("by-hand", SLEEPER))
    by_hand = subprocess.Popen(
        [sys.executable, "-m", "dockyard.compute.agent", str(root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=root,
    )
    try:
        wait_for(lambda: _phase(backend, str(root)) == "training", what="the other job")
        forked, started = _status(pid), _status(by_hand.pid)
        for key in ("SigIgn", "SigCgt", "SigBlk", "NoNewPrivs", "CapEff", "Umask", "Uid"):
            assert forked[key] == started[key], key
    finally:
        (root / "stop").touch()
        by_hand.wait(timeout=30)

    backend.stop(handle)
    assert wait_for(lambda: _finished(backend, handle), what="the stop") == "stopped"
    assert _gone(pid)


def _started_by_a_backend_gone_since(data: Data) -> tuple[str, int, int]:
    """A sleeping job's handle, its agent's PID and its fork server's."""
    backend = LocalBackend(data.dir)
    handle = _launch(backend, data, "survivor", SLEEPER)
    wait_for(lambda: _output(handle) == ["ran"], what="the job to run")
    server = backend._forks.pid
    assert server is not None
    return handle, _agent_pid(handle), server


def test_agents_outlive_their_backend_and_its_fork_server(data: Data) -> None:
    # The backend goes (as with the server): its fork server's stdin closes, and it exits.
    handle, pid, server = _started_by_a_backend_gone_since(data)
    wait_for(lambda: _gone(server), what="the fork server to exit")
    assert not _gone(pid) and _ppid(pid) != server

    later = LocalBackend(data.dir)  # a restarted server finds it by its root
    assert later.alive(handle)
    assert _phase(later, handle) == "training"
    assert later.launch("survivor", [data.spec("survivor", SLEEPER)]) == [handle]
    assert later._forks.pid is None  # launched already: never twice
    later.stop(handle)
    assert wait_for(lambda: _finished(later, handle), what="the stop") == "stopped"


def test_a_fork_server_that_died_is_started_again(data: Data) -> None:
    backend = LocalBackend(data.dir)
    first = _launch(backend, data, "first", ["true"])
    assert wait_for(lambda: _finished(backend, first), what="the first job") == "completed"
    server = backend._forks.pid
    assert server is not None
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: _gone(server), what="the fork server to die")

    second = _launch(backend, data, "second", ["true"])
    assert wait_for(lambda: _finished(backend, second), what="the second job") == "completed"
    assert backend._forks.pid not in (None, server)
    assert not backend._children  # forked, not started the slow way


def test_without_a_fork_server_agents_start_as_interpreters(
    data: Data, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forks, "command", lambda: ["/bin/false"])
    backend = LocalBackend(data.dir)
    handle = _launch(backend, data, "plain", ["true"])
    assert handle in backend._children
    assert wait_for(lambda: _finished(backend, handle), what="the job") == "completed"


def test_an_instance_runs_one_agent_at_a_time(data: Data) -> None:
    """Launched twice before the first agent said so: the second waits for the first and
    never runs the job again."""
    backend = LocalBackend(data.dir)
    handle = _launch(backend, data, "once", SLEEPER)
    wait_for(lambda: _output(handle) == ["ran"], what="the job to run")
    first = _agent_pid(handle)
    second = backend._forks.spawn(Path(handle))
    time.sleep(0.5)  # long enough for a second run to have started, were there one
    assert not _gone(second) and _agent_pid(handle) == first
    backend.stop(handle)
    assert wait_for(lambda: _finished(backend, handle), what="the stop") == "stopped"
    wait_for(lambda: _gone(second), what="the second agent to exit")
    assert _output(handle) == ["ran"]
    assert _phase(backend, handle) == "stopped"


def test_a_reused_pid_is_not_an_agent(data: Data) -> None:
    backend = LocalBackend(data.dir)
    handle = _launch(backend, data, "short", ["true"])
    assert wait_for(lambda: _finished(backend, handle), what="the job") == "completed"
    other = subprocess.Popen(["sleep", "30"])
    try:
        (Path(handle) / "agent.pid").write_text(f"{other.pid}\n")
        assert not LocalBackend(data.dir).alive(handle)
    finally:
        other.kill()
        other.wait()


def test_the_fork_server_leaves_no_zombie(data: Data) -> None:
    backend = LocalBackend(data.dir)
    handles = [_launch(backend, data, f"job-{i}", ["true"]) for i in range(3)]
    ended = wait_for(lambda: all(_finished(backend, h) for h in handles), what="the jobs")
    assert ended and all(_phase(backend, h) == "completed" for h in handles)
    server = backend._forks.pid
    assert server is not None

    def zombies() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if _ppid(int(entry.name)) == server and _gone(int(entry.name)):
                        found.append(int(entry.name))
                except (OSError, KeyError):
                    continue
        return found

    # Reaped as they exit, not when the next agent is asked for.
    wait_for(lambda: not zombies(), what="the fork server to reap its agents")
    assert not _gone(server)
