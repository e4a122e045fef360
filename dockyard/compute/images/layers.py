"""Applying an image's layers, each one hostile, to a root directory on the host.

A layer is a tar archive anyone can push: it may name `../../etc/cron.d/x` or
`/etc/passwd`, plant a link `a -> /etc` and then write `a/passwd`, carry a device node
(`/dev/sda`, mode 666), a FIFO that hangs a reader, a set-uid shell, a hard link to a
host file, or file capabilities in a PAX header. The host unpacks it (as root, on most
hosts), so nothing in it may act outside the root or grant anything inside it:

- every member is placed by descriptor: its parents are opened one component at a
  time with `O_NOFOLLOW`, so a link - wherever it points, whichever layer left it - is
  never written or walked through; a member under a link is refused, as are `..` and
  absolute names (the layer is refused, not silently rewritten: a pull fails loudly);
- a link itself is created as the link it says (its target only means something inside
  the job's own mount namespace, where this root is `/`);
- hard links only to an entry already inside the root, found the same way;
- device nodes, FIFOs and anything else not a file, directory or link are skipped and
  counted (a job's `/dev` is the sandbox's, never the image's);
- modes keep their permission bits less write for group and others, never set-uid,
  set-gid or sticky; no xattrs are applied (so no `security.capability` either); every
  entry is the unpacking user's (nothing is chowned);
- OCI whiteouts: `.wh.<name>` removes `<name>` and `.wh..wh..opq` empties its directory,
  of what the lower layers left only, as the image spec says;
- gzip layers are decompressed by the standard library, plain tar read as is; zstd
  (no codec in Python 3.11's standard library) is refused by its magic number with an
  error saying so; each layer's uncompressed digest can be checked against the image
  config's `diff_ids` as it streams.

Why not `umoci unpack --rootless`, the well-kept tool? Tried on real hostile layers
(umoci 0.4.7, Debian's): it keeps paths inside the root by rewriting them (`../escape`
and `/abs` land at the root, `a/passwd` under `a -> /tmp/x` lands at `rootfs/tmp/x/passwd`)
and refuses a hard link out, which is safe; but it writes a device node as an empty,
world-writable (0666) file, creates FIFOs, and keeps set-uid bits (`-rwsr-xr-x`, as
root). Making that safe would take a second, descriptor-based pass over the whole tree
that enforces every rule above anyway - and between the two passes the tree holds a
set-uid root file. So the rules live here, in one pass, by descriptor, as the agent's
`extract_tar` does for a tenant's archive; umoci stays useful to tests, to build images.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from dockyard.compute.descriptors import DIR_FLAGS, make_dirs, open_dirs, path_parts

_DIR_FLAGS = DIR_FLAGS
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Permission bits a file keeps: none of set-uid, set-gid, sticky, or write for others.
_MODE_MASK = 0o755
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_CHUNK = 1024 * 1024


class UnsafeLayer(Exception):
    """A layer that would act outside its root (or is not a layer we can read): the
    image is refused."""


class UnsupportedLayer(UnsafeLayer):
    """A layer compressed in a way the standard library cannot read (zstd)."""


@dataclass
class UnpackReport:
    """What unpacking neutralised rather than refused, so a caller can log it."""

    files: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # kind -> count
    stripped_modes: int = 0  # members that lost set-uid, set-gid or sticky

    def skip(self, kind: str) -> None:
        self.skipped[kind] = self.skipped.get(kind, 0) + 1


def unpack_layers(
    layers: Sequence[Path],
    root: Path,
    diff_ids: Sequence[str] | None = None,
    limit_bytes: int | None = None,
) -> UnpackReport:
    """Apply `layers` (lowest first) to the directory `root`, which the caller owns and
    nothing else changes meanwhile. `diff_ids`, if given, are the config's digests of
    each uncompressed layer, checked as it streams. UnsafeLayer on any refusal (the root
    is then half-built: throw it away)."""
    if diff_ids is not None and len(diff_ids) != len(layers):
        raise UnsafeLayer(f"{len(layers)} layers but {len(diff_ids)} diff_ids in the config")
    report = UnpackReport()
    top = os.open(root, _DIR_FLAGS)
    try:
        for index, layer in enumerate(layers):
            expected = diff_ids[index] if diff_ids is not None else None
            _unpack_one(layer, top, report, expected, limit_bytes)
    finally:
        os.close(top)
    return report


def unpack_layer(layer: Path, root: Path) -> UnpackReport:
    return unpack_layers([layer], root)


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class _Hashing:
    """A read-only stream that hashes what passes through it (the uncompressed layer,
    for its diff_id)."""

    def __init__(self, inner: _Readable) -> None:
        self.inner = inner
        self.digest = hashlib.sha256()
        self.ended = False

    def read(self, size: int = -1) -> bytes:
        data = self.inner.read(size)
        self.digest.update(data)
        self.ended = self.ended or (size != 0 and not data)
        return data

    def drain(self) -> None:
        # tar stops at its end-of-archive blocks; the digest covers the padding after.
        while self.read(_CHUNK):
            pass


def _open_layer(raw: IO[bytes], name: str) -> _Readable:
    magic = raw.read(4)
    raw.seek(0)
    if magic.startswith(_ZSTD_MAGIC):
        raise UnsupportedLayer(
            f"layer {name} is zstd-compressed, which Python 3.11's standard library cannot "
            "read; push the image with gzip layers (e.g. `skopeo copy --dest-compress-format "
            "gzip`)"
        )
    if magic.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


def _unpack_one(
    layer: Path, top: int, report: UnpackReport, diff_id: str | None, limit: int | None
) -> None:
    # What this layer made itself: whiteouts and opaque markers hide the lower layers'
    # entries only, never a sibling of the same layer (image spec, "Whiteouts").
    ours: set[tuple[str, ...]] = set()
    with open(layer, "rb") as raw:
        stream = _Hashing(_open_layer(raw, layer.name))
        try:
            tar = tarfile.open(fileobj=stream, mode="r|")  # type: ignore[call-overload]
            with tar:
                while (member := _next(tar, stream)) is not None:
                    _apply(tar, member, top, report, ours, limit)
            stream.drain()
        except (tarfile.TarError, EOFError, gzip.BadGzipFile) as exc:
            raise UnsafeLayer(f"layer {layer.name} is not a readable tar archive: {exc}") from exc
    if diff_id is not None and f"sha256:{stream.digest.hexdigest()}" != diff_id:
        raise UnsafeLayer(f"layer {layer.name} does not match its diff_id {diff_id}")


def _next(tar: tarfile.TarFile, stream: _Hashing) -> tarfile.TarInfo | None:
    try:
        return tar.next()
    except tarfile.ReadError:
        # Some writers (umoci 0.4) leave out the last member's padding and the
        # end-of-archive blocks: the whole blob has been read, so the archive is over (its
        # digest covers exactly these bytes). A member cut short still fails as it is read.
        if stream.ended:
            return None
        raise


def member_parts(name: str) -> list[str]:
    """A member's path as components, refusing what would lead out of the root."""
    return path_parts(name, UnsafeLayer)


