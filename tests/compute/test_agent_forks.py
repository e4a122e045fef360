"""Agents that end with their backend (`AgentForks.end_with_owner`, a Ray node's): its
process gone, or its fork server killed, they are too - with their sandboxes. (Those of
the server's own backend outlive it: tests/compute/test_local.py.)"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.compute.backends.local import LocalBackend, end_agents
from tests.compute.test_agent import wait_for
from tests.compute.test_local import SLEEPER, Data, _agent_pid, _gone, _launch, _output, _phase
from tests.compute.test_local import pytestmark as pytestmark  # needs the job sandbox


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Data]:
    found = Data(tmp_path)
    yield found
    end_agents(found.dir, grace=2)


TREES: dict[str, os.stat_result] = {}


def _sandboxed(handle: str) -> list[int]:
    """Processes whose root is the instance's sandbox: its /opt/ml is the instance's (as
    it was while the instance ran: its agent removes it as it ends)."""
    if handle not in TREES:
        TREES[handle] = os.stat(Path(handle) / "opt" / "ml")
    tree = TREES[handle]
    found = []
    for entry in Path("/proc").iterdir():
        try:
            seen = os.stat(entry / "root" / "opt" / "ml")
        except (OSError, ValueError):
            continue
        if (seen.st_dev, seen.st_ino) == (tree.st_dev, tree.st_ino) and not _gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def _owned(data: Data, name: str) -> tuple[LocalBackend, str, int]:
    backend = LocalBackend(data.dir, agents_end_with_owner=True)
    handle = _launch(backend, data, name, SLEEPER)
    wait_for(lambda: _output(handle) == ["ran"], what="the job to run")
    assert _sandboxed(handle)
    return backend, handle, _agent_pid(handle)


def test_an_owned_agent_stops_when_its_backend_goes(data: Data) -> None:
    backend, handle, pid = _owned(data, "owned")
    server = backend._forks.pid
    del backend  # as the actor's process ending: the fork server's stdin closes
    gc.collect()
    wait_for(lambda: _gone(pid), timeout=60, what="the agent to stop")
    assert _phase(LocalBackend(data.dir), handle) == "stopped"  # asked, not killed
    assert not _sandboxed(handle)
    assert server is not None
    wait_for(lambda: _gone(server), what="the fork server to exit")


def test_an_owned_agent_dies_with_its_fork_server(data: Data) -> None:
    backend, handle, pid = _owned(data, "orphaned")
    server = backend._forks.pid
    assert server is not None
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: _gone(pid), timeout=60, what="the agent to die")
    wait_for(lambda: not _sandboxed(handle), timeout=60, what="its sandbox to die")
