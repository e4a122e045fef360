"""The local backend hands each starting instance a share of its pool's GPUs: the one it
holds already, else the first no running instance holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard.compute.backends.gpus import GpuShares, GpuShortage

POOL = "ml.g5.xlarge@us-east-1a"


def test_shares_go_to_running_instances_once_and_come_back(tmp_path: Path) -> None:
    running: set[str] = set()
    shares = GpuShares(tmp_path / "gpus", {POOL: [(0,), (1,)]})

    def take(root: str) -> tuple[int, ...]:
        return shares.take(POOL, root, lambda held: held in running)

    assert take("/i/a") == (0,)
    running.add("/i/a")
    assert take("/i/b") == (1,)
    running.add("/i/b")
    assert take("/i/a") == (0,)  # asked again (a relaunch): the same
    with pytest.raises(GpuShortage):
        take("/i/c")
    running.discard("/i/a")  # its instance ended: its GPU is free again
    assert take("/i/c") == (0,)
    assert shares.held_by(POOL, "/i/b") == (1,) and shares.held_by(POOL, "/i/a") == ()
    # Kept on disk: a restarted server knows who holds what.
    again = GpuShares(tmp_path / "gpus", {POOL: [(0,), (1,)]})
    assert again.held_by(POOL, "/i/c") == (0,)
    assert again.take("ml.m5.xlarge@us-east-1a", "/i/d", lambda held: True) == ()
