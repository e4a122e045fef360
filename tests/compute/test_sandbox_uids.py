"""The host's registry of sandbox users (`sandbox.uids`): unique across data dirs, kept
across restarts, a gone data dir's uid reused only once nothing runs as it."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from dockyard.compute.sandbox.uids import BASE, SandboxUids, users_running


@pytest.fixture
def registry(tmp_path: Path) -> SandboxUids:
    return SandboxUids(tmp_path / "registry")


def _data_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def test_two_data_dirs_never_share_a_uid(tmp_path: Path, registry: SandboxUids) -> None:
    one, two = _data_dir(tmp_path, "one"), _data_dir(tmp_path, "two")
    uids = [registry.uid(d, account) for d in (one, two) for account in ("111", "222")]
    assert len(set(uids)) == 4 and all(uid >= BASE for uid in uids)
    # Kept: a restart (a new registry object on the same directory) answers the same.
    again = SandboxUids(registry.path)
    assert [again.uid(d, account) for d in (one, two) for account in ("111", "222")] == uids
    # The same data dir by another path is the same data dir.
    (tmp_path / "link").symlink_to(one)
    assert registry.uid(tmp_path / "link", "111") == uids[0]
    assert oct(os.stat(registry.path).st_mode & 0o777) == "0o700"


def test_many_servers_at_once_get_different_uids(tmp_path: Path, registry: SandboxUids) -> None:
    dirs = [_data_dir(tmp_path, f"d{i}") for i in range(8)]
    got: list[int] = []
    lock = threading.Lock()

    def allocate(data_dir: Path) -> None:
        uid = SandboxUids(registry.path).uid(data_dir, "111")
        with lock:
            got.append(uid)

    threads = [threading.Thread(target=allocate, args=(d,)) for d in dirs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(got)) == len(dirs)


def test_a_gone_data_dirs_uid_is_reused_once_nothing_runs_as_it(
    tmp_path: Path, registry: SandboxUids
) -> None:
    first = _data_dir(tmp_path, "first")
    uid = registry.uid(first, "111")
    survivor = subprocess.Popen(["sleep", "300"], user=uid, group=uid)
    try:
        shutil.rmtree(first)
        assert uid in users_running()
        # Its data dir is gone, but a process of it still runs: not given out.
        second = registry.uid(_data_dir(tmp_path, "second"), "111")
        assert second != uid
    finally:
        survivor.kill()
        survivor.wait()
    third = registry.uid(_data_dir(tmp_path, "third"), "111")
    assert third == uid  # nothing runs as it now: reused (hundreds of test data dirs)
    assert len(registry.entries()) == 2


def test_a_new_data_dir_at_a_deleted_ones_path_is_another(
    tmp_path: Path, registry: SandboxUids
) -> None:
    path = _data_dir(tmp_path, "data")
    uid = registry.uid(path, "111")
    survivor = subprocess.Popen(["sleep", "300"], user=uid, group=uid)
    try:
        shutil.rmtree(path)
        path.mkdir()
        assert registry.uid(path, "111") != uid
    finally:
        survivor.kill()
        survivor.wait()


def test_a_data_dirs_older_uids_are_kept_where_no_one_else_has_them(
    tmp_path: Path, registry: SandboxUids
) -> None:
    """Before the registry each data dir numbered its users from BASE: the first to
    register keeps its uid (its warm pools' sandboxes run on as it), the next moves."""
    one, two = _data_dir(tmp_path, "one"), _data_dir(tmp_path, "two")
    for data_dir in (one, two):
        (data_dir / "sandbox" / "uids").mkdir(parents=True)
        (data_dir / "sandbox" / "uids" / "111").write_text(str(BASE + 5))
    assert registry.uid(one, "111", one / "sandbox/uids/111") == BASE + 5
    moved = registry.uid(two, "111", two / "sandbox/uids/111")
    assert moved != BASE + 5
    assert (two / "sandbox/uids/111").read_text() == str(moved)  # the file follows
    assert registry.uid(two, "111", two / "sandbox/uids/111") == moved
