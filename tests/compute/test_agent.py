"""The instance agent, run for real as a detached process on a temporary root with LocalS3."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dockyard.clock import monotonic
from dockyard.compute.agent.data import ClientError, stage_inputs
from dockyard.compute.agent.env import build_env, job_command, make_dirs
from dockyard.compute.agent.instance import JobSpec
from dockyard.compute.agent.s3 import LocalS3
from dockyard.compute.wire.layout import Layout

REPO = Path(__file__).resolve().parents[2]
SANDBOX_UID = 2_100_999_001


class Instance:
    """One instance root plus the LocalS3 its job reads and writes."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "instance"
        self.root.mkdir()
        self.s3_root = tmp_path / "s3"
        (self.s3_root / "bkt").mkdir(parents=True)
        self.s3 = LocalS3(self.s3_root)
        self.agent: subprocess.Popen[bytes] | None = None

    def put(self, key: str, data: bytes | str) -> None:
        self.s3.write_bytes(f"s3://bkt/{key}", data.encode() if isinstance(data, str) else data)

    def object(self, key: str) -> Path:
        return self.s3_root / "bkt" / key

    def write_job(self, **overrides: Any) -> None:
        spec = {
            "job_name": "my-job",
            "host": "algo-1",
            "hosts": ["algo-1"],
            "hyperparameters": {},
            "input_data_config": [],
            "resource_config": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
            "entrypoint": None,
            "arguments": None,
            "program": None,
            "submit_directory": None,
            "python": sys.executable,
            "environment": {"FOO": "bar"},
            "output_path": "s3://bkt/out",
            "checkpoint_s3_uri": None,
            "checkpoint_local_path": "/opt/ml/checkpoints",
            "max_runtime_seconds": 60,
            "stop_grace_seconds": 5,
            "s3": {"root": str(self.s3_root)},
            "master_port": 7777,
            # The sandbox's user and limits, as the backend and the control plane give.
            "sandbox": {"uid": SANDBOX_UID, "limits": {"memory_bytes": 2 * 1024**3, "pids": 512}},
            **overrides,
        }
        (self.root / "job.json").write_text(json.dumps(spec))

    def start(self) -> subprocess.Popen[bytes]:
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "dockyard.compute.agent", str(self.root)],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.agent

    def finish(self, timeout: float = 20) -> dict[str, Any]:
        assert self.agent is not None
        try:
            self.agent.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            raise
        out = self.agent.stdout.read().decode() if self.agent.stdout else ""
        assert self.agent.returncode == 0, out
        return self.state()

    def run(self, **overrides: Any) -> dict[str, Any]:
        self.write_job(**overrides)
        self.start()
        return self.finish()

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.root / "state.json").read_text()))
        except FileNotFoundError:
            return {}

    def lines(self) -> list[str]:
        log = self.root / "logs" / "output.jsonl"
        if not log.exists():
            return []
        return [json.loads(line)["m"] for line in log.read_text().splitlines()]

    def kill_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            os.killpg(self.agent.pid, signal.SIGKILL)
            self.agent.wait()


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[Instance]:
    inst = Instance(tmp_path)
    yield inst
    inst.kill_agent()
    pid = inst.state().get("pid")
    if isinstance(pid, int) and not _gone(pid):
        os.killpg(pid, signal.SIGKILL)


