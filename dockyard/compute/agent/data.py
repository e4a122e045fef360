"""Moving a job's files between S3 and its instance: channels, code, checkpoints, results.

SageMaker's File input mode copies every channel to local disk before the job starts and
uploads the model and output after it ends; this module does the same against an
`S3Store`. Problems with the job's own S3 locations are the customer's to fix, so they
surface as `ClientError: ...` reasons (the form SageMaker's FailureReason takes), never
as agent crashes.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dockyard.compute.agent.env import script_name
from dockyard.compute.agent.files import (
    UnsafeArchive,
    entries,
    extract_tar,
    new_file,
    open_regular,
    regular_files,
)
from dockyard.compute.agent.s3 import S3Error, S3Store, parse_s3_uri
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec


class ClientError(Exception):
    """A problem with the job's inputs or outputs; str() is the job's FailureReason."""

    def __init__(self, message: str) -> None:
        super().__init__(f"ClientError: {message}")
        self.message = message

    def __reduce__(self) -> tuple[type[ClientError], tuple[str]]:
        # Raised in the agent's charged child and carried back pickled (agent_charged).
        return (ClientError, (self.message,))


# Called between objects so that a Stop during a long download takes effect promptly.
CheckStop = Callable[[], None]


def _safe_relative(relative: str, uri: str) -> list[str]:
    parts = [p for p in relative.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts) or relative.startswith("/"):
        raise ClientError(f'The S3 object "{uri}" cannot be placed in the container')
    return parts


def _channel_objects(
    spec: JobSpec, store: S3Store, channel: dict[str, Any]
) -> list[tuple[str, str]]:
    """(object URI, path relative to the channel directory) for every object to stage."""
    name = channel.get("ChannelName", "?")
    source = channel.get("DataSource", {}).get("S3DataSource")
    if not isinstance(source, dict):
        raise ClientError(f'Channel "{name}" has no S3DataSource; only S3 channels are supported')
    uri = str(source.get("S3Uri", ""))
    kind = source.get("S3DataType", "S3Prefix")
    pairs: list[tuple[str, str]] = []
    if kind == "S3Prefix":
        _, prefix = parse_s3_uri(uri)
        for object_uri in store.list(uri):
            key = parse_s3_uri(object_uri)[1]
            if key.endswith("/"):
                continue  # a "folder" marker some tools create, not data
            # Paths are kept relative to the prefix; a prefix naming one object stages it
            # under its own name.
            relative = key[len(prefix) :].lstrip("/") or posixpath.basename(key)
            pairs.append((object_uri, relative))
        if not pairs:
            raise ClientError(
                f'No S3 objects found under S3 URL "{uri}" given in input data source. '
                "Please ensure that the bucket exists and that objects exist under that "
                "S3 prefix."
            )
    elif kind == "ManifestFile":
        try:
            manifest = json.loads(store.read_bytes(uri))
            base = str(manifest[0]["prefix"])
            relatives = [str(r) for r in manifest[1:]]
        except S3Error:
            raise
        except (ValueError, LookupError, TypeError) as exc:
            raise ClientError(
                f'The manifest file "{uri}" is not a JSON list beginning with {{"prefix": ...}}'
            ) from exc
        if not relatives:
            raise ClientError(f'The manifest file "{uri}" lists no objects')
        base = base if base.endswith("/") else base + "/"
        pairs = [(base + r.lstrip("/"), r.lstrip("/")) for r in relatives]
    elif kind == "AugmentedManifestFile":
        raise ClientError(
            f'Channel "{name}": AugmentedManifestFile is not supported by this backend '
            "(it needs Pipe mode)"
        )
    else:
        raise ClientError(f'Channel "{name}": unknown S3DataType "{kind}"')
    if source.get("S3DataDistributionType") == "ShardedByS3Key":
        # Each host takes every len(hosts)-th object of the sorted list, so the hosts
        # together see every object exactly once.
        pairs = sorted(pairs)[spec.rank :: len(spec.hosts)]
    return pairs


def _download_all(
    store: S3Store,
    pairs: list[tuple[str, str]],
    base: Path,
    target: Path,
    check_stop: CheckStop,
) -> None:
    for uri, relative in pairs:
        check_stop()
        _download(store, uri, base, target.joinpath(*_safe_relative(relative, uri)))


def _download(store: S3Store, uri: str, base: Path, path: Path) -> None:
    """One object into the tree as root, by descriptor: never through a link, never into
    a directory the job's user owns (`new_file`)."""
    try:
        fd = new_file(base, path)
    except OSError as exc:
        raise ClientError(f'The S3 object "{uri}" cannot be placed at {path}: {exc}') from exc
    try:
        # The file this descriptor is, whatever its name leads to now.
        store.download(uri, Path(f"/proc/self/fd/{fd}"))
    finally:
        os.close(fd)


def stage_inputs(spec: JobSpec, layout: Layout, store: S3Store, check_stop: CheckStop) -> None:
    """Channels, checkpoints and script-mode code, before the job starts."""
    try:
        for channel in spec.input_data_config:
            directory = layout.data_dir / str(channel["ChannelName"])
            directory.mkdir(parents=True, exist_ok=True)
            objects = _channel_objects(spec, store, channel)
            _download_all(store, objects, layout.opt_ml, directory, check_stop)
        if spec.checkpoint_s3_uri:
            prefix = spec.checkpoint_s3_uri.rstrip("/") + "/"
            _, prefix_key = parse_s3_uri(prefix)
            pairs = [
                (uri, parse_s3_uri(uri)[1][len(prefix_key) :])
                for uri in store.list(prefix)
                if not uri.endswith("/")
            ]
            _download_all(store, pairs, layout.opt_ml, layout.checkpoint_dir(spec), check_stop)
        submit = script_name(spec.submit_directory)
        if submit and not spec.entrypoint:
            _stage_code(spec, submit, layout, store)
    except S3Error as exc:
        raise ClientError(exc.message) from exc


