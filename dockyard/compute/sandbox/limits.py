"""An instance's resource limits: a cgroup sized from its instance type (spec §4.8).

Each instance gets a cgroup of its own under `dockyard/` with its type's memory (no
swap beyond it), CPUs and a process count; every process of its sandbox is in it from
its first instruction (the sandbox's command joins it before bwrap runs). A job that
outgrows its memory is killed by the kernel's OOM killer inside the cgroup - never
the agent or the server, which stay outside - and the kill is counted, so the agent
can say "out of memory" rather than "killed by signal 9".

cgroup v2 (one unified hierarchy) is used where its controllers can be delegated to
us; otherwise the v1 hierarchies (memory, cpu, pids) as on older hosts. Where neither
can be written, `Cgroup.create` answers None and the instance runs without limits
(the reason is logged by the caller).
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from dockyard.clock import monotonic

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "dockyard"
CPU_PERIOD_US = 100_000
_V1 = ("memory", "cpu", "pids")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None
    cpus: int | None = None
    pids: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, object] | None) -> Limits:
        data = data or {}

        def number(key: str) -> int | None:
            value = data.get(key)
            return int(value) if isinstance(value, (int, float)) and value > 0 else None

        return cls(number("memory_bytes"), number("cpus"), number("pids"))

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.memory_bytes, self.cpus, self.pids))


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, options) of the cgroup file systems."""
    found = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((fields[1], fields[2], set(fields[3].split(","))))
    return found


@functools.cache
def _layout() -> tuple[str, dict[str, Path]] | None:
    """("v2", {"": dir}) or ("v1", {controller: dir}): where instance cgroups go."""
    mounts = _mounts()
    for point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        root = Path(point)
        try:
            available = set((root / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if set(_V1) <= available and _delegate_v2(root):
            return ("v2", {"": root / PARENT})
    dirs: dict[str, Path] = {}
    for point, kind, options in mounts:
        if kind == "cgroup":
            for controller in _V1:
                if controller in options and controller not in dirs:
                    dirs[controller] = Path(point) / PARENT
    if set(dirs) == set(_V1):
        try:
            for directory in dirs.values():
                directory.mkdir(exist_ok=True)
        except OSError:
            return None
        return ("v1", dirs)
    return None


def _delegate_v2(root: Path) -> bool:
    """Enable memory, cpu and pids for dockyard's subtree of the unified hierarchy."""
    try:
        (root / PARENT).mkdir(exist_ok=True)
        for directory in (root, root / PARENT):
            enabled = set((directory / "cgroup.subtree_control").read_text().split())
            missing = [c for c in _V1 if c not in enabled]
            if missing:
                _write(directory / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))
    except OSError:
        return False
    return True


def unavailable() -> str | None:
    """Why instances run without limits here, or None when they get them."""
    if os.geteuid() != 0:
        return "resource limits need dockyard to run as root"
    if _layout() is None:
        return "no writable cgroup hierarchy with the memory, cpu and pids controllers"
    return None


@dataclass(frozen=True)
class Cgroup:
    """One instance's cgroup: a directory per hierarchy (one on v2)."""

    version: str
    dirs: tuple[Path, ...]

    @classmethod
    def of(cls, instance_root: Path) -> tuple[Cgroup, dict[str, Path]] | None:
        """An instance's cgroup (named by its root, unique on this host), made or not."""
        layout = _layout()
        if layout is None:
            return None
        version, parents = layout
        name = "i-" + hashlib.sha256(str(instance_root.resolve()).encode()).hexdigest()[:20]
        dirs = {key: parent / name for key, parent in parents.items()}
        return cls(version, tuple(dirs.values())), dirs

    @classmethod
    def create(cls, instance_root: Path, limits: Limits) -> Cgroup | None:
        found = cls.of(instance_root) if limits.any else None
        if found is None:
            return None
        group, dirs = found
        try:
            for directory in dirs.values():
                directory.mkdir(exist_ok=True)
            # A cgroup left by an agent that died: nothing of that instance may live on.
            group.kill()
            group._limit(limits, dirs)
        except OSError:
            return None
        return group

    def _limit(self, limits: Limits, dirs: dict[str, Path]) -> None:
        if self.version == "v2":
            directory = dirs[""]
            if limits.memory_bytes:
                _write(directory / "memory.max", str(limits.memory_bytes))
                if (directory / "memory.swap.max").exists():
                    _write(directory / "memory.swap.max", "0")
            if limits.cpus:
                _write(directory / "cpu.max", f"{limits.cpus * CPU_PERIOD_US} {CPU_PERIOD_US}")
            if limits.pids:
                _write(directory / "pids.max", str(limits.pids))
            return
        if limits.memory_bytes:
            _write(dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
            swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
            if swap.exists():
                try:
                    _write(swap, str(limits.memory_bytes))
                except OSError:
                    pass  # swap accounting off: memory alone is limited
        if limits.cpus:
            _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(limits.cpus * CPU_PERIOD_US))
        if limits.pids:
            _write(dirs["pids"] / "pids.max", str(limits.pids))

    def join_steps(self) -> list[str]:
        """Shell steps that move the shell into this cgroup: writing 0 to cgroup.procs
        moves the writer (and a later `exec` keeps the process)."""
        return [f"echo 0 > {d / 'cgroup.procs'}" for d in self.dirs]

    def processes(self) -> set[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        return found

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL every process in it, until none is left."""
        give_up = monotonic() + timeout
        while True:
            pids = self.processes()
            if not pids or monotonic() > give_up:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in it, ever."""
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        for directory in self.dirs:
            try:
                text = (directory / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        self.kill()
        for directory in self.dirs:
            try:
                directory.rmdir()
            except OSError:
                pass


def remove_for(instance_root: Path) -> None:
    """Remove an instance's cgroup, if it has one (its agent died without doing so)."""
    if os.geteuid() != 0:
        return
    found = Cgroup.of(instance_root)
    if found is not None and any(d.is_dir() for d in found[0].dirs):
        found[0].remove()