def _apply(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    top: int,
    report: UnpackReport,
    ours: set[tuple[str, ...]],
    limit: int | None,
) -> None:
    parts = member_parts(member.name)
    if not parts:
        return  # the layer's own top directory ("./"): the root stays as the cache made it
    name = parts[-1]
    if name.startswith(_WHITEOUT):
        _whiteout(top, parts, ours)
        return
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        # Character and block devices, FIFOs, anything newer: never on the host.
        report.skip(_kind(member))
        return
    if member.mode & ~0o777 & 0o7777:
        report.stripped_modes += 1
    parent = _make_dirs(top, parts[:-1], member.name)
    try:
        if member.isdir():
            _directory(parent, name, member)
        else:
            _remove(parent, name)
            if member.isreg():
                report.files += 1
                report.bytes += member.size
                if limit is not None and report.bytes > limit:
                    raise UnsafeLayer(f"the image unpacks to more than {limit} bytes")
                _write(tar, member, parent, name)
            elif member.issym():
                os.symlink(member.linkname, name, dir_fd=parent)
            else:
                _hard_link(top, member, parent, name)
        ours.add(tuple(parts))
    finally:
        os.close(parent)


def _kind(member: tarfile.TarInfo) -> str:
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "fifo"
    return "other"


def _make_dirs(top: int, parts: list[str], member: str) -> int:
    """A descriptor of the member's parent, made as needed, never through a link."""
    try:
        return make_dirs(top, parts)
    except OSError as exc:
        # A link (ELOOP) or a file (ENOTDIR) where a directory should be is never
        # followed: layers built by diffing a real tree never put a member under one.
        raise UnsafeLayer(f"{member!r} would be written through a link or a file") from exc


