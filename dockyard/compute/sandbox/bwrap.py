"""The job sandbox: everything an instance's code runs in (spec §4.8).

A training job's code is a tenant's upload, so every run of it - the job, the install of
its requirements.txt, the interpreter a warm pool parks for the next job - happens in a
sandbox made with bubblewrap (`bwrap`), the tool Flatpak builds its sandboxes with:

- a mount namespace whose root is an empty tmpfs holding only a read-only system
  (`/usr` and its links, a short list of `/etc` files, the job's interpreter), the
  instance's own `/opt/ml`, its venv (read-only while the job runs), a `/tmp` (a new
  tmpfs each time) and a home of its own, and generated `/etc/{hosts,passwd,group,
  resolv.conf}`; no data dir, no other instance, no server file;
- its own PID, IPC and UTS namespaces (host name `algo-N`): it sees and signals only
  its own processes, and when its first process ends the kernel ends the rest;
- the network namespace of its instances (`sandbox.network`), or one with only
  loopback;
- an unprivileged uid of its account's own, no capabilities (the bounding set emptied
  too) and no new privileges, switched to by `setpriv` after bwrap (run as root) has
  made the mounts - bwrap's own user namespace would map the sandbox uid to root;
- the cgroup of its instance (`sandbox.limits`), joined before anything runs;
- a system-call filter (`sandbox.seccomp`): no kernel keyrings, which outlive namespaces.

bwrap, nsenter and setpriv run as root, so nothing a job controls reaches them: they
get a fixed environment, and the job's environment travels on the parked
interpreter's stdin (`agent.zygote`), never in an argv another local user could read.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dockyard.compute.sandbox.limits import Cgroup

# What the sandbox needs, and the Debian package each comes from.
TOOLS = {
    "bwrap": "bubblewrap",
    "setpriv": "util-linux",
    "nsenter": "util-linux",
    "slirp4netns": "slirp4netns",
}
INSTALL = "apt-get install bubblewrap slirp4netns util-linux"
UNSAFE_FLAG = "--unsafe-no-sandbox"

# NVIDIA's device nodes every GPU process needs besides its GPUs' own /dev/nvidiaN.
_GPU_SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")

# Where things are inside the sandbox.
OPT_ML = "/opt/ml"
VENV = "/opt/venv"
HOME = "/home/sagemaker"
UV = "/opt/dockyard/bin/uv"
UV_CACHE = "/opt/dockyard/uv-cache"
USER = "sagemaker"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the tools that run as root on the way in are found: never a PATH a job has a
# say in (their environment is `Sandbox.environment`, fixed, nothing of the job's).
TOOLS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# Top-level system directories, bound read-only (or re-created as the links they are).
_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The /etc a program needs to run (the loader, TLS roots, time zones, name service
# switch...), not the host's configuration and secrets.
_ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "protocols",
    "services",
    "ssl",
    "timezone",
)
# The host facts a training library reads to size itself (CPUs, NUMA nodes).
_SYS = ("/sys/devices/system/cpu", "/sys/devices/system/node")
# Generated per instance (see `Sandbox.write_files`).
_GENERATED_ETC = ("hosts", "hostname", "passwd", "group", "resolv.conf")


class SandboxError(Exception):
    """The sandbox cannot be made here; str() says why and what to do."""


def unavailable() -> str | None:
    """Why this host cannot sandbox jobs, or None when it can."""
    if os.geteuid() != 0:
        return (
            "the job sandbox needs dockyard to run as root: each instance runs as an "
            "unprivileged user of its own, which only root can arrange"
        )
    missing = sorted({TOOLS[tool] for tool in TOOLS if shutil.which(tool) is None})
    if missing:
        return f"the job sandbox needs {', '.join(missing)}, not installed on this host"
    return None


def unavailable_message(why: str) -> str:
    return (
        f"{why}; install it with `{INSTALL}` (`make sandbox` does), or start dockyard "
        f"with {UNSAFE_FLAG}, which runs jobs unconfined (see docs/security.md)"
    )


def _under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


@functools.cache
def interpreter_dirs(python: str) -> tuple[str, ...]:
    """The directories a Python interpreter needs, outside /usr: its virtual
    environment, if it is one, and the installation it was made from."""
    path = Path(python)
    if not path.is_absolute():
        raise SandboxError(f"the interpreter {python} is not an absolute path")
    found: set[Path] = set()
    env_root = path.parent.parent
    config = env_root / "pyvenv.cfg"
    if config.is_file():
        found.add(env_root)
        for line in config.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                found.add(Path(value.strip()).resolve().parent)
    real = path.resolve()
    if real.exists():
        found.add(real.parent.parent)
    system = [Path("/") / name for name in _SYSTEM_DIRS]
    dirs = sorted(d for d in found if not any(_under(d, s) for s in system))
    if Path("/") in dirs:
        raise SandboxError(f"the interpreter {python} is installed at /, which cannot be bound")
    # A directory inside another one is bound with it.
    return tuple(str(d) for d in dirs if not any(o != d and _under(d, o) for o in dirs))


@dataclass(frozen=True)
class SandboxDirs:
    """The host side of an instance's sandbox, under its root."""

    root: Path

    @property
    def base(self) -> Path:
        return self.root / "sandbox"

    @property
    def etc(self) -> Path:
        return self.base / "etc"

    @property
    def home(self) -> Path:
        return self.base / "home"


