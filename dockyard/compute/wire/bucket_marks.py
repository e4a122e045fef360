"""Who owns each bucket directory of the embedded store, where an instance agent can read it.

The database says which account owns a bucket (`services.buckets`), and the S3 front
door checks it for every request. Instance agents move a job's data with no database
and no server (they outlive restarts): they read and write the store's directories
themselves (`compute.s3.LocalS3`). So the server leaves a mark beside the store for
each bucket it knows the owner of - `<data-dir>/bucket-owners/<bucket>`, naming the
account and the bucket directory's device and inode - and an agent uses a bucket only
if the directory it opened is the one marked, for the job's own account. A bucket
without a mark (being created, being deleted, made by hand and not seen by the server
yet) is nobody's to an agent; a bucket deleted and made again by another account is a
new directory, so an old mark does not match it.

A mark is removed before its bucket is deleted and written after its owner is recorded,
so it never says more than the database does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OWNERS_DIR = "bucket-owners"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def owners_dir(store_root: Path) -> Path:
    """The marks of the store at `store_root` (`<data-dir>/s3`): beside it, never in it
    (the gateway serves every file under the store)."""
    return Path(store_root).parent / OWNERS_DIR


def _valid(bucket: str) -> bool:
    return bool(bucket) and bucket not in (".", "..") and "/" not in bucket and "\0" not in bucket


def mark(store_root: Path, bucket: str, account_id: str) -> None:
    """Record `account_id` as the owner of the bucket directory there now (no-op if the
    bucket has no directory)."""
    if not _valid(bucket):
        return
    try:
        info = os.stat(Path(store_root) / bucket, follow_symlinks=False)
    except OSError:
        return
    directory = owners_dir(store_root)
    directory.mkdir(mode=0o700, exist_ok=True)
    text = json.dumps({"account": account_id, "device": info.st_dev, "inode": info.st_ino})
    path = directory / bucket
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    partial = directory / f".{bucket}.partial"
    partial.write_text(text)
    os.replace(partial, path)


def unmark(store_root: Path, bucket: str) -> None:
    if _valid(bucket):
        (owners_dir(store_root) / bucket).unlink(missing_ok=True)


def marked_owner(owners: Path, bucket: str, directory_fd: int) -> str | None:
    """The account marked as owning the bucket whose directory `directory_fd` is; None
    when there is no mark, or it is of another directory."""
    if not _valid(bucket):
        return None
    try:
        data = json.loads((owners / bucket).read_text())
        found = os.fstat(directory_fd)
        if (data["device"], data["inode"]) != (found.st_dev, found.st_ino):
            return None
        account = data["account"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return account if isinstance(account, str) else None