def _open_existing(top: int, parts: list[str]) -> int | None:
    """A descriptor of an existing directory, or None if it is missing or not a real
    directory all the way down (then there is nothing a whiteout could hide in it)."""
    try:
        return open_dirs(top, parts)
    except OSError:
        return None


def _directory(parent: int, name: str, member: tarfile.TarInfo) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        _remove(parent, name)  # a directory replacing a lower layer's file or link
        info = None
    if info is None:
        os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        # The owner keeps write while later layers apply; the cache seals it after.
        os.fchmod(fd, (member.mode & _MODE_MASK) | 0o700)
    finally:
        os.close(fd)


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, parent: int, name: str) -> None:
    source = tar.extractfile(member)
    mode = (member.mode & _MODE_MASK) | 0o600
    fd = os.open(name, _NEW_FILE, 0o600, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        if source is not None:
            while chunk := source.read(_CHUNK):
                out.write(chunk)
        os.fchmod(out.fileno(), mode)
        mtime = int(member.mtime)
        os.utime(out.fileno(), (mtime, mtime))


def _hard_link(top: int, member: tarfile.TarInfo, parent: int, name: str) -> None:
    target = member_parts(member.linkname)
    source = _open_existing(top, target[:-1]) if target else None
    if source is None:
        raise UnsafeLayer(f"{member.name!r} links to {member.linkname!r}, not inside the root")
    try:
        try:
            found = os.stat(target[-1], dir_fd=source, follow_symlinks=False)
        except OSError:
            found = None
        # Only to a file the root already holds (a link to a link would be a link here,
        # harmless, but no layer builder makes one).
        if found is None or not stat.S_ISREG(found.st_mode):
            raise UnsafeLayer(f"{member.name!r} links to {member.linkname!r}, not a file here")
        os.link(target[-1], name, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
    finally:
        os.close(source)


def _whiteout(top: int, parts: list[str], ours: set[tuple[str, ...]]) -> None:
    name = parts[-1]
    directory = _open_existing(top, parts[:-1])
    if directory is None:
        return
    try:
        if name == _OPAQUE:
            for entry in os.listdir(directory):
                if (*parts[:-1], entry) not in ours:
                    _remove(directory, entry)
        elif name.startswith(_WHITEOUT + _WHITEOUT):
            return  # another of aufs's own markers (.wh..wh.plnk ...): not content
        else:
            hidden = name[len(_WHITEOUT) :]
            if hidden and (*parts[:-1], hidden) not in ours:
                _remove(directory, hidden)
    finally:
        os.close(directory)


def _remove(parent: int, name: str) -> None:
    """Remove `name` in `parent` whatever it is, a directory with all it holds, by
    descriptor and never through a link."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        os.fchmod(fd, 0o700)  # a sealed or 0555 directory can still be emptied
        for entry in os.listdir(fd):
            _remove(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def remove_tree(path: Path) -> None:
    """Remove a directory tree the cache sealed read-only, by descriptor."""
    try:
        parent = os.open(path.parent, _DIR_FLAGS)
    except FileNotFoundError:
        return
    try:
        _remove(parent, path.name)
    finally:
        os.close(parent)


def seal(root: Path) -> int:
    """Make every directory and file under `root` (and `root`) unwritable by anyone,
    by descriptor; returns the bytes the tree takes on disk (for the cache's cap)."""
    top = os.open(root, _DIR_FLAGS)
    try:
        return _seal(top)
    finally:
        os.close(top)


def _seal(dir_fd: int) -> int:
    used = 0
    for entry in os.scandir(dir_fd):
        info = entry.stat(follow_symlinks=False)
        used += info.st_blocks * 512
        if stat.S_ISDIR(info.st_mode):
            inner = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                used += _seal(inner)
            finally:
                os.close(inner)
        elif stat.S_ISREG(info.st_mode):
            fd = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o555)
            finally:
                os.close(fd)
        # Links have no mode of their own; nothing else is ever unpacked.
    info = os.fstat(dir_fd)
    os.fchmod(dir_fd, stat.S_IMODE(info.st_mode) & 0o555)
    return used + info.st_blocks * 512