@dataclass(frozen=True)
class Sandbox:
    """How to run a command as one instance's code. `command()` answers the argv."""

    root: Path  # the instance's root on this host (its /opt/ml, venv, sandbox dirs)
    uid: int
    hostname: str
    hosts: tuple[str, ...]
    netns: str | None = None  # join this network namespace; None: one of its own
    cgroup: Cgroup | None = None
    # What must stay out of sight: no directory bound into the sandbox may hold it (the
    # instance's root, and so the data dir above it).
    private: Path | None = None
    # The host GPUs it runs on: their device nodes (and the driver's shared ones) are
    # bound into its /dev; no other GPU's is.
    gpus: tuple[int, ...] = ()
    # Each host's address on the job network (`agent.overlay`), when its hosts are on
    # different machines; otherwise they all share the namespace's loopback.
    addresses: tuple[tuple[str, str], ...] = ()

    @property
    def dirs(self) -> SandboxDirs:
        return SandboxDirs(self.root)

    # -- the files it sees --------------------------------------------------------------

    def write_files(self) -> None:
        """/etc files of its own, and an empty home owned by its user."""
        dirs = self.dirs
        for directory in (dirs.base, dirs.etc):
            directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(directory, 0o755)
        try:
            system_hosts = Path("/etc/hosts").read_text()
        except OSError:
            system_hosts = "127.0.0.1 localhost\n"
        # Every host of a job is in one network namespace: algo-1..N resolve to its
        # loopback, so instances rendezvous by host name as on SageMaker. Across
        # machines each resolves to its address on the job network.
        if self.addresses:
            named = "".join(f"{address} {host}\n" for host, address in self.addresses)
        else:
            named = "127.0.0.1 " + " ".join(self.hosts) + "\n"
        hosts = system_hosts.rstrip("\n") + "\n" + named
        uid = self.uid
        files = {
            "hosts": hosts,
            "hostname": self.hostname + "\n",
            "passwd": (
                "root:x:0:0:root:/root:/usr/sbin/nologin\n"
                f"{USER}:x:{uid}:{uid}:SageMaker training job:{HOME}:/bin/sh\n"
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
            "group": f"root:x:0:\n{USER}:x:{uid}:\nnogroup:x:65534:\n",
            # slirp4netns answers DNS on 10.0.2.3; an isolated namespace has no resolver.
            "resolv.conf": "nameserver 10.0.2.3\n" if self.netns else "",
        }
        for name, text in files.items():
            path = dirs.etc / name
            if not path.is_file() or path.read_text() != text:
                tmp = path.with_name(f".{name}.tmp")
                tmp.write_text(text)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
        make_owned_dir(dirs.home, uid)

    def wipe_scratch(self) -> None:
        """A fresh home for the next job on this instance (its /tmp is new each time)."""
        shutil.rmtree(self.dirs.home, ignore_errors=True)
        make_owned_dir(self.dirs.home, self.uid)

    def inside(self, host_path: str | Path) -> str:
        """A host path of this instance as the sandbox sees it."""
        path = Path(host_path)
        for host, seen in (
            (self.root / "opt" / "ml", OPT_ML),
            (self.root / "venv", VENV),
        ):
            if _under(path, host):
                return seen + path.as_posix()[len(host.as_posix()) :]
        return path.as_posix()

    # -- the command ----------------------------------------------------------------------

    def command(
        self,
        argv: list[str],
        python: str,
        *,
        venv: Path | None = None,
        venv_writable: bool = False,
        uv: str | None = None,
        uv_cache: Path | None = None,
        info_fd: int | None = None,
        seccomp_fd: int | None = None,
    ) -> list[str]:
        """`argv` (paths as the sandbox sees them) run in this instance's sandbox.

        `python` is the interpreter installation to show it (a host path; for a job
        running in the instance's venv, the interpreter the venv was made from).
        `info_fd` and `seccomp_fd` are descriptors of one start, handed to bwrap: where
        it reports the sandbox's PID, and the system-call filter to read
        (`sandbox.seccomp.descriptor()`). Every command that is run has one; only an
        argv kept to compare with (`Confinement.key`) goes without.
        """
        args = [
            tool("bwrap"),
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            self.hostname,
        ]
        if self.netns is None:
            args.append("--unshare-net")
        args += _system_binds()
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]
        if self.gpus:
            for device in _GPU_SHARED + tuple(f"/dev/nvidia{gpu}" for gpu in self.gpus):
                args += ["--dev-bind-try", device, device]
        # /tmp is a file system of each sandbox's own, new and empty: no process of the
        # job can have touched it while bwrap, as root, makes mount points in it (an
        # interpreter may live under /tmp, as a checkout's venv does).
        args += ["--perms", "1777", "--tmpfs", "/tmp"]
        for directory in interpreter_dirs(python):
            self._check_bindable(Path(directory), python)
            args += _parents(directory) + ["--ro-bind", directory, directory]
        args += _interpreter_file(python)
        dirs = self.dirs
        args += ["--perms", "0755", "--dir", "/opt"]
        args += ["--bind", str(self.root / "opt" / "ml"), OPT_ML]
        if venv is not None:
            args += ["--bind" if venv_writable else "--ro-bind", str(venv), VENV]
        args += ["--perms", "0755", "--dir", "/home", "--bind", str(dirs.home), HOME]
        for name in _GENERATED_ETC:
            args += ["--ro-bind", str(dirs.etc / name), f"/etc/{name}"]
        if uv is not None:
            args += ["--perms", "0755", "--dir", "/opt/dockyard"]
            args += ["--perms", "0755", "--dir", "/opt/dockyard/bin", "--ro-bind", uv, UV]
        if uv_cache is not None:
            args += [
                "--perms",
                "0755",
                "--dir",
                "/opt/dockyard",
                "--bind",
                str(uv_cache),
                UV_CACHE,
            ]
        for path in _SYS:
            args += ["--ro-bind-try", path, path]
        args += ["--chdir", "/"]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        # Root inside bwrap only long enough for setpriv to become the job's user.
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        args += ["--", *_setpriv(self.uid), "--", *argv]
        if self.netns is not None:
            args = [tool("nsenter"), f"--net={self.netns}", "--", *args]
        return _as_root_first(self.cgroup) + args

    def _check_bindable(self, directory: Path, python: str) -> None:
        if any(_under(directory, Path(private)) for private in _PRIVATE):
            raise SandboxError(
                f"the interpreter {python} is installed in {directory}, under a directory "
                "each sandbox has of its own; install it elsewhere"
            )
        if self.private is not None and _under(self.private.resolve(), directory):
            raise SandboxError(
                f"the interpreter {python} lives in {directory}, which holds dockyard's "
                "data dir: a job would see it; give jobs an interpreter installed elsewhere"
            )

    def environment(self, python: str, venv: bool) -> dict[str, str]:
        """The variables every process in this sandbox starts with."""
        path = [f"{VENV}/bin"] if venv else []
        bin_dir = str(Path(python).parent)
        if bin_dir not in SYSTEM_PATH.split(":"):
            path.append(bin_dir)
        return {
            "PATH": ":".join([*path, SYSTEM_PATH]),
            "HOME": HOME,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }


