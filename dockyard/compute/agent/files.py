"""Touching a tree the job owned, as root, without being led out of it.

While a job runs its `/opt/ml` is its own: it may leave a symbolic link where its
model directory was (`/opt/ml/model -> /etc`), a link named `failure` pointing at a
key, a FIFO that never ends. And the job being over does not mean nobody can change
the tree any more: the job's other instances run on as the same user, and one of them
may hold a descriptor of this tree (handed over an abstract unix socket in their shared
network), ready to swap a directory for a link while the agent walks it. So:

- once the job's sandbox is gone the agent takes the whole tree back (`freeze`):
  every directory and file becomes root's and unwritable by anyone else, top down and
  by descriptor, each directory before what it holds is listed - from then on the
  sandbox's user, whatever descriptor it holds, can change nothing of the tree's shape;
- every read after that still goes by descriptor (`entries`, `open_regular`,
  `read_regular`: `O_NOFOLLOW`, one component at a time), walks never enter links,
  and a link is packed as a link, never read through;
- a tenant's archive is unpacked by descriptor too (`extract_tar`), never by
  tarfile's own extraction, whose checks resolve paths (and are known to be fooled by
  chains of links longer than the system resolves).

Before a job starts the agent lays its tree out as root, then hands it over
(`hand_over`): ownership moves to the sandbox's user children first and by descriptor,
so a process of that user racing the walk (a warm pool's parked interpreter) cannot
turn it onto a host file.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dockyard.compute.descriptors import DIR_FLAGS, make_dirs, open_dirs, path_parts

_DIR_FLAGS = DIR_FLAGS
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# A job may have given its own user rights through ACLs, which outlive a chown.
_ACLS = ("system.posix_acl_access", "system.posix_acl_default")


def _open_dir(base: Path, parts: list[str]) -> int:
    """A descriptor of base/parts..., refusing a link anywhere below `base`."""
    if any(part in ("", ".", "..") for part in parts):
        raise OSError(f"refusing the path components {parts!r}")
    top = os.open(base, _DIR_FLAGS)
    try:
        return open_dirs(top, parts)
    finally:
        os.close(top)


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


@dataclass(frozen=True)
class Entry:
    """One entry of a walk: its path relative to the walked directory, what it is (not
    followed), and the directory it is in, by descriptor (valid while the walk is at
    it)."""

    relative: str
    info: os.stat_result
    dir_fd: int
    name: str


def entries(base: Path, directory: Path) -> Iterator[Entry]:
    """Every entry under `directory` (a real directory all the way down from `base`),
    depth-first, by descriptor: links are reported, never followed or entered."""
    try:
        top = _open_dir(base, relative_parts(base, directory))
    except (OSError, ValueError):
        return
    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(
            ".", dir_fd=top, follow_symlinks=False
        ):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                yield Entry(posixpath.normpath(posixpath.join(dirpath, name)), info, dir_fd, name)
    finally:
        os.close(top)


def open_regular(entry: Entry) -> int | None:
    """A descriptor of the entry if it is (still) the regular file the walk saw."""
    try:
        fd = os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)
    except OSError:
        return None
    found = os.fstat(fd)
    if stat.S_ISREG(found.st_mode) and (found.st_dev, found.st_ino) == (
        entry.info.st_dev,
        entry.info.st_ino,
    ):
        return fd
    os.close(fd)
    return None


def regular_files(base: Path, directory: Path) -> Iterator[Entry]:
    for entry in entries(base, directory):
        if stat.S_ISREG(entry.info.st_mode):
            yield entry


def freeze(top: Path, skip: Path | None = None) -> None:
    """Take the whole tree back: every directory and file under `top` (but `skip`, left
    as it is) becomes root's, writable by root alone, with no ACL giving anyone more.

    Top down and by descriptor: a directory is taken before it is listed, so what the
    listing says stays true (its user can no longer add, remove or rename anything in
    it), and each subdirectory is entered only if it is the directory the listing saw.
    (Run while no process of the tree's own sandbox is left; another sandbox of the
    same user may still be running.)
    """
    if os.geteuid() != 0 or not is_real_dir(top):
        return
    skip_key = _key(skip)
    try:
        top_fd = os.open(top, _DIR_FLAGS)
    except OSError:
        return
    try:
        _freeze(top_fd, skip_key)
    finally:
        os.close(top_fd)


def _key(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _take(fd: int, mode: int) -> None:
    os.fchown(fd, 0, 0)
    os.fchmod(fd, mode)
    for name in _ACLS:
        try:
            os.removexattr(fd, name)
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise


def _freeze(dir_fd: int, skip: tuple[int, int] | None) -> None:
    info = os.fstat(dir_fd)
    _take(dir_fd, (stat.S_IMODE(info.st_mode) & 0o755) | 0o700)
    for entry in os.scandir(dir_fd):
        try:
            found = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == skip:
            continue
        if stat.S_ISDIR(found.st_mode):
            try:
                inner = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                seen = os.fstat(inner)
                if (seen.st_dev, seen.st_ino) == (found.st_dev, found.st_ino):
                    _freeze(inner, skip)
            finally:
                os.close(inner)
        elif stat.S_ISREG(found.st_mode):
            # The directory is root's now: the name still is the file the listing saw.
            fd = os.open(entry.name, _FILE_FLAGS, dir_fd=dir_fd)
            try:
                _take(fd, stat.S_IMODE(found.st_mode) & 0o755)
            finally:
                os.close(fd)
        else:
            # A link, FIFO or socket: root's, as what it is (never opened).
            os.chown(entry.name, 0, 0, dir_fd=dir_fd, follow_symlinks=False)


def new_file(base: Path, path: Path) -> int:
    """A descriptor of a new, empty file at `path` (under `base`) for the agent to fill:
    its directories made or opened one component at a time without following a link,
    each of them root's (a directory the sandbox's user owns - a warm pool's cache -
    is refused: the user could turn anything in it onto a host file), and whatever was
    at its name replaced (never a directory). OSError otherwise."""
    parts = relative_parts(base, path)
    if not parts or any(part in ("", ".", "..") for part in parts):
        raise OSError(f"refusing the path {path}")
    fd = os.open(base, _DIR_FLAGS)
    try:
        _check_owner(fd, base)
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
            _check_owner(fd, path)
        try:
            os.unlink(parts[-1], dir_fd=fd)
        except FileNotFoundError:
            pass
        return os.open(
            parts[-1],
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=fd,
        )
    finally:
        os.close(fd)


def _check_owner(dir_fd: int, path: Path) -> None:
    if os.geteuid() == 0 and os.fstat(dir_fd).st_uid != 0:
        raise OSError(f"{path} is in a directory the job's user owns")


class UnsafeArchive(Exception):
    """A member of a tenant's archive that would land outside its directory, or is not
    a file, directory or link."""


def extract_tar(archive: Path, directory: Path, limit_bytes: int | None = None) -> None:
    """Unpack a tenant's tar archive into `directory` (a directory of root's, which
    nothing else can change while this runs) by descriptor.

    Each member's parent directories are opened one component at a time without
    following links, so a link in the archive - wherever it points - is created as a
    link and never written through; `..` and absolute names are refused, and so is
    anything but files, directories, symbolic links and hard links to earlier members.
    Modes lose set-uid, set-gid and sticky bits and write for group and others;
    ownership is the extracting user's. `limit_bytes` caps what the files add up to.
    """
    top = os.open(directory, _DIR_FLAGS)
    written = 0
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                parts = _member_parts(member.name)
                if not parts:
                    continue  # the archive's own top directory ("." or "./")
                parent = _make_dirs(top, parts[:-1], member.name)
                try:
                    name = parts[-1]
                    if member.isdir():
                        _mkdir(parent, name, member.name)
                        continue
                    _unlink(parent, name)
                    if member.isreg():
                        written += member.size
                        if limit_bytes is not None and written > limit_bytes:
                            raise UnsafeArchive(f"it unpacks to more than {limit_bytes} bytes")
                        _write_member(tar, member, parent, name)
                    elif member.issym():
                        os.symlink(member.linkname, name, dir_fd=parent)
                    elif member.islnk():
                        target = _member_parts(member.linkname)
                        if not target:
                            raise UnsafeArchive(f"{member.name!r} links to {member.linkname!r}")
                        source = _open_dir_fd(top, target[:-1], member.linkname)
                        try:
                            os.link(
                                target[-1],
                                name,
                                src_dir_fd=source,
                                dst_dir_fd=parent,
                                follow_symlinks=False,
                            )
                        finally:
                            os.close(source)
                    else:
                        raise UnsafeArchive(f"{member.name!r} is not a file, directory or link")
                finally:
                    os.close(parent)
    finally:
        os.close(top)


def _member_parts(name: str) -> list[str]:
    return path_parts(name, UnsafeArchive)


def _open_dir_fd(top: int, parts: list[str], member: str) -> int:
    try:
        return open_dirs(top, parts)
    except OSError as exc:
        raise UnsafeArchive(f"{member!r} is not inside a directory of the archive") from exc


def _make_dirs(top: int, parts: list[str], member: str) -> int:
    try:
        return make_dirs(top, parts)
    except OSError as exc:
        # A link where a directory should be (ELOOP, ENOTDIR) is never followed.
        raise UnsafeArchive(f"{member!r} would be written through a link") from exc


def _mkdir(dir_fd: int, name: str, member: str) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        if not stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            raise UnsafeArchive(f"{member!r} would be written through a link") from None


def _unlink(dir_fd: int, name: str) -> None:
    """A later member replaces an earlier one, as tar does (but never a directory)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError as exc:
        raise UnsafeArchive(f"{name!r} is a directory of the archive already") from exc


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dir_fd: int, name: str) -> None:
    source = tar.extractfile(member)
    mode = (member.mode & 0o755) | 0o600
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    with os.fdopen(fd, "wb") as out:
        if source is not None:
            while chunk := source.read(1024 * 1024):
                out.write(chunk)
        os.fchmod(out.fileno(), mode)


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