def volume_bytes(spec: JobSpec) -> int:
    """ResourceConfig.VolumeSizeInGB: what the instance's storage holds."""
    try:
        size = int(spec.resource_config.get("VolumeSizeInGB") or 0)
    except (TypeError, ValueError):
        size = 0
    return max(size, 1) * 1024**3


def _stage_code(spec: JobSpec, submit: str, layout: Layout, store: S3Store) -> None:
    # Only from S3, as SageMaker takes it: a file:// archive would be any file of this
    # host the agent (root) can read.
    if not submit.startswith("s3://"):
        raise ClientError(
            f'sagemaker_submit_directory "{submit}" must be an s3:// URI of a tar.gz archive'
        )
    archive = layout.root / "tmp" / "sourcedir.tar.gz"
    _download(store, submit, layout.root, archive)
    layout.code_dir.mkdir(parents=True, exist_ok=True)
    try:
        # By descriptor, never through a link of its own (tarfile's "data" filter
        # resolves paths to check them, and chains of links fool it).
        extract_tar(archive, layout.code_dir, volume_bytes(spec))
    except (tarfile.TarError, OSError, UnsafeArchive) as exc:
        raise ClientError(f'Could not unpack the source archive "{submit}": {exc}') from exc


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The files are the sandbox user's; the archive says root, as a container's would.
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _pack(base: Path, directory: Path, archive: Path) -> None:
    """Directory's entries into a tar.gz: files and directories, links as links (never
    what they point at), nothing else (a FIFO or socket the job left)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for entry in entries(base, directory):
            mode = entry.info.st_mode
            if stat.S_ISREG(mode):
                fd = open_regular(entry)
                if fd is None:
                    continue
                with os.fdopen(fd, "rb") as handle:
                    info = tar.gettarinfo(arcname=entry.relative, fileobj=handle)
                    tar.addfile(_as_root(info), handle)
            elif stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                info = tarfile.TarInfo(entry.relative)
                info.mtime = int(entry.info.st_mtime)
                info.mode = stat.S_IMODE(mode)
                if stat.S_ISDIR(mode):
                    info.type = tarfile.DIRTYPE
                else:
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
                tar.addfile(_as_root(info))


def artifact_uri(spec: JobSpec, name: str) -> str:
    """Where SageMaker puts a job's `model.tar.gz` / `output.tar.gz`."""
    return f"{str(spec.output_path).rstrip('/')}/{spec.job_name}/output/{name}"


def _gib(size: int) -> str:
    return f"{size / 1024**3:.2f} GiB"


# What an entry costs the file system beyond its data: its inode and directory entry.
ENTRY_BYTES = 256


def written_bytes(base: Path, directories: list[Path], *, apparent: bool = False) -> int:
    """What is under `directories`. `apparent`: the sizes its regular files claim (a
    sparse file counts all it claims to hold: what packing it would make of it). Else
    what it takes from the disk: every entry - files, directories, links, FIFOs - by
    the larger of its size and the blocks it uses, and an inode's worth each (a
    million empty files or links with long targets fill a disk too)."""
    total = 0
    for directory in directories:
        for entry in entries(base, directory):
            info = entry.info
            if apparent:
                total += info.st_size if stat.S_ISREG(info.st_mode) else 0
            else:
                total += max(info.st_size, info.st_blocks * 512) + ENTRY_BYTES
    return total


def upload_outputs(spec: JobSpec, layout: Layout, store: S3Store) -> None:
    """The model and output (first host only) and this host's checkpoints."""
    # Packed and copied, a sparse file becomes what it claims to hold: what is uploaded
    # is held to the instance's volume by the sizes its files claim.
    try:
        outputs = [layout.checkpoint_dir(spec)] if spec.checkpoint_s3_uri else []
        if spec.is_leader and spec.output_path:
            outputs += [layout.model_dir, layout.output_data_dir]
        size = written_bytes(layout.opt_ml, outputs, apparent=True)
        if size > volume_bytes(spec):
            raise ClientError(
                f"The job's model, output and checkpoints hold {_gib(size)}, more than its "
                f"volume (ResourceConfig.VolumeSizeInGB, {_gib(volume_bytes(spec))}): "
                "nothing was uploaded"
            )
        if spec.is_leader and spec.output_path:
            staging = layout.root / "tmp"
            for directory, name in (
                (layout.model_dir, "model.tar.gz"),
                (layout.output_data_dir, "output.tar.gz"),
            ):
                archive = staging / name
                _pack(layout.opt_ml, directory, archive)
                store.upload(archive, artifact_uri(spec, name))
                archive.unlink()
        if spec.checkpoint_s3_uri:
            base = spec.checkpoint_s3_uri.rstrip("/")
            checkpoints = layout.checkpoint_dir(spec)
            for entry in regular_files(layout.opt_ml, checkpoints):
                fd = open_regular(entry)
                if fd is None:
                    continue
                try:
                    # The file this descriptor is, whatever its name leads to now.
                    store.upload(Path(f"/proc/self/fd/{fd}"), f"{base}/{entry.relative}")
                finally:
                    os.close(fd)
    except S3Error as exc:
        raise ClientError(exc.message) from exc
    except (OSError, ValueError) as exc:
        raise ClientError(f"Could not package the job's outputs: {exc}") from exc


def clean_tmp(layout: Layout) -> None:
    shutil.rmtree(layout.root / "tmp", ignore_errors=True)
