"""The host's GPUs, handed to the local backend's instances as they start.

A fleet group may list the GPUs its instances run on (`domain.fleet`); each of its
instances gets one share of them. Leases count instances, not which ones, so the share
is chosen here, when an instance starts: the first one no running instance holds. The
choice is kept in the data dir (`gpus/<pool>/<share>` names the instance root holding
it), under a lock, so a restarted server knows which GPUs its adopted instances have;
a share whose instance is no longer running is free again. A warm pool's instance keeps
its share from job to job (its agent keeps running).
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Mapping
from pathlib import Path

from dockyard.compute.wire.private_files import write_private


class GpuShortage(RuntimeError):
    """Every GPU share of a pool is held by a running instance."""


class GpuShares:
    def __init__(self, directory: Path, shares: Mapping[str, list[tuple[int, ...]]]) -> None:
        self.directory = directory
        self.shares = dict(shares)

    def take(self, pool: str, holder: str, running: Callable[[str], bool]) -> tuple[int, ...]:
        """The share of `pool` that the instance at `holder` (its root) runs on: the one
        it holds already, else the first one no running instance holds (`running`: is
        the instance at this root running). () for a pool without GPUs."""
        shares = self.shares.get(pool)
        if not shares:
            return ()
        held = self.directory / _safe(pool)
        held.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(held / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            owners = {index: _read(held / str(index)) for index in range(len(shares))}
            for index, owner in owners.items():
                if owner == holder:
                    return shares[index]
            for index, owner in owners.items():
                if owner is None or not running(owner):
                    write_private(held / str(index), holder)
                    return shares[index]
        raise GpuShortage(f"every GPU share of {pool} is held by a running instance")

    def held_by(self, pool: str, holder: str) -> tuple[int, ...]:
        """The share the instance at `holder` holds, () if none."""
        held = self.directory / _safe(pool)
        for index, share in enumerate(self.shares.get(pool, [])):
            if _read(held / str(index)) == holder:
                return share
        return ()


def _safe(pool: str) -> str:
    return pool.replace("/", "_")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