def wait_for(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = monotonic() + timeout
    while monotonic() < deadline:
        value = condition()
        if value:
            return value
        # Polling, not a timed assertion: the deadline is only a bound on a hang.
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(pid: int) -> bool:
    """No such process, or only a zombie left for init to reap."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def tar_gz(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def channel(name: str, uri: str, **source: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "ContentType": "text/csv",
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": uri,
                "S3DataDistributionType": "FullyReplicated",
                **source,
            }
        },
    }


def py(code: str) -> list[str]:
    """A ContainerEntrypoint running a Python snippet ("python3" is the job's interpreter)."""
    return ["python3", "-c", textwrap.dedent(code)]


TRAIN_PY = """\
import json, os, sys
print("args", " ".join(sys.argv[1:]))
for ch in ("train", "test"):
    base = os.environ["SM_CHANNEL_" + ch.upper()]
    for root, _, files in sorted(os.walk(base)):
        for f in sorted(files):
            path = os.path.join(root, f)
            print(ch, os.path.relpath(path, base), open(path).read())
print("hps", json.dumps(json.loads(os.environ["SM_HPS"]), sort_keys=True))
print("hp_lr", os.environ["SM_HP_LR"], "foo", os.environ["FOO"])
print("dist", os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"],
      os.environ["MASTER_PORT"], os.environ["SM_CURRENT_HOST"], os.environ["SM_HOSTS"])
print("cwd", os.getcwd())
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as f:
    f.write("weights")
os.makedirs(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "eval"))
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "eval", "metrics.txt"), "w") as f:
    f.write("acc=1")
config = os.environ["SM_INPUT_CONFIG_DIR"]
seen = {n: json.load(open(os.path.join(config, n))) for n in os.listdir(config)}
print("config", json.dumps(seen))
print("util", os.path.exists("lib/util.py"))
"""


def test_script_mode_job_completes_and_uploads(instance: Instance) -> None:
    instance.put("code/source.tar.gz", tar_gz({"train.py": TRAIN_PY, "lib/util.py": "X = 1\n"}))
    instance.put("data/train/a.csv", "1,2")
    instance.put("data/train/sub/b.csv", "3,4")
    for i in range(4):
        instance.put(f"data/test/part-{i}.csv", f"t{i}")
    hps = {
        "lr": "0.1",
        "epochs": "3",
        "name": "resnet",
        "sagemaker_program": '"train.py"',  # the SageMaker SDK sends these JSON-quoted
        "sagemaker_submit_directory": '"s3://bkt/code/source.tar.gz"',
    }
    state = instance.run(
        hosts=["algo-1", "algo-2"],
        hyperparameters=hps,
        program=hps["sagemaker_program"],
        submit_directory=hps["sagemaker_submit_directory"],
        input_data_config=[
            channel("train", "s3://bkt/data/train"),
            # Sharded across the two hosts: algo-1 takes objects 0 and 2.
            channel("test", "s3://bkt/data/test/", S3DataDistributionType="ShardedByS3Key"),
        ],
    )
    assert state["phase"] == "completed", state
    assert state["exit_code"] == 0 and state["failure_reason"] is None
    for key in ("started_at", "training_started_at", "first_output_at", "ended_at"):
        assert state[key] is not None
    assert state["started_at"] <= state["training_started_at"] <= state["ended_at"]

    opt_ml = instance.root / "opt" / "ml"
    lines = instance.lines()
    assert lines[:5] == [
        "args --epochs 3 --lr 0.1 --name resnet",
        "train a.csv 1,2",
        "train sub/b.csv 3,4",
        "test part-0.csv t0",
        "test part-2.csv t2",
    ]
    assert lines[5] == 'hps {"epochs": 3, "lr": 0.1, "name": "resnet"}'
    assert lines[6] == "hp_lr 0.1 foo bar"
    assert lines[7] == 'dist 0 2 127.0.0.1 7777 algo-1 ["algo-1", "algo-2"]'
    assert lines[8] == "cwd /opt/ml/code"  # the job sees its tree at the contract's path

    assert untar(instance.object("out/my-job/output/model.tar.gz")) == {"model.txt": b"weights"}
    assert untar(instance.object("out/my-job/output/output.tar.gz")) == {
        "eval/metrics.txt": b"acc=1"
    }

    # What the job saw of its config (its tree is gone once the instance ended).
    config = json.loads(next(line for line in lines if line.startswith("config "))[7:])
    assert config["hyperparameters.json"] == hps
    assert config["resourceconfig.json"] == {
        "current_host": "algo-1",
        "hosts": ["algo-1", "algo-2"],
        "current_group_name": "homogeneousCluster",
        "current_instance_type": "ml.m5.large",
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "ml.m5.large",
                "hosts": ["algo-1", "algo-2"],
            }
        ],
        "network_interface_name": "lo",
    }
    assert config["inputdataconfig.json"] == {
        "train": {
            "ContentType": "text/csv",
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        },
        "test": {
            "ContentType": "text/csv",
            "TrainingInputMode": "File",
            "S3DistributionType": "ShardedByS3Key",
            "RecordWrapperType": "None",
        },
    }
    assert "util True" in lines
    # Uploaded, the tree is gone; what the API reads stays.
    assert not opt_ml.exists() and not (instance.root / "venv").exists()
    assert (instance.root / "state.json").exists() and instance.lines()
    assert int((instance.root / "agent.pid").read_text()) == instance.agent.pid  # type: ignore[union-attr]


def test_failure_file_becomes_the_reason(instance: Instance) -> None:
    state = instance.run(
        entrypoint=py(
            """
            import os
            with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
                f.write("bad things\\n")
            raise SystemExit(3)
            """
        )
    )
    assert state["phase"] == "failed"
    assert state["exit_code"] == 3
    assert state["failure_reason"] == "AlgorithmError: bad things"


