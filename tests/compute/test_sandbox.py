"""The sandbox's parts, in process: reading a hostile tree, handing it over, the bwrap
command, the refusals, the sandbox users. The attacks themselves run from real jobs in
tests/e2e/test_sandbox.py."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from dockyard.compute.agent import confinement
from dockyard.compute.agent.confinement import Confinement, ConfinementError
from dockyard.compute.agent.env import make_dirs, reset_for_next_job
from dockyard.compute.agent.files import (
    UnsafeArchive,
    entries,
    extract_tar,
    freeze,
    hand_over,
    new_file,
    read_regular,
    regular_files,
)
from dockyard.compute.backends.local import SANDBOX_UID_BASE, LocalBackend
from dockyard.compute.sandbox.bwrap import Sandbox, SandboxError, interpreter_dirs
from dockyard.compute.sandbox.limits import Limits
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec

UID = 2_100_999_101


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "host" / "master.key"
    secret.parent.mkdir()
    secret.write_text("the host's secret")
    return secret


def test_read_regular_reads_files_only(tmp_path: Path, host_secret: Path) -> None:
    base = tmp_path / "opt-ml"
    (base / "output").mkdir(parents=True)
    (base / "output" / "failure").write_text("bad things")
    assert read_regular(base, base / "output" / "failure", 100) == b"bad things"
    assert read_regular(base, base / "output" / "failure", 3) == b"bad"
    (base / "output" / "failure").unlink()
    (base / "output" / "failure").symlink_to(host_secret)
    assert read_regular(base, base / "output" / "failure", 100) is None
    # A link on the way there is refused too.
    (base / "elsewhere").symlink_to(host_secret.parent)
    assert read_regular(base, base / "elsewhere" / "master.key", 100) is None
    # A FIFO would block a plain read forever.
    (base / "output" / "failure").unlink()
    os.mkfifo(base / "output" / "failure")
    done = threading.Event()

    def read() -> None:
        assert read_regular(base, base / "output" / "failure", 100) is None
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(10)
    assert read_regular(base, base / "missing", 10) is None


def test_walks_never_follow_links(tmp_path: Path, host_secret: Path) -> None:
    base = tmp_path / "opt-ml"
    model = base / "model"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "weights").write_text("w")
    (model / "key").symlink_to(host_secret)
    (model / "host").symlink_to(host_secret.parent)
    names = sorted(entry.relative for entry in entries(base, model))
    assert names == ["host", "key", "sub", "sub/weights"]
    assert [entry.relative for entry in regular_files(base, model)] == ["sub/weights"]
    # A directory swapped for a link is walked as nothing.
    (base / "checkpoints").symlink_to(host_secret.parent)
    assert list(entries(base, base / "checkpoints")) == []
    assert list(entries(base, base / "checkpoints" / "deeper")) == []


def test_freeze_takes_every_directory_and_file_back_but_never_a_links_target(
    tmp_path: Path, host_secret: Path
) -> None:
    tree = tmp_path / "opt-ml"
    (tree / "model" / "sub").mkdir(parents=True)
    (tree / "model" / "sub" / "w").write_text("w")
    (tree / "link").symlink_to(host_secret)
    cache = tree / "cache"
    cache.mkdir()
    hand_over(tree, UID)
    os.chmod(tree / "model", 0o777)
    os.chmod(tree / "model" / "sub" / "w", 0o4777)
    os.setxattr(tree / "model", "system.posix_acl_access", _acl_giving(UID))
    os.chown(host_secret, 0, 0)
    freeze(tree, skip=cache)
    for path in (tree, tree / "model", tree / "model" / "sub", tree / "model" / "sub" / "w"):
        info = os.lstat(path)
        assert info.st_uid == 0 and info.st_mode & 0o7022 == 0, path
    assert os.listxattr(tree / "model") == []
    assert os.lstat(tree / "link").st_uid == 0  # the link itself, not its target
    assert os.lstat(cache).st_uid == UID  # left as it was


def _acl_giving(uid: int) -> bytes:
    """A POSIX access ACL (its xattr form) granting `uid` rwx beside the mode's entries."""
    import struct

    entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, uid), (0x04, 5, 0xFFFFFFFF)]
    entries += [(0x10, 7, 0xFFFFFFFF), (0x20, 5, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def _tar(tmp_path: Path, members: list[tuple[str, bytes, str]]) -> Path:
    import io
    import tarfile

    path = tmp_path / "code.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data.encode()))
            else:
                info.linkname = data
                tar.addfile(info)
    return path


@pytest.mark.parametrize(
    "members",
    [
        [("a", b"2", "/etc"), ("a/passwd", b"0", "x")],  # a file written through a link
        [("../up", b"0", "x")],
        [("/abs", b"0", "x")],
        [("dev", b"3", "")],  # a character device
        [("fifo", b"6", "")],
        [("hard", b"1", "/etc/passwd")],  # a hard link out of the archive
    ],
)
def test_a_hostile_archive_is_refused_and_writes_nothing_outside(
    tmp_path: Path, members: list[tuple[str, bytes, str]]
) -> None:
    target = tmp_path / "code"
    target.mkdir()
    with pytest.raises(UnsafeArchive):
        extract_tar(_tar(tmp_path, members), target)
    assert not (tmp_path / "up").exists() and not Path("/abs").exists()


def test_an_archive_unpacks_files_dirs_and_links_as_they_are(tmp_path: Path) -> None:
    target = tmp_path / "code"
    target.mkdir()
    archive = _tar(
        tmp_path,
        [
            ("./", b"5", ""),
            ("pkg/", b"5", ""),
            ("pkg/m.py", b"0", "X = 1\n"),
            ("pkg/alias.py", b"2", "m.py"),
            ("again.py", b"1", "pkg/m.py"),
            ("pkg/m.py", b"0", "X = 2\n"),  # a later member replaces an earlier one
        ],
    )
    extract_tar(archive, target)
    assert (target / "pkg" / "m.py").read_text() == "X = 2\n"
    assert os.readlink(target / "pkg" / "alias.py") == "m.py"
    assert (target / "again.py").read_text() == "X = 1\n"  # linked before it was replaced
    with pytest.raises(UnsafeArchive):
        extract_tar(archive, target, limit_bytes=8)


def test_hand_over_changes_the_tree_and_never_a_links_target(
    tmp_path: Path, host_secret: Path
) -> None:
    tree = tmp_path / "opt-ml"
    (tree / "input" / "data").mkdir(parents=True)
    (tree / "input" / "data" / "x.csv").write_text("1")
    (tree / "link").symlink_to(host_secret)
    (tree / "dirlink").symlink_to(host_secret.parent)
    cache = tree / "cache"
    cache.mkdir()
    (cache / "theirs").write_text("already the user's")
    os.chown(cache / "theirs", 12345, 12345)
    hand_over(tree, UID, skip=cache)
    for path in (tree, tree / "input", tree / "input" / "data", tree / "input" / "data" / "x.csv"):
        assert os.lstat(path).st_uid == UID, path
    assert os.lstat(tree / "link").st_uid == UID  # the link itself
    assert os.stat(host_secret).st_uid == 0 and os.stat(host_secret.parent).st_uid == 0
    assert os.lstat(cache / "theirs").st_uid == 12345  # skipped


def test_emptying_a_tree_for_the_next_job_removes_links_as_links(
    tmp_path: Path, host_secret: Path
) -> None:
    layout = Layout(tmp_path / "instance")
    spec = JobSpec(job_name="j", keep_alive_seconds=60)
    make_dirs(layout, spec)
    (layout.warm_pool_cache / "kept").write_text("cache")
    # The last job swapped the cache's parent for a link to a host directory.
    sagemaker = layout.opt_ml / "sagemaker"
    (sagemaker / "warmpoolcache").rename(tmp_path / "cache-moved")
    sagemaker.rmdir()
    sagemaker.symlink_to(host_secret.parent)
    (layout.model_dir / "key").symlink_to(host_secret)
    reset_for_next_job(layout)
    assert host_secret.read_text() == "the host's secret"
    assert not sagemaker.exists() and not sagemaker.is_symlink()
    assert sorted(p.name for p in layout.opt_ml.iterdir()) == []


def test_checkpoints_stay_under_opt_ml(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.checkpoint_dir(JobSpec(job_name="j")) == tmp_path / "opt/ml/checkpoints"
    for bad in ("/opt/ml/../../etc", "/data", "/opt/ml", "relative/path"):
        with pytest.raises(ValueError, match="LocalPath"):
            layout.checkpoint_dir(JobSpec(job_name="j", checkpoint_local_path=bad))


def _sandbox(tmp_path: Path, **kw: object) -> Sandbox:
    root = tmp_path / "instances" / "key" / "algo-1"
    root.mkdir(parents=True)
    return Sandbox(root=root, uid=UID, hostname="algo-1", hosts=("algo-1",), private=root, **kw)  # type: ignore[arg-type]


def test_the_command_binds_the_tree_and_drops_to_the_sandbox_user(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    command = sandbox.command(["python3", "-c", "pass"], sys.executable)
    # Root's steps first (the job's OOM score, its cgroup), then bwrap.
    assert command[:2] == ["/bin/sh", "-c"] and "oom_score_adj" in command[2]
    command = command[4:]
    assert command[0].endswith("/bwrap") and "--unshare-pid" in command
    assert "--unshare-net" in command  # no shared namespace given: loopback only
    pairs = list(zip(command, command[1:], command[2:], strict=False))
    assert ("--bind", str(sandbox.root / "opt" / "ml"), "/opt/ml") in pairs
    for directory in interpreter_dirs(sys.executable):
        assert ("--ro-bind", directory, directory) in pairs
    tail = command[command.index("--", command.index("--cap-add")) :]
    assert tail[1].endswith("/setpriv") and f"--reuid={UID}" in tail
    assert "--bounding-set=-all" in tail and "--no-new-privs" in tail
    assert tail[-3:] == ["python3", "-c", "pass"]
    # Nothing of the data dir (above the instance root) is bound anywhere.
    sources = {command[i + 1] for i, arg in enumerate(command) if arg.endswith("bind")}
    assert not any(str(tmp_path / "instances").startswith(s) for s in sources if s != "/")


def test_interpreters_that_cannot_be_shown_are_refused(tmp_path: Path) -> None:
    sandbox = _sandbox(tmp_path)
    with pytest.raises(SandboxError, match="own"):
        sandbox.command(["x"], "/opt/ml/code/python")
    # Under /tmp is fine: each sandbox's /tmp is a new file system, bound into after.
    link = tmp_path / "python-in-tmp"
    link.symlink_to(sys.executable)
    command = sandbox.command(["x"], str(link))
    assert command.index("/tmp") < command.index(str(link))
    # One whose installation holds the data dir would show the data dir.
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(sys.executable)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    root = env / "data" / "instances" / "key" / "algo-1"
    root.mkdir(parents=True)
    inside_data = Sandbox(root=root, uid=UID, hostname="algo-1", hosts=("algo-1",), private=root)
    with pytest.raises(SandboxError, match="data dir"):
        inside_data.command(["x"], str(env / "bin" / "python"))


def test_without_the_sandbox_jobs_fail_saying_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(confinement, "unavailable", lambda: "bwrap is missing")
    spec = JobSpec(job_name="j", sandbox={"uid": UID})
    with pytest.raises(ConfinementError) as error:
        Confinement.open(spec, Layout(tmp_path / "key" / "algo-1"))
    message = str(error.value)
    assert message.startswith("InternalServerError: bwrap is missing")
    assert "apt-get install bubblewrap" in message and "--unsafe-no-sandbox" in message
    unconfined = JobSpec(job_name="j", sandbox={"mode": "none"}, network_isolation=True)
    with pytest.raises(ConfinementError, match="EnableNetworkIsolation needs the job sandbox"):
        Confinement.open(unconfined, Layout(tmp_path / "key" / "algo-1"))


def test_each_account_has_a_sandbox_user_of_its_own(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    first, second = backend.sandbox_uid("111111111111"), backend.sandbox_uid("222222222222")
    assert first >= SANDBOX_UID_BASE and first != second
    assert LocalBackend(tmp_path).sandbox_uid("111111111111") == first  # kept
    job = JobSpec(job_name="j", account_id="222222222222", sandbox={"mode": "bwrap"})
    backend._job_file(tmp_path / "job.json", job)
    assert JobSpec.from_json((tmp_path / "job.json").read_text()).sandbox["uid"] == second
    backend._job_file(tmp_path / "job.json", JobSpec(job_name="j", sandbox={"mode": "none"}))
    assert "uid" not in JobSpec.from_json((tmp_path / "job.json").read_text()).sandbox


def test_limits_come_from_the_spec() -> None:
    assert Limits.from_dict({"memory_bytes": 1024, "cpus": 2, "pids": 0}) == Limits(1024, 2, None)
    assert not Limits.from_dict(None).any


def test_an_instance_sees_its_own_gpus_devices_only(tmp_path: Path) -> None:
    command = _sandbox(tmp_path, gpus=(1, 3)).command(["x"], sys.executable)
    binds = [command[i + 1] for i, arg in enumerate(command) if arg == "--dev-bind-try"]
    assert "/dev/nvidia1" in binds and "/dev/nvidia3" in binds and "/dev/nvidiactl" in binds
    assert "/dev/nvidia0" not in binds and "/dev/nvidia2" not in binds
    # After the sandbox's own /dev, so they are in it; none without GPUs.
    assert command.index("--dev") < command.index("--dev-bind-try")
    plain = _sandbox(tmp_path / "other").command(["x"], sys.executable)
    assert "--dev-bind-try" not in plain


def test_a_staged_file_never_lands_through_a_link_or_in_the_users_directory(
    tmp_path: Path, host_secret: Path
) -> None:
    tree = tmp_path / "opt-ml"
    (tree / "checkpoints").mkdir(parents=True)
    (tree / "input").symlink_to(host_secret.parent)
    with pytest.raises(OSError):
        new_file(tree, tree / "input" / "data" / "x")  # through a link
    (tree / "cache").mkdir()
    os.chown(tree / "cache", UID, UID)
    with pytest.raises(OSError):
        new_file(tree, tree / "cache" / "ck" / "x")  # the user's directory
    (tree / "checkpoints" / "x").symlink_to(host_secret)
    fd = new_file(tree, tree / "checkpoints" / "x")  # the link itself is replaced
    os.write(fd, b"staged")
    os.close(fd)
    assert (tree / "checkpoints" / "x").read_bytes() == b"staged"
    assert host_secret.read_text() == "the host's secret"


def test_what_a_job_wrote_counts_every_entry_not_only_files(tmp_path: Path) -> None:
    """Links with long targets and empty directories fill a disk as files do."""
    from dockyard.compute.agent.data import ENTRY_BYTES, written_bytes

    tree = tmp_path / "opt-ml"
    (tree / "model").mkdir(parents=True)
    for i in range(50):
        (tree / "model" / f"l{i}").symlink_to("x" * 3000)
        (tree / "model" / f"d{i}").mkdir()
    (tree / "model" / "sparse").write_bytes(b"")
    os.truncate(tree / "model" / "sparse", 1 << 30)
    used = written_bytes(tree, [tree / "model"])
    assert used >= 50 * 3000 + 50 * 4096 + (1 << 30) + 101 * ENTRY_BYTES
    # What packing would make of it: the files' sizes only.
    assert written_bytes(tree, [tree / "model"], apparent=True) == 1 << 30