# A job's processes go first when the host as a whole runs out of memory (the server
# and the agents last). Written by root before the job's user exists, which also sets
# the floor an unprivileged process may lower its score to: the job cannot lower it.
JOB_OOM_SCORE = 500


def _as_root_first(cgroup: Cgroup | None) -> list[str]:
    """A prefix run as root before the sandbox: the job's OOM score, its cgroup."""
    steps = [f"echo {JOB_OOM_SCORE} > /proc/self/oom_score_adj"]
    if cgroup is not None:
        steps += cgroup.join_steps()
    return ["/bin/sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh"]


def make_owned_dir(path: Path, uid: int) -> None:
    """A directory the sandbox's user owns, its parent root's (so it cannot be swapped)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise SandboxError(f"{path} is not a directory")
    os.chown(path, uid, uid, follow_symlinks=False)
    os.chmod(path, 0o700, follow_symlinks=False)


@functools.cache
def tool(name: str) -> str:
    """A sandbox tool's absolute path: what root runs is never looked up in a PATH a job
    could have a say in."""
    found = shutil.which(name, path=TOOLS_PATH)
    if found is None:
        raise SandboxError(unavailable_message(f"{name} ({TOOLS[name]}) is not installed"))
    return found


def _setpriv(uid: int) -> list[str]:
    return [
        tool("setpriv"),
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]


def _parents(directory: str) -> list[str]:
    """Directories above a bind target, made traversable: bwrap would copy the host's
    modes, and an interpreter under /root (0700) would be unreachable."""
    args: list[str] = []
    parts = Path(directory).parts[1:-1]
    for depth in range(1, len(parts) + 1):
        parent = "/" + "/".join(parts[:depth])
        if parent.split("/")[1] in _SYSTEM_DIRS:
            return []
        args += ["--perms", "0755", "--dir", parent]
    return args


# Directories bound from the instance's own, which the job may write: nothing of the
# host can be shown inside them, nor may bwrap, as root, make a mount point in one.
_PRIVATE = (OPT_ML, VENV, HOME, "/proc", "/dev")


def _interpreter_file(python: str) -> list[str]:
    """The interpreter's own path, when it lies outside every directory bound for it
    (a link such as `/opt/images/torch/python -> /usr/bin/python3.11`)."""
    path = Path(python)
    bound = [Path(d) for d in interpreter_dirs(python)]
    bound += [Path("/") / name for name in _SYSTEM_DIRS]
    if any(_under(path, d) for d in bound):
        return []
    if any(_under(path, Path(private)) for private in _PRIVATE):
        raise SandboxError(
            f"the interpreter {python} is under a directory each sandbox has of its own; "
            "install it elsewhere"
        )
    return _parents(python) + ["--ro-bind", python, python]


@functools.cache
def _system_binds() -> tuple[str, ...]:
    # What the host looks like does not change while dockyard runs.
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC:
        path = Path("/etc") / name
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    return tuple(args)