def test_a_failure_file_cannot_pass_for_the_platforms_failure(instance: Instance) -> None:
    state = instance.run(
        entrypoint=py(
            """
            import os
            with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
                f.write("InternalServerError: the instance agent was restarted")
            raise SystemExit(3)
            """
        )
    )
    assert state["failure_reason"] == (
        "AlgorithmError: InternalServerError: the instance agent was restarted"
    )
    # SageMaker uploads whatever a failed job left behind.
    assert instance.object("out/my-job/output/model.tar.gz").exists()


def test_a_failure_file_cannot_pass_for_the_agents_failure(instance: Instance) -> None:
    """Nor for the agent's own reasons (found by issue 25's confirmation round), nor with
    characters that change how it reads."""
    state = instance.run(
        entrypoint=py(
            """
            import os
            with open(os.path.join(os.environ["SM_OUTPUT_DIR"], "failure"), "w") as f:
                f.write("ClientError: OutOfMemoryError: out\\u202e\\x00 of memory")
            raise SystemExit(3)
            """
        )
    )
    assert (
        state["failure_reason"] == "AlgorithmError: ClientError: OutOfMemoryError: out of memory"
    )


def test_exit_code_without_failure_file(instance: Instance) -> None:
    state = instance.run(entrypoint=["sh", "-c", "echo dying; exit 7"])
    assert state["phase"] == "failed"
    assert state["failure_reason"] == "AlgorithmError: ExitCode 7"
    assert instance.lines() == ["dying"]

    # A finished instance is never run again: a relaunch leaves everything as it was.
    before = (instance.root / "state.json").read_text()
    instance.start()
    assert instance.finish() == json.loads(before)
    assert instance.lines() == ["dying"]


SLEEPER = """
import os, signal, subprocess, sys, time
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen(["sleep", sys.argv[1]])
print("ready", child.pid, flush=True)
time.sleep(60)
"""


def _running(marker: str) -> bool:
    """Whether any process on this host has `marker` in its command line (a job's
    processes have PIDs of their sandbox's own, so they are found by what they run)."""
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes() and not _gone(int(entry.name)):
                return True
        except (OSError, ValueError):
            continue
    return False


def _start_sleeper(instance: Instance, *args: str, **overrides: Any) -> tuple[int, str]:
    """Start a job that sleeps (with a grandchild); answer (agent's pid of the job, the
    grandchild's unmistakable `sleep` argument)."""
    marker = f"60.{os.getpid()}{time.monotonic_ns() % 10**6}"
    instance.write_job(entrypoint=[*py(SLEEPER), marker, *args], **overrides)
    instance.start()
    wait_for(lambda: [line for line in instance.lines() if line.startswith("ready")], what="job")
    state = instance.state()
    assert state["phase"] == "training"
    assert _running(marker)
    return int(state["pid"]), marker


@pytest.mark.parametrize("how", ["stop-file", "sigterm"])
def test_stop(instance: Instance, how: str) -> None:
    pid, grandchild = _start_sleeper(instance)
    if how == "stop-file":
        (instance.root / "stop").touch()
    else:
        assert instance.agent is not None
        instance.agent.send_signal(signal.SIGTERM)
    state = instance.finish()
    assert state["phase"] == "stopped"
    assert state["stop_reason"] == "stop"
    assert state["exit_code"] == 128 + signal.SIGTERM  # as a container's, the way AWS says it
    assert _gone(pid) and not _running(grandchild)


def test_stop_escalates_to_sigkill_after_the_grace(instance: Instance) -> None:
    pid, _ = _start_sleeper(instance, "ignore-sigterm", stop_grace_seconds=0.5)
    (instance.root / "stop").touch()
    state = instance.finish()
    assert state["phase"] == "stopped" and state["exit_code"] == 128 + signal.SIGKILL
    assert _gone(pid)


def test_max_runtime(instance: Instance) -> None:
    state = instance.run(entrypoint=["sleep", "30"], max_runtime_seconds=1)
    assert state["phase"] == "stopped"
    assert state["stop_reason"] == "max_runtime"


def test_missing_channel_fails_with_client_error(instance: Instance) -> None:
    state = instance.run(
        entrypoint=["true"], input_data_config=[channel("train", "s3://bkt/missing")]
    )
    assert state["phase"] == "failed"
    assert state["failure_reason"].startswith(
        'ClientError: No S3 objects found under S3 URL "s3://bkt/missing"'
    )
    assert state["pid"] is None and state["training_started_at"] is None


