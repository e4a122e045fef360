"""The network of a job's instances: one network namespace they share, and nothing else.

SageMaker gives a job's instances a network of their own. Here every instance of a
job (or of the warm pool that runs it) joins one network namespace, so `algo-1..N`
meet on its loopback, and no other job - nor the server's port on the host's
loopback - is reachable from it. A job with `EnableNetworkIsolation` gets just that
(spec §4.7). Any other job also gets a way out: slirp4netns, the user-mode network
stack rootless containers use, NATs its traffic to the outside world with the host's
loopback switched off (`--disable-host-loopback`), so PyPI is reachable and
127.0.0.1:8080 on the host is not.

The namespace belongs to the instances' home directory and lives as long as one of
its agents does: each agent joins at start - the first makes it (`sandbox.netns`),
the others take a descriptor of it from a member, checked to be that namespace - and
holds it by that descriptor until it leaves when it shuts down, under a lock; the last
to leave stops slirp4netns, and the namespace ends with the last reference to it. It
is never mounted: a mount per running job would slow every sandbox's start (see
`sandbox.netns`).

slirp4netns ends with the last agent however the agents end (SIGKILLed, or killed
while it was starting, before its PID was written down): it watches the reading end of
a pipe (`--exit-fd`) whose writing end only the members hold - the first makes it,
each other takes its own from a member as it takes the namespace - and exits once the
last is closed, which the kernel does for a process that dies. Agents that died
without leaving are also noticed by whoever takes the lock next, and `sweep` stops
what no live agent holds (the backend runs it; an older dockyard's slirp4netns has no
pipe). Before a job runs, the namespace refuses the host's own addresses and link-local
ones (`sandbox.routes`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import signal
import stat
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dockyard.compute.sandbox import netns, routes

# slirp4netns is ready in milliseconds on its own; a host starting hundreds of
# instances at once on two cores took over 10 s (issue 13's 1,000 trivial jobs).
SLIRP_READY_SECONDS = 60.0
AGENT_MODULE = b"dockyard.compute.agent"


class NetworkError(Exception):
    """The namespace could not be made; str() says why."""


def _process_is(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class HomeNetwork:
    """The network namespace of one home (`<data-dir>/instances/<key>/`)."""

    def __init__(self, home: Path, isolated: bool) -> None:
        self.home = home
        self.isolated = isolated
        self.dir = home / "network"
        digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:20]
        self.name = f"dockyard-{digest}"  # its name under /run/netns, in older versions
        self._fd: int | None = None  # this agent's descriptor of it, while it is a member
        # This agent's writing end of slirp4netns's exit pipe, while it is a member.
        self._exit: int | None = None

    @property
    def path(self) -> str:
        """The namespace, as a path this process's children open (nsenter, slirp4netns):
        this process's descriptor of it, so it cannot name anything else."""
        if self._fd is None:
            raise NetworkError("the instance has not joined its network")
        return f"/proc/{os.getpid()}/fd/{self._fd}"

    @property
    def _mode(self) -> str:
        return "isolated" if self.isolated else "outbound"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.dir / "members").mkdir(mode=0o700, exist_ok=True)
        with open(self.dir / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def join(self, member: str, pid: int) -> str:
        """Add an instance's agent (`pid`, this process); answer the namespace's path
        (made if need be). The agent holds a descriptor of it (and one of slirp4netns's
        exit pipe) until it leaves."""
        with self._locked():
            alive = self._prune()
            held = self._adopt(alive) if self._up() else None
            if held is None:
                self._teardown()
                held = self._create()
            self._fd, self._exit = held
            record = f"{pid} {self._fd} {netns.inode(self._fd)}"
            if self._exit is not None:
                record += f" {self._exit} {os.fstat(self._exit).st_ino}"
            (self.dir / "members" / member).write_text(record)
        return self.path

    def leave(self, member: str) -> None:
        with self._locked():
            (self.dir / "members" / member).unlink(missing_ok=True)
            for fd in (self._fd, self._exit):
                if fd is not None:
                    os.close(fd)
            self._fd = self._exit = None
            if not self._prune():
                self._teardown()

    def sweep(self) -> None:
        """Stop the namespace's slirp4netns if no live agent holds it."""
        if not self.dir.is_dir():
            return
        with self._locked():
            if not self._prune():
                self._teardown()

    def _prune(self) -> dict[str, list[int]]:
        """Forget members whose agent is gone; answer those left: pid, the descriptor it
        holds the namespace by, the namespace's inode, and (if it holds one) the
        descriptor of its end of slirp4netns's exit pipe and the pipe's inode."""
        alive: dict[str, list[int]] = {}
        for entry in (self.dir / "members").iterdir():
            try:
                fields = [int(field) for field in entry.read_text().split()]
            except (OSError, ValueError):
                fields = []
            pid = fields[0] if fields else 0
            if pid and _process_is(pid, AGENT_MODULE):
                # An older dockyard's member names no descriptor: it cannot be joined.
                alive[entry.name] = fields if len(fields) >= 3 else [pid, -1, 0]
            else:
                entry.unlink(missing_ok=True)
        return alive

    def _adopt(self, alive: dict[str, list[int]]) -> tuple[int, int | None] | None:
        """Descriptors of the namespace and of slirp4netns's exit pipe that a live member
        holds (the pipe's None if its slirp4netns has none: an older dockyard's); None
        if none can be had. What each descriptor number names now is checked to be what
        the member recorded still."""
        for fields in alive.values():
            pid, fd, inode = fields[:3]
            if fd < 0:
                continue
            found = _open_checked(pid, fd, inode, os.O_RDONLY, netns.is_network_namespace)
            if found is None:
                continue
            if len(fields) < 5:
                return found, None
            exit_fd, exit_inode = fields[3:5]
            # A pipe opened for writing needs a reader: slirp4netns, still there.
            held = _open_checked(pid, exit_fd, exit_inode, os.O_WRONLY | os.O_NONBLOCK, _is_fifo)
            if held is not None:
                return found, held
            os.close(found)
        return None

    def _slirp_pid(self) -> int | None:
        try:
            pid = int((self.dir / "slirp.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _process_is(pid, b"slirp4netns") else None

    def _up(self) -> bool:
        try:
            mode = (self.dir / "mode").read_text()
        except OSError:
            return False
        return mode == self._mode and (self.isolated or self._slirp_pid() is not None)

    def _create(self) -> tuple[int, int | None]:
        try:
            fd = netns.new()
        except netns.NetnsError as exc:
            raise NetworkError(f"could not make the job's network namespace: {exc}") from exc
        exit_write = None
        try:
            if not self.isolated:
                namespace = f"/proc/{os.getpid()}/fd/{fd}"
                exit_write = self._start_slirp(namespace)
                self._refuse_host(namespace)
        except NetworkError:
            for held in (fd, exit_write):
                if held is not None:
                    os.close(held)
            self._teardown()
            raise
        (self.dir / "mode").write_text(self._mode)
        return fd, exit_write

    @staticmethod
    def _refuse_host(namespace: str) -> None:
        """The host's addresses (as this agent's network has them) and link-local ones
        refused inside the namespace, before any job runs there."""
        try:
            refused = routes.refused(routes.host_addresses())
            netns.enter(namespace, lambda: routes.prohibit(refused))
        except (routes.RoutesError, netns.NetnsError, OSError) as exc:
            raise NetworkError(f"could not shut the host out of the job's network: {exc}") from exc

    def _start_slirp(self, namespace: str) -> int:
        """Start slirp4netns for `namespace`; answer the writing end of its exit pipe."""
        ready_read, ready_write = os.pipe()
        exit_read, exit_write = os.pipe()
        try:
            with open(self.dir / "slirp.log", "ab") as log:
                process = subprocess.Popen(
                    [
                        # A private mount namespace first: the sandbox slirp4netns makes
                        # for itself remounts /run, and /run/netns propagates to the host.
                        "unshare",
                        "--mount",
                        "--propagation",
                        "private",
                        "slirp4netns",
                        "--configure",
                        "--mtu=65520",
                        "--disable-host-loopback",
                        # It parses the jobs' packets: its own mount namespace, no
                        # capabilities, and a syscall filter.
                        "--enable-sandbox",
                        "--enable-seccomp",
                        f"--ready-fd={ready_write}",
                        # It exits once no member holds the pipe's other end.
                        f"--exit-fd={exit_read}",
                        "--netns-type=path",
                        namespace,
                        "tap0",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(ready_write, exit_read),
                    # Its own session: it outlives the agent that started it, while
                    # other members hold its exit pipe.
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                )
            os.close(ready_write)
            ready_write = -1
            readable, _, _ = select.select([ready_read], [], [], SLIRP_READY_SECONDS)
            if not readable or os.read(ready_read, 1) != b"1":
                process.kill()
                process.wait()
                waited = "" if readable else f" within {SLIRP_READY_SECONDS:.0f} s"
                raise NetworkError(
                    f"slirp4netns did not bring the job's network up{waited}: "
                    + (self.dir / "slirp.log").read_text(errors="replace")[-500:]
                )
        except BaseException:
            os.close(exit_write)
            raise
        finally:
            os.close(ready_read)
            os.close(exit_read)
            if ready_write >= 0:
                os.close(ready_write)
        (self.dir / "slirp.pid").write_text(str(process.pid))
        return exit_write

    def _teardown(self) -> None:
        pid = self._slirp_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if (netns.NETNS_DIR / self.name).exists():  # mounted there by an older dockyard
            try:
                netns.delete(self.name)
            except netns.NetnsError:
                pass  # looked at again by the next sweep
        for name in ("mode", "slirp.pid"):
            (self.dir / name).unlink(missing_ok=True)


def _open_checked(
    pid: int, fd: int, inode: int, flags: int, kind: Callable[[int], bool]
) -> int | None:
    """A descriptor of what process `pid`'s descriptor `fd` names, if that is still the
    `kind` of thing with `inode` it was recorded as; None otherwise."""
    try:
        found = os.open(f"/proc/{pid}/fd/{fd}", flags | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if kind(found) and os.fstat(found).st_ino == inode:
            return found
    except OSError:
        pass
    os.close(found)
    return None


def _is_fifo(fd: int) -> bool:
    return stat.S_ISFIFO(os.fstat(fd).st_mode)


def sweep(instances: Path) -> None:
    """Every home under `<data-dir>/instances` whose agents are all gone loses its
    network namespace (agents that were killed never left)."""
    for network_dir in instances.glob("*/network"):
        mode = network_dir / "mode"
        isolated = mode.is_file() and mode.read_text() == "isolated"
        HomeNetwork(network_dir.parent, isolated).sweep()
