"""A job's code is untrusted: each attack runs from inside a real job and must fail.

Every test here submits a job through the API, as a tenant would, whose code tries
what an attacker would (read the server's keys, another account's model, the server's
environment; signal the server; leave a process behind; leave its network; escape its
tree through links and `..`), and reports what it got in its own model. The test
then checks the report - and what the server shows for the job - against the promise
in spec §4.8 and docs/security.md.
"""

from __future__ import annotations

import configparser
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dockyard.compute.sandbox.bwrap import interpreter_dirs
from tests.harness import UID, DockyardServer, instance_root, open_gate

SERVER_SECRET = "server-secret-Ahf3uo9chaiVeeph"


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    """One server for the module, with a secret in its environment (as an S3 endpoint's
    keys would be) and a tiny instance type to run out of."""
    tmp = tmp_path_factory.mktemp("sandbox")
    config = tmp / "dockyard.toml"
    config.write_text('[instance_types."ml.g5.xlarge"]\nmemory_gib = 0.25\npids = 64\n')
    server = DockyardServer(tmp / "data")
    server.extra_args = ["--config", str(config)]
    server.extra_env = {"DOCKYARD_S3_SECRET_ACCESS_KEY": SERVER_SECRET}
    server.start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


def job(
    server: DockyardServer,
    name: str,
    code: str,
    *,
    instance_type: str = "ml.m5.xlarge",
    bucket: str = "",
    **extra: Any,
) -> dict[str, Any]:
    """A script-mode job (train.py in a tar.gz on the local S3), as the SDK sends one;
    its code and output in `bucket` (default: the server's `data` and `results`)."""
    code_bucket, output = (
        (bucket, f"s3://{bucket}/out") if bucket else ("data", "s3://results/out")
    )
    archive = server.data_dir / "s3" / code_bucket / "code" / f"{name}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    body = textwrap.dedent(code).encode()
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "python:3.11", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "HyperParameters": {
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": f'"s3://{code_bucket}/code/{name}.tar.gz"',
        },
        "OutputDataConfig": {"S3OutputPath": output},
        "ResourceConfig": {
            "InstanceType": instance_type,
            "InstanceCount": 1,
            "VolumeSizeInGB": 10,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(request.get(key), dict):
            request[key] = {**request[key], **value}
        else:
            request[key] = value
    return request


def finish(client: Any, name: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = client.describe_training_job(TrainingJobName=name)
        if found["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            return dict(found)
        assert time.monotonic() < deadline, f"{name} stayed {found['TrainingJobStatus']}"
        time.sleep(0.2)


def run(server: DockyardServer, name: str, code: str, key: Any = None, **extra: Any) -> dict:
    client = server.client(key=key)
    client.create_training_job(**job(server, name, code, **extra))
    done = finish(client, name)
    # What the job printed, for an assertion's message.
    done["Output"] = output(server, name)
    return done


def why(done: dict[str, Any]) -> str:
    return f"{done.get('FailureReason')}\n" + "\n".join(done.get("Output", []))


def output(server: DockyardServer, name: str) -> list[str]:
    logs = server.data_dir / "instances"
    return [
        json.loads(line)["m"]
        for path in logs.glob(f"*-{name}-{UID}/algo-1/logs/output.jsonl")
        for line in path.read_text().splitlines()
    ]


def model(server: DockyardServer, name: str, bucket: str = "results") -> dict[str, bytes]:
    archive = server.data_dir / "s3" / bucket / "out" / name / "output" / "model.tar.gz"
    with tarfile.open(archive) as tar:
        return {
            m.name: (tar.extractfile(m).read() if m.isfile() else m.linkname.encode())  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


def report(server: DockyardServer, name: str, bucket: str = "results") -> dict[str, Any]:
    return dict(json.loads(model(server, name, bucket)["report.json"]))


# The attacker's toolbox: every attempt is recorded as what it got ("denied: ...").
PRELUDE = """
    import ctypes, json, os, signal, socket, stat, sys
    REPORT = {}

    def attempt(what, action):
        try:
            REPORT[what] = action()
        except BaseException as exc:
            REPORT[what] = f"denied: {type(exc).__name__}"

    def read(path):
        with open(path, "rb") as handle:
            return handle.read().decode(errors="replace")

    def save():
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "report.json"), "w") as out:
            json.dump(REPORT, out)
"""


def attack(code: str) -> str:
    return textwrap.dedent(PRELUDE) + textwrap.dedent(code) + "\nsave()\n"


def secrets_of(server: DockyardServer) -> list[str]:
    """Everything a job must never learn: keys, the operator token, every access key's
    secret, the server's environment secret."""
    found = [SERVER_SECRET]
    for name in ("master.key", "operator.key"):
        found.append((server.data_dir / name).read_text().strip())
    parser = configparser.ConfigParser()
    parser.read(server.data_dir / "credentials")
    found.append(parser["default"]["aws_secret_access_key"])
    return found


def test_a_job_is_an_unprivileged_user_alone_in_its_sandbox(box: DockyardServer) -> None:
    code = attack(
        """
        status = dict(line.split(":\\t", 1) for line in read("/proc/self/status").splitlines())
        REPORT["uid"] = os.getuid()
        REPORT["caps"] = [status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd")]
        REPORT["no_new_privs"] = status["NoNewPrivs"].strip()
        REPORT["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        REPORT["hostname"] = socket.gethostname()
        import getpass, pwd
        REPORT["user"] = [getpass.getuser(), pwd.getpwuid(os.getuid()).pw_dir]
        REPORT["algo-1"] = socket.gethostbyname("algo-1")
        REPORT["root"] = sorted(os.listdir("/"))
        REPORT["env"] = sorted(os.environ)
        attempt("setuid root", lambda: os.setuid(0))
        attempt("write /usr", lambda: open("/usr/pwned", "w"))
        attempt("mount", lambda: ctypes.CDLL(None, use_errno=True).mount(
            b"none", b"/mnt", b"tmpfs", 0, None) or ctypes.get_errno())
        """
    )
    done = run(box, "whoami", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "whoami")
    assert got["uid"] >= 2_100_000_000  # the account's sandbox user, not root
    assert got["caps"] == ["0000000000000000"] * 3 and got["no_new_privs"] == "1"
    # Its own PID namespace: its init, itself and what it started - nothing of the host.
    assert max(got["processes"]) < 10, got["processes"]
    assert got["hostname"] == "algo-1"
    assert got["user"] == ["sagemaker", "/home/sagemaker"] and got["algo-1"] == "127.0.0.1"
    # Its root holds the system, its tree and its interpreter's installation - no more.
    system = {"bin", "dev", "etc", "home", "lib", "lib64", "opt", "proc", "sbin", "sys", "tmp"}
    interpreter = {Path(d).parts[1] for d in interpreter_dirs(sys.executable)}
    assert set(got["root"]) <= system | {"usr", "lib32", "libx32"} | interpreter, got["root"]
    assert not any(name.startswith("DOCKYARD") for name in got["env"])
    contract = {"TRAINING_JOB_NAME", "TRAINING_JOB_ARN", "SM_MODEL_DIR", "SM_HPS", "PATH", "HOME"}
    assert contract <= set(got["env"])
    assert got["setuid root"].startswith("denied")
    assert got["write /usr"].startswith("denied")
    assert got["mount"] != 0  # EPERM


def test_a_job_finds_no_secret_of_the_server_anywhere_it_can_read(box: DockyardServer) -> None:
    data_dir = str(box.data_dir)
    code = attack(
        f"""
        import tarfile
        data_dir = {data_dir!r}
        for name in ("dockyard.db", "master.key", "operator.key", "credentials", "config"):
            attempt("host " + name, lambda: read(os.path.join(data_dir, name)))
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            for what in ("environ", "cmdline"):
                attempt(f"/proc/{{pid}}/{{what}}", lambda: read(f"/proc/{{pid}}/{{what}}"))
            attempt(f"/proc/{{pid}}/root", lambda: os.listdir(f"/proc/{{pid}}/root/"))
        # Everything readable outside the read-only system goes into the model.
        skip = ("/usr", "/proc", "/sys", "/dev", sys.prefix, sys.base_prefix, "/opt/ml/model")
        with tarfile.open("/opt/ml/model/everything.tar", "w") as tar:
            for top, dirs, files in os.walk("/"):
                dirs[:] = [d for d in dirs if not os.path.join(top, d).startswith(skip)]
                for name in files:
                    path = os.path.join(top, name)
                    try:
                        if stat.S_ISREG(os.lstat(path).st_mode):
                            tar.add(path)
                    except OSError:
                        pass
        REPORT["env"] = dict(os.environ)
        """
    )
    done = run(box, "hunter", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "hunter")
    for name in ("dockyard.db", "master.key", "operator.key", "credentials", "config"):
        assert got["host " + name] == "denied: FileNotFoundError"
    loot = model(box, "hunter")["everything.tar"] + json.dumps(got).encode()
    assert len(loot) > 1000  # it did find its own files
    for secret in secrets_of(box):
        assert secret.encode() not in loot


def test_another_accounts_job_and_files_are_out_of_reach(box: DockyardServer) -> None:
    victim = box.client()
    victim.create_training_job(
        **job(
            box,
            "victim",
            """
            import pathlib, time
            pathlib.Path("/opt/ml/model/weights.bin").write_text("the victim's weights")
            while not pathlib.Path("/opt/ml/input/go").exists():
                time.sleep(0.05)
            """,
            HyperParameters={"secret_hp": "victim-hyperparameter-Oow2ie"},
            Environment={"VICTIM_TOKEN": "victim-environment-Zoh8ei"},
        )
    )
    home = instance_root(box, "victim")
    deadline = time.monotonic() + 60
    while not (home / "opt/ml/model/weights.bin").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    victim_pids = _pids_in_sandbox_of(home)
    assert victim_pids
    _, attacker_key = box.new_account("attacker")
    box.own_bucket("attacker-space", key=attacker_key)
    tree = str(home / "opt" / "ml")
    assert box.process is not None
    server_pid = box.process.pid
    code = attack(
        f"""
        tree = {tree!r}
        attempt("read hyperparameters", lambda: read(tree + "/input/config/hyperparameters.json"))
        attempt("read weights", lambda: read(tree + "/model/weights.bin"))
        attempt("overwrite weights", lambda: open(tree + "/model/weights.bin", "w").write("x"))
        attempt("read victim S3", lambda: os.listdir({str(box.data_dir / "s3")!r}))
        for pid in {victim_pids!r}:
            attempt(f"kill {{pid}}", lambda: os.kill(pid, signal.SIGKILL))
            attempt(f"environ {{pid}}", lambda: read(f"/proc/{{pid}}/environ"))
        attempt("stop the server", lambda: os.kill({server_pid}, signal.SIGSTOP))
        UID = os.getuid()
        """
    ).replace("\nsave()\n", "\nREPORT['uid'] = UID\nsave()\n")
    done = run(box, "attacker-1", code, key=attacker_key, bucket="attacker-space")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "attacker-1", bucket="attacker-space")
    attacker_uid = got.pop("uid")
    assert all(value.startswith("denied") for value in got.values()), got
    assert all(got[f"kill {pid}"] == "denied: ProcessLookupError" for pid in victim_pids)
    # The victim ran on untouched, and the server still answers.
    assert _pids_in_sandbox_of(home) == victim_pids
    victim_uid = os.stat(home / "opt" / "ml" / "model" / "weights.bin").st_uid
    open_gate(box, "victim")
    done = finish(victim, "victim")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert model(box, "victim")["weights.bin"] == b"the victim's weights"
    # Each account's instances run as a user of their own.
    assert attacker_uid != victim_uid and attacker_uid >= 2_100_000_000


def test_killing_everything_it_can_see_ends_only_the_job_itself(box: DockyardServer) -> None:
    code = """
        import os, signal, subprocess, sys, time
        # A child signals every process it may: all it can see is its own job.
        subprocess.run([sys.executable, "-c", "import os; os.kill(-1, 9)"])
        time.sleep(30)
    """
    done = run(box, "kill-all", code)
    assert done["TrainingJobStatus"] == "Failed"
    assert "ExitCode 137" in done["FailureReason"]
    assert box.client().list_training_jobs()["TrainingJobSummaries"]  # the server lives


def test_nothing_of_a_job_runs_after_it_ends(box: DockyardServer) -> None:
    marker = f"escapee-{os.getpid()}-{time.monotonic_ns()}"
    code = f"""
        import os, pathlib, subprocess, sys, time
        stubborn = "import signal, time; [signal.signal(s, signal.SIG_IGN) for s in " \\
            "(signal.SIGHUP, signal.SIGTERM)]; time.sleep(300)"
        # A daemon: double fork, a session of its own, deaf to hang-ups and SIGTERM.
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", stubborn, "{marker}"])
            os._exit(0)
        subprocess.Popen([sys.executable, "-c", stubborn, "{marker}"], start_new_session=True)
        print("left two behind", flush=True)
        while not pathlib.Path("/opt/ml/input/go").exists():
            time.sleep(0.05)
    """
    client = box.client()
    client.create_training_job(**job(box, "escapee", code))
    deadline = time.monotonic() + 60
    while _running(marker) < 2:  # both are running
        assert time.monotonic() < deadline, "the escapees never ran"
        time.sleep(0.05)
    open_gate(box, "escapee")
    done = finish(client, "escapee")
    assert done["TrainingJobStatus"] == "Completed", done.get("FailureReason")
    deadline = time.monotonic() + 30
    while _running(marker):
        assert time.monotonic() < deadline, "a process of an ended job is still running"
        time.sleep(0.1)


@pytest.mark.parametrize("isolated", [True, False])
def test_a_job_cannot_leave_its_network(box: DockyardServer, isolated: bool) -> None:
    port = box.port
    code = attack(
        f"""
        libc = ctypes.CDLL(None, use_errno=True)
        CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000

        def setns(path):
            fd = os.open(path, os.O_RDONLY)
            return libc.setns(fd, CLONE_NEWNET) or f"errno {{ctypes.get_errno()}}"

        def connect():
            socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
            return "reached the API"

        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            attempt(f"setns {{pid}}", lambda: setns(f"/proc/{{pid}}/ns/net"))
        attempt("setns /run/netns", lambda: os.listdir("/run/netns"))
        attempt("api", connect)
        # A user namespace of its own gives it capabilities there, and nothing more: tried
        # in a child, as the namespace would leave this process unable to write its report.
        escape = (
            "import ctypes, socket, sys; libc = ctypes.CDLL(None, use_errno=True); "
            f"assert libc.unshare({{CLONE_NEWUSER | CLONE_NEWNET}}) == 0, 'unshare'; "
            f"socket.create_connection(('127.0.0.1', {port}), timeout=3); print('reached')"
        )
        import subprocess
        child = subprocess.run([sys.executable, "-c", escape], capture_output=True, text=True)
        REPORT["api from a new namespace"] = child.stdout.strip() or "denied: " + (
            child.stderr.strip().splitlines() or ["?"]
        )[-1]
        """
    )
    name = f"leaver-{str(isolated).lower()}"
    done = run(box, name, code, EnableNetworkIsolation=isolated)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, name)
    assert got["api"].startswith("denied")
    assert got["api from a new namespace"].startswith("denied"), got["api from a new namespace"]
    assert all(v != 0 for k, v in got.items() if k.startswith("setns /proc"))
    assert got["setns /run/netns"].startswith("denied")


def test_another_jobs_port_is_out_of_reach(box: DockyardServer) -> None:
    listener = box.client()
    listener.create_training_job(
        **job(
            box,
            "listener",
            """
            import pathlib, socket, time
            server = socket.create_server(("0.0.0.0", 7123))
            server.settimeout(0.1)
            pathlib.Path("/opt/ml/output/listening").touch()
            while not pathlib.Path("/opt/ml/input/go").exists():
                try:
                    server.accept()[0].close()
                    pathlib.Path("/opt/ml/model/reached").write_text("someone got in")
                except OSError:
                    pass
            """,
        )
    )
    home = instance_root(box, "listener")
    deadline = time.monotonic() + 60
    while not (home / "opt" / "ml" / "output" / "listening").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    code = attack(
        """
        for host in ("127.0.0.1", "algo-1", "10.0.2.2"):
            attempt(host, lambda: socket.create_connection((host, 7123), timeout=3).close())
        """
    )
    done = run(box, "prober", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert all(value.startswith("denied") for value in report(box, "prober").values())
    open_gate(box, "listener")
    assert finish(listener, "listener")["TrainingJobStatus"] == "Completed"
    assert "reached" not in model(box, "listener")


def test_links_in_its_tree_lead_nowhere(box: DockyardServer) -> None:
    """A job leaves links to the server's keys where the agent (root) reads after it:
    its model, its checkpoints, its failure file. None is followed."""
    key = str(box.data_dir / "master.key")
    code = f"""
        import os, shutil
        os.symlink({key!r}, "/opt/ml/model/key-link")
        os.symlink({key!r}, "/opt/ml/checkpoints/key-link")
        os.symlink("/etc", "/opt/ml/checkpoints/etc-link")
        os.symlink({key!r}, "/opt/ml/output/failure")
        shutil.rmtree("/opt/ml/output/data")
        os.symlink({str(box.data_dir)!r}, "/opt/ml/output/data")
        raise SystemExit(3)
    """
    done = run(
        box,
        "linker",
        code,
        CheckpointConfig={"S3Uri": "s3://results/checkpoints/linker"},
    )
    assert done["TrainingJobStatus"] == "Failed"
    secret = (box.data_dir / "master.key").read_text().strip()
    assert secret not in done["FailureReason"]
    assert done["FailureReason"] == "AlgorithmError: ExitCode 3"
    assert model(box, "linker") == {"key-link": key.encode()}  # a link, as a link
    checkpoints = box.data_dir / "s3" / "results" / "checkpoints" / "linker"
    assert not checkpoints.exists() or not any(checkpoints.rglob("*"))
    output = box.data_dir / "s3" / "results" / "out" / "linker" / "output" / "output.tar.gz"
    with tarfile.open(output) as tar:
        assert tar.getnames() == []


def test_a_model_dir_swapped_for_a_link_packs_nothing_of_the_host(box: DockyardServer) -> None:
    code = f"""
        import os, shutil
        shutil.rmtree("/opt/ml/model")
        os.symlink({str(box.data_dir)!r}, "/opt/ml/model")
    """
    done = run(box, "swapper", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert model(box, "swapper") == {}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            {"CheckpointConfig": {"S3Uri": "s3://results/c", "LocalPath": "/opt/ml/../../etc"}},
            "CheckpointConfig.LocalPath",
        ),
        (
            {"CheckpointConfig": {"S3Uri": "s3://results/c", "LocalPath": "/data/checkpoints"}},
            "CheckpointConfig.LocalPath",
        ),
        ({"CheckpointConfig": {"S3Uri": "s3://results/../../../etc"}}, "CheckpointConfig.S3Uri"),
        (
            {"OutputDataConfig": {"S3OutputPath": "s3://results/a/../../x"}},
            "OutputDataConfig.S3OutputPath",
        ),
        (
            {
                "HyperParameters": {
                    "sagemaker_program": '"train.py"',
                    "sagemaker_submit_directory": '"file:///etc"',
                }
            },
            "sagemaker_submit_directory",
        ),
        (
            {
                "InputDataConfig": [
                    {
                        "ChannelName": "..",
                        "DataSource": {
                            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/x"}
                        },
                    }
                ]
            },
            "ChannelName",
        ),
        (
            {
                "InputDataConfig": [
                    {
                        "ChannelName": "train",
                        "DataSource": {
                            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/../x"}
                        },
                    }
                ]
            },
            "S3Uri",
        ),
    ],
)
def test_paths_that_would_leave_the_job_are_refused(
    box: DockyardServer, change: dict[str, Any], named: str
) -> None:
    request = job(box, "escaper", "pass")
    request.update(change)
    with pytest.raises(ClientError) as error:
        box.client().create_training_job(**request)
    assert error.value.response["Error"]["Code"] == "ValidationException"
    assert named in error.value.response["Error"]["Message"]


def test_a_job_over_its_memory_fails_as_out_of_memory(box: DockyardServer) -> None:
    code = """
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))
    """
    done = run(box, "hog", code, instance_type="ml.g5.xlarge")
    assert done["TrainingJobStatus"] == "Failed"
    assert done["FailureReason"].startswith("ClientError: OutOfMemoryError")
    assert "out of memory" in done["FailureReason"]
    assert box.client().list_training_jobs()["TrainingJobSummaries"]  # the server lives


def test_a_job_cannot_lower_its_oom_score(box: DockyardServer) -> None:
    """Under the host's memory pressure jobs go first; none can put itself after the
    others (or after the server)."""
    code = attack(
        """
        def lower(score):
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write(str(score))
            return read("/proc/self/oom_score_adj").strip()

        attempt("now", lambda: read("/proc/self/oom_score_adj").strip())
        attempt("to 0", lambda: lower(0))
        attempt("to -500", lambda: lower(-500))
        """
    )
    done = run(box, "oom-score", code)
    assert done["TrainingJobStatus"] == "Completed", why(done)
    got = report(box, "oom-score")
    assert got["now"] == "500"
    assert got["to -500"].startswith("denied"), got
    if not _root_has(CAP_SYS_RESOURCE):
        # Root's write sets the floor only with CAP_SYS_RESOURCE, which a host running
        # dockyard in a container may withhold (this one does): docs/security.md.
        pytest.skip("this host's root lacks CAP_SYS_RESOURCE: a job's floor stays 0")
    assert got["to 0"].startswith("denied"), got


CAP_SYS_RESOURCE = 24


def _root_has(capability: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> capability & 1)
    return False


def test_a_job_has_its_types_process_limit(box: DockyardServer) -> None:
    code = attack(
        """
        import subprocess
        children = []
        try:
            for _ in range(200):
                children.append(subprocess.Popen(["sleep", "30"]))
        except OSError as exc:
            REPORT["stopped at"] = len(children)
        for child in children:
            child.kill()
        """
    )
    done = run(box, "forker", code, instance_type="ml.g5.xlarge")
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert 0 < report(box, "forker")["stopped at"] < 64


def test_the_data_dir_is_the_servers_alone(box: DockyardServer) -> None:
    done = run(box, "private", "print('a line for the log')", HyperParameters={"lr": "0.1"})
    assert done["TrainingJobStatus"] == "Completed", why(done)
    assert os.stat(box.data_dir).st_mode & 0o777 == 0o700
    for name in ("dockyard.db", "master.key", "operator.key", "credentials"):
        assert os.stat(box.data_dir / name).st_mode & 0o777 == 0o600, name
    instance = next(box.data_dir.glob(f"instances/*-private-{UID}/algo-1"))
    files = [
        box.data_dir / "dockyard.db",
        box.data_dir / "master.key",
        instance / "job.json",
        instance / "logs" / "output.jsonl",
        instance / "state.json",
    ]
    for path in files:
        # Another local user (nobody) reads none of it.
        result = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(path)],
            capture_output=True,
            check=False,
        )
        assert result.returncode != 0 and b"Permission denied" in result.stderr, path


