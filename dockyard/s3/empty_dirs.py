"""Empty directories a bucket of the embedded store holds, removed before it is deleted.

An object here is a file, so a key with slashes is a file in directories. The gateway
makes them as an object's upload starts and leaves them behind when it ends without an
object - a multipart upload aborted, a PUT that failed - so a bucket that lists no
objects still holds directories, and the gateway answers DeleteBucket with
BucketNotEmpty. S3 has no directories: a bucket without objects is empty. The front door
removes the bucket's empty directories, deepest first, just before it forwards a
DeleteBucket.

It works by descriptor from the bucket's directory down (`os.fwalk`, never following a
link: an agent writes into buckets as root) and only ever calls rmdir, which the kernel
refuses for a directory that is not empty: nothing but an empty directory is removed,
whatever was written meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_empty_directories(store_root: Path, bucket: str) -> int:
    """Remove every empty directory under the bucket's (not the bucket's own); answer how
    many went."""
    if not bucket or bucket in (".", "..") or "/" in bucket or "\0" in bucket:
        return 0
    try:
        top = os.open(Path(store_root) / bucket, _DIR_FLAGS)
    except OSError:
        return 0
    removed = 0
    try:
        # Bottom up: a directory is looked at after everything in it was.
        for _, directories, _, directory_fd in os.fwalk(
            ".", topdown=False, follow_symlinks=False, dir_fd=top
        ):
            for name in directories:
                try:
                    os.rmdir(name, dir_fd=directory_fd)  # a link is not a directory to it
                except OSError:
                    continue  # not empty, a link, or gone already: left as it is
                removed += 1
    finally:
        os.close(top)
    return removed