def test_checkpoints_are_restored_and_saved(instance: Instance) -> None:
    instance.put("ckpt/step1.pt", "one")
    instance.put("ckpt2/unrelated.pt", "not ours")
    state = instance.run(
        checkpoint_s3_uri="s3://bkt/ckpt",
        entrypoint=py(
            """
            import os
            d = "/opt/ml/checkpoints"
            print(sorted(os.listdir(d)), open(d + "/step1.pt").read())
            open(d + "/step2.pt", "w").write("two")
            os.makedirs(d + "/sub")
            open(d + "/sub/step3.pt", "w").write("three")
            """
        ),
    )
    assert state["phase"] == "completed", state
    assert instance.lines() == ["['step1.pt'] one"]
    assert instance.object("ckpt/step2.pt").read_text() == "two"
    assert instance.object("ckpt/sub/step3.pt").read_text() == "three"


def test_upload_to_a_missing_bucket_fails_the_job(instance: Instance) -> None:
    state = instance.run(entrypoint=["true"], output_path="s3://no-such-bucket/out")
    assert state["phase"] == "failed"
    assert state["failure_reason"].startswith("ClientError: ")
    assert "no-such-bucket" in state["failure_reason"]


# -- in-process checks of the parts that need no process --------------------------------


def test_manifest_and_augmented_manifest(tmp_path: Path) -> None:
    s3 = LocalS3(tmp_path / "s3")
    (tmp_path / "s3" / "bkt").mkdir(parents=True)
    for key in ("data/x/1.csv", "data/y/2.csv", "data/z/3.csv"):
        s3.write_bytes(f"s3://bkt/{key}", key.encode())
    manifest = [{"prefix": "s3://bkt/data/"}, "x/1.csv", "y/2.csv"]
    s3.write_bytes("s3://bkt/m.json", json.dumps(manifest).encode())
    spec = JobSpec(
        job_name="j",
        input_data_config=[channel("train", "s3://bkt/m.json", S3DataType="ManifestFile")],
    )
    layout = Layout(tmp_path / "root")
    make_dirs(layout, spec)
    stage_inputs(spec, layout, s3, lambda: None)
    staged = sorted(
        p.relative_to(layout.data_dir).as_posix() for p in layout.data_dir.rglob("*.csv")
    )
    assert staged == ["train/x/1.csv", "train/y/2.csv"]

    spec.input_data_config = [channel("a", "s3://bkt/m.json", S3DataType="AugmentedManifestFile")]
    with pytest.raises(ClientError, match="ClientError: .*AugmentedManifestFile"):
        stage_inputs(spec, layout, s3, lambda: None)


def test_job_spec_round_trip_and_commands(tmp_path: Path) -> None:
    spec = JobSpec.from_json(
        json.dumps({"job_name": "j", "hyperparameters": {"a": 1}, "future_key": True})
    )
    assert spec.hyperparameters == {"a": "1"}
    assert JobSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError):
        JobSpec.from_json(json.dumps({"job_name": "j", "host": "algo-9"}))

    layout = Layout(tmp_path)
    py = sys.executable
    spec.entrypoint, spec.arguments, spec.python = ["python", "x.py"], ["--k", "v"], py
    assert job_command(spec, layout) == [py, "x.py", "--k", "v"]
    spec.entrypoint, spec.program = None, "train.py"
    assert job_command(spec, layout) == [py, "train.py", "-a", "1"]
    spec.program = None
    with pytest.raises(ValueError, match="neither"):
        job_command(spec, layout)
    env = build_env(spec, layout, {"PATH": "/usr/bin", "SECRET": "from the base"})
    assert env["SM_HP_A"] == "1" and json.loads(env["SM_HPS"]) == {"a": 1}
    assert env["SM_NUM_GPUS"] == "0" and env["PYTHONUNBUFFERED"] == "1"
    assert json.loads(env["SM_TRAINING_ENV"])["job_name"] == "j"
    assert env["TRAINING_JOB_NAME"] == "j"
    # Nothing of the agent's own environment: only the base it was given.
    assert env["SECRET"] == "from the base" and "HOME" not in env


def test_stop_before_the_job_starts(instance: Instance) -> None:
    instance.put("data/train/a.csv", "1")
    (instance.root / "stop").touch()
    state = instance.run(
        entrypoint=["true"], input_data_config=[channel("train", "s3://bkt/data")]
    )
    assert state["phase"] == "stopped" and state["stop_reason"] == "stop"
    assert state["training_started_at"] is None and state["pid"] is None


def test_a_command_that_cannot_run_fails_the_job(instance: Instance) -> None:
    state = instance.run(entrypoint=["/nonexistent/trainer"])
    assert state["phase"] == "failed"
    # Written in the job's sandbox (by its interpreter): the job's words, an algorithm's.
    assert state["failure_reason"].startswith("AlgorithmError: cannot run /nonexistent/trainer")
