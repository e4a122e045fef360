"""Named network namespaces, made and removed in-process: what `ip netns add NAME`,
`ip -n NAME link set lo up` and `ip netns delete NAME` do, without their processes.

Every cold instance that starts its job's network pays for these; as three runs of
`ip` they were a tenth of a trivial job's instance-side CPU. The namespace is the
same one `ip` makes - a bind mount of the namespace on `/run/netns/NAME`, under a
`/run/netns` whose mounts propagate to other mount namespaces - so `ip netns`,
`nsenter --net=` and slirp4netns see it as before.

The namespace is entered by a short-lived thread of its own: a thread's network
namespace is its own, so the agent's other threads - and the agent itself, which
reaches S3 and the server through the host's network - never leave the host's.
Python 3.11 has no `os.unshare`, so the system calls go through libc.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from pathlib import Path

NETNS_DIR = Path("/run/netns")

_CLONE_NEWNET = 0x40000000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the interface's name, then ifr_flags

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class NetnsError(Exception):
    """The namespace could not be made or removed; str() says why."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise NetnsError(f"{what}: {os.strerror(code)}")


def _mount(source: str, target: str, flags: int) -> int:
    return int(_libc.mount(source.encode(), target.encode(), b"none", flags, None))


def _shared_dir() -> None:
    """/run/netns, a mount point whose mounts propagate (as `ip` makes it)."""
    NETNS_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    directory = str(NETNS_DIR)
    if _mount("", directory, _MS_SHARED | _MS_REC) == 0:
        return
    if ctypes.get_errno() != errno.EINVAL:
        _check(-1, f"making {directory} shared")
    # Not a mount point yet: made one by binding it on itself, then shared.
    _check(_mount(directory, directory, _MS_BIND | _MS_REC), f"binding {directory}")
    _check(_mount("", directory, _MS_SHARED | _MS_REC), f"making {directory} shared")


def _enter_new_and_bind(path: Path) -> None:
    """In a thread of its own: a new network namespace, its loopback up, bound at path."""
    _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        (flags,) = struct.unpack_from("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request), 0)[1:]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    _check(_mount("/proc/thread-self/ns/net", str(path), _MS_BIND), f"binding {path}")


def add(name: str) -> str:
    """A new network namespace with its loopback up, at /run/netns/NAME; its path."""
    path = NETNS_DIR / name
    try:
        _shared_dir()
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0)
        os.close(fd)
    except OSError as exc:
        raise NetnsError(f"cannot create the namespace file {path}: {exc}") from exc
    failure: list[BaseException] = []

    def make() -> None:
        try:
            _enter_new_and_bind(path)
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)

    # The thread ends inside the new namespace: nothing else ever runs in that thread.
    thread = threading.Thread(target=make, name="dockyard-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        delete(name)
        error = failure[0]
        raise error if isinstance(error, NetnsError) else NetnsError(str(error)) from error
    return str(path)


def delete(name: str) -> None:
    """Remove /run/netns/NAME (the namespace ends with the last process in it)."""
    path = NETNS_DIR / name
    if _libc.umount2(str(path).encode(), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOENT):  # not mounted: only the file is left
            raise NetnsError(f"cannot unmount {path}: {os.strerror(code)}")
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise NetnsError(f"cannot remove {path}: {exc}") from exc