def test_a_normal_job_still_completes_reuses_its_pool_and_writes_its_model(
    box: DockyardServer,
) -> None:
    client = box.client()
    code = """
        import os, pathlib, sys
        cache = pathlib.Path(os.environ["SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"])
        seen = sorted(p.name for p in cache.iterdir())
        (cache / os.environ["TRAINING_JOB_NAME"]).write_text("kept")
        pathlib.Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text(" ".join(seen))
    """
    for name in ("normal-1", "normal-2"):
        client.create_training_job(
            **job(box, name, code, ResourceConfig={"KeepAlivePeriodInSeconds": 600})
        )
        done = finish(client, name)
        assert done["TrainingJobStatus"] == "Completed", why(done)
        deadline = time.monotonic() + 60
        while (
            client.describe_training_job(TrainingJobName=name)["WarmPoolStatus"]["Status"]
            != "Available"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    first = client.describe_training_job(TrainingJobName="normal-1")["WarmPoolStatus"]
    assert first["Status"] == "Reused" and first["ReusedByJob"] == "normal-2"
    assert model(box, "normal-2")["model.txt"] == b"normal-1"
    client.update_training_job(
        TrainingJobName="normal-2", ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )


# -- helpers ---------------------------------------------------------------------------


def _running(marker: str) -> int:
    """How many processes on this host have `marker` in their command line."""
    found = 0
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                found += state != "Z"
        except (OSError, IndexError):
            continue
    return found


def _pids_in_sandbox_of(home: Path) -> list[int]:
    """Host PIDs of the job processes of an instance's sandbox: its users' processes
    whose /opt/ml is that instance's tree."""
    tree = os.stat(home / "opt" / "ml")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid < 2_100_000_000:
                continue
            seen = os.stat(entry / "root" / "opt" / "ml")
        except OSError:
            continue
        if (seen.st_dev, seen.st_ino) == (tree.st_dev, tree.st_ino):
            found.append(int(entry.name))
    return sorted(found)


def test_the_attacks_are_real_unconfined(tmp_path: Path) -> None:
    """The control: with --unsafe-no-sandbox the same reads succeed, so the tests above
    fail for want of a sandbox, not for a broken attack. (Only harmless attacks here:
    unconfined, a job's kill(-1) would be root's.)"""
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--unsafe-no-sandbox"]
    server.extra_env = {"DOCKYARD_S3_SECRET_ACCESS_KEY": SERVER_SECRET}
    server.start()
    try:
        for bucket in ("results", "data"):
            (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
        code = attack(
            f"""
            attempt("master.key", lambda: read({str(server.data_dir / "master.key")!r}))
            attempt("server environ", lambda: read("/proc/{server.process.pid}/environ"))
            attempt("api", lambda: socket.create_connection(("127.0.0.1", {server.port})) and 1)
            """  # type: ignore[union-attr]
        )
        done = run(server, "control", code)
        assert done["TrainingJobStatus"] == "Completed", why(done)
        got = report(server, "control")
        assert got["master.key"].strip() == (server.data_dir / "master.key").read_text().strip()
        assert SERVER_SECRET in got["server environ"]
        assert got["api"] == 1
    finally:
        server.stop()
