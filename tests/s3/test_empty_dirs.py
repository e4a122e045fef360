"""Only empty directories of a bucket are removed, by descriptor, never through a link."""

from __future__ import annotations

import os
from pathlib import Path

from dockyard.s3.empty_dirs import remove_empty_directories


def test_empty_directories_go_deepest_first_and_nothing_else(tmp_path: Path) -> None:
    store = tmp_path / "s3"
    bucket = store / "data"
    (bucket / "a" / "b" / "c").mkdir(parents=True)
    (bucket / "kept" / "empty").mkdir(parents=True)
    (bucket / "kept" / "object.txt").write_text("x")
    assert remove_empty_directories(store, "data") == 4  # c, b, a, kept/empty
    assert sorted(str(p.relative_to(bucket)) for p in bucket.rglob("*")) == [
        "kept",
        "kept/object.txt",
    ]
    assert bucket.is_dir()  # the bucket's own directory is the gateway's to remove


def test_a_link_is_never_followed_nor_removed(tmp_path: Path) -> None:
    store = tmp_path / "s3"
    bucket = store / "data"
    bucket.mkdir(parents=True)
    outside = tmp_path / "outside" / "empty"
    outside.mkdir(parents=True)
    os.symlink(outside.parent, bucket / "link")
    assert remove_empty_directories(store, "data") == 0
    assert outside.is_dir() and (bucket / "link").is_symlink()
    # A bucket that is itself a link is not walked at all.
    os.symlink(tmp_path / "outside", store / "linked")
    assert remove_empty_directories(store, "linked") == 0
    assert outside.is_dir()
    for name in ("", ".", "..", "a/b", "missing"):
        assert remove_empty_directories(store, name) == 0
