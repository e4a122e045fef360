"""An agent's state change reaches the control plane at once, not on the next tick."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.compute.backends.wakes import Listener
from dockyard.compute.wire import wake
from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer


@pytest.fixture
def slow_ticking_server(tmp_path: Path) -> Iterator[DockyardServer]:
    """A server whose reconcilers look on their own only once an hour."""
    server = DockyardServer(tmp_path / "data")
    server.extra_env = {"DOCKYARD_RECONCILE_INTERVAL_SECONDS": "3600"}
    server.start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


def test_jobs_move_on_the_agents_wake_ups(slow_ticking_server: DockyardServer) -> None:
    """Issue 13: every step of a job waited for the reconcilers' next tick. With the
    tick an hour away, only the create's nudge and the agents' wake-ups can move these
    jobs: a cold one to Completed, its warm pool to Available, and the next matching job
    onto that pool and to Completed."""
    server = slow_ticking_server
    client = server.client()
    keep = {"KeepAlivePeriodInSeconds": 600}
    first = job_request("woken-1", "print('one')")
    first["ResourceConfig"].update(keep)
    client.create_training_job(**first)
    job = wait_for(client, "woken-1", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["WarmPoolStatus"]["Status"] == "Available"
    second = job_request("woken-2", "print('two')")
    second["ResourceConfig"].update(keep)
    client.create_training_job(**second)
    job = wait_for(client, "woken-2", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    first_pool = client.describe_training_job(TrainingJobName="woken-1")["WarmPoolStatus"]
    assert first_pool["Status"] == "Reused" and first_pool["ReusedByJob"] == "woken-2"
    assert list(wake.directory(server.data_dir).glob("*.sock"))


def test_a_wake_up_with_no_server_listening_is_harmless(tmp_path: Path) -> None:
    wake.notify(str(tmp_path / "nobody.sock"))
    wake.notify(None)
    calls: list[int] = []
    listener = Listener(tmp_path / "control.sock", lambda keys: calls.append(1))
    listener.start()
    listener.close()
    assert not (tmp_path / "control.sock").exists()
    # A data dir too deep for a socket's 108-byte path: no wake-ups, the tick still runs.
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    listener = Listener(deep / "control.sock", lambda keys: calls.append(1))
    listener.start()
    listener.close()
