"""Touching a tree the job owned, as root, without being led out of it.

While a job runs its `/opt/ml` is its own: it may leave a symbolic link where its
model directory was (`/opt/ml/model -> /etc`), a link named `failure` pointing at a
key, a FIFO that never ends. The agent reads and empties that tree as root after the
job's sandbox is gone, so every path it follows there is checked one component at a
time (`O_NOFOLLOW`, directories by descriptor), and walks never enter links: a link
is packed as a link, never read through.

Before a job starts the agent lays its tree out as root, then hands it over
(`hand_over`): ownership moves to the sandbox's user children first and by descriptor,
so a process of that user racing the walk (a warm pool's parked interpreter) cannot
turn it onto a host file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(base: Path, parts: list[str]) -> int:
    """A descriptor of base/parts..., refusing a link anywhere below `base`."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for part in parts:
            if part in ("", ".", ".."):
                raise OSError(f"refusing the path component {part!r}")
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def relative_parts(base: Path, path: Path) -> list[str]:
    return list(path.relative_to(base).parts)


def read_regular(base: Path, path: Path, limit: int) -> bytes | None:
    """At most `limit` bytes of a regular file under `base`; None if it is anything else
    (missing, a link, a FIFO, a device) or any directory on the way is a link."""
    parts = relative_parts(base, path)
    try:
        directory = _open_dir(base, parts[:-1])
    except OSError:
        return None
    try:
        fd = os.open(
            parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
    except OSError:
        return None
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir_under(base: Path, path: Path) -> bool:
    """Whether `path` and every directory between it and `base` is a real directory."""
    try:
        parts = relative_parts(base, path)
    except ValueError:
        return False
    current = base
    for part in ["", *parts]:
        current = current / part if part else current
        if not is_real_dir(current):
            return False
    return True


def walk(base: Path, directory: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under `directory` (a real directory all the way down from `base`),
    links included but never followed, depth-first."""
    if not is_real_dir_under(base, directory):
        return
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            try:
                yield path, os.lstat(path)
            except OSError:
                continue
        dirnames.sort()


def regular_files(base: Path, directory: Path) -> Iterator[Path]:
    for path, info in walk(base, directory):
        if stat.S_ISREG(info.st_mode):
            yield path


def hand_over(top: Path, uid: int, skip: Path | None = None) -> None:
    """Make `top` and everything in it (but `skip`, already the user's) owned by `uid`.

    Descriptor-based and children first: a directory becomes the user's only after all
    it holds, so the user can change nothing the walk has still to visit, and a link
    swapped in is changed itself (lchown), never its target.
    """
    if not is_real_dir(top):
        return
    skip_key = None
    if skip is not None:
        try:
            info = os.lstat(skip)
            skip_key = (info.st_dev, info.st_ino)
        except OSError:
            pass
    top_fd = os.open(top, _DIR_FLAGS)
    try:
        _hand_over(top_fd, uid, skip_key)
        os.fchown(top_fd, uid, uid)
    finally:
        os.close(top_fd)


def _hand_over(dir_fd: int, uid: int, skip: tuple[int, int] | None) -> None:
    for entry in os.scandir(dir_fd):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) == skip:
            continue
        if stat.S_ISDIR(info.st_mode):
            try:
                inner = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # gone, or swapped for a link since the scan
            try:
                found = os.fstat(inner)
                if (found.st_dev, found.st_ino) == (info.st_dev, info.st_ino):
                    _hand_over(inner, uid, skip)
                    os.fchown(inner, uid, uid)
            finally:
                os.close(inner)
        else:
            try:
                os.chown(entry.name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue


def take_back(path: Path, mode: int = 0o755) -> None:
    """A directory of the tree back to root (not its contents), so the sandbox's user
    cannot add to it while the agent works in it. (Unconfined, as another user, the
    job was never anyone else.)"""
    if os.geteuid() != 0:
        return
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
