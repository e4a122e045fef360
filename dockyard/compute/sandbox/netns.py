"""Network namespaces made in-process, held by a file descriptor rather than a mount.

What `ip netns add NAME` and `ip -n NAME link set lo up` did for each job's instances,
without their processes (as three runs of `ip`, a tenth of a trivial job's instance-side
CPU) - and without the bind mount on `/run/netns/NAME` that `ip` keeps the namespace
by. Every mount of the host's mount namespace is copied into each new sandbox and
read back by bwrap once per directory it binds, so a mount per running job made each
sandbox's start slower by the number of jobs running (one sandboxed process: 43 ms of
CPU with the host's 21 mounts, 183 ms with 1,000 more). An open descriptor keeps the
namespace as well, and `/proc/PID/fd/N` names it for nsenter and slirp4netns.

The namespace is made by a short-lived thread of its own: a thread's network
namespace is its own, so the agent's other threads - and the agent itself, which
reaches S3 and the server through the host's network - never leave the host's.
Python 3.11 has no `os.unshare`, so the system call goes through libc.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

NETNS_DIR = Path("/run/netns")

_CLONE_NEWNET = 0x40000000
_MNT_DETACH = 2
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the interface's name, then ifr_flags

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]


class NetnsError(Exception):
    """The namespace could not be made or removed; str() says why."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise NetnsError(f"{what}: {os.strerror(code)}")


def _enter_new() -> int:
    """In a thread of its own: a new network namespace with its loopback up; a
    descriptor of it."""
    _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        (flags,) = struct.unpack_from("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, request), 0)[1:]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def new() -> int:
    """A new network namespace with its loopback up, as a descriptor (not inherited by
    child processes): it lives while the descriptor, or anything in it, does."""
    # The thread ends inside the new namespace: nothing else ever runs in that thread.
    return _in_thread(_enter_new)


def _in_thread(work: Callable[[], T]) -> T:
    """Run `work` in a short-lived thread of its own and answer what it answered: a
    thread that changes its network namespace never runs anything else."""
    made: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            made.append(work())
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="dockyard-netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        error = failure[0]
        raise error if isinstance(error, NetnsError) else NetnsError(str(error)) from error
    return made[0]


def enter(namespace: str, work: Callable[[], T]) -> T:
    """Run `work` inside the network namespace `namespace` (a path such as
    /proc/PID/fd/N), in a thread of its own; answer what it answered. What it makes
    there (a socket, a device) stays in that namespace, whoever uses it later."""

    def inside() -> T:
        fd = os.open(namespace, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _check(_libc.setns(fd, _CLONE_NEWNET), "setns(CLONE_NEWNET)")
        finally:
            os.close(fd)
        return work()

    return _in_thread(inside)


def listen(namespace: str, host: str, port: int, backlog: int) -> socket.socket:
    """A TCP socket listening on host:port inside the network namespace `namespace`:
    whoever accepts on it talks with that network, from wherever it runs."""

    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
            sock.listen(backlog)
        except OSError:
            sock.close()
            raise
        return sock

    return enter(namespace, make)


def inode(fd: int) -> int:
    """The namespace's identity: what a descriptor of it is checked against."""
    return os.fstat(fd).st_ino


def is_network_namespace(fd: int) -> bool:
    return os.fstat(fd).st_dev == os.stat("/proc/self/ns/net").st_dev


def delete(name: str) -> None:
    """Remove /run/netns/NAME, a namespace named as `ip netns add` names it (an older
    dockyard's): it ends with the last process in it."""
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
