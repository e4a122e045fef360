"""`dockyard jobs` against a live real-clock server: run, follow, list, show, stop, logs."""

from __future__ import annotations

import tarfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from dockyard.cli.jobs import _read_quietly, default_name, new_transitions, pack
from tests.harness import DockyardServer, run_cli

TERMINAL = {"Completed", "Failed", "Stopped"}


def cli(server: DockyardServer, *args: str, check: bool = False, **env: str):
    return run_cli(
        *args, "--endpoint-url", server.endpoint, data_dir=server.data_dir, check=check, **env
    )


def code_dir(tmp_path: Path, name: str, code: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "train.py").write_text(textwrap.dedent(code))
    return directory


def wait_for(server: DockyardServer, name: str, timeout: float = 90) -> dict:
    client = server.client()
    deadline = time.monotonic() + timeout
    while True:
        job = client.describe_training_job(TrainingJobName=name)
        if job["TrainingJobStatus"] in TERMINAL:
            return job
        assert time.monotonic() < deadline, f"{name} stayed {job['TrainingJobStatus']}"
        time.sleep(0.2)


GOOD = """
    import json, os, pathlib, sys
    print("hyperparameters:", json.loads(os.environ["SM_HPS"]), sys.argv[1:], flush=True)
    pathlib.Path(os.environ["SM_MODEL_DIR"], "model.txt").write_text("weights")
"""
BAD = """
    import os, pathlib, sys
    pathlib.Path(os.environ["SM_OUTPUT_DIR"], "failure").write_text("ValueError: no rows")
    sys.exit(2)
"""


def test_run_follows_a_job_to_completion(server: DockyardServer, tmp_path: Path) -> None:
    directory = code_dir(tmp_path, "good", GOOD)
    (directory / "__pycache__").mkdir()
    (directory / "__pycache__" / "junk.pyc").write_bytes(b"x")
    result = cli(
        server,
        "jobs",
        "run",
        str(directory),
        "--entry-point",
        "train.py",
        "--name",
        "cli-good",
        "--hyperparameter",
        "lr=0.5",
        "--hyperparameter",
        "epochs=3",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "Starting — " in out
    assert "Training —" in out and "Completed" in out
    artifacts = "s3://dockyard-jobs/output/cli-good/output/model.tar.gz"
    assert artifacts in out
    model = server.data_dir / "s3" / artifacts.removeprefix("s3://")
    with tarfile.open(model) as archive:
        member = archive.extractfile("model.txt")
        assert member is not None and member.read() == b"weights"
    source = server.data_dir / "s3" / "dockyard-jobs" / "code" / "cli-good" / "source.tar.gz"
    with tarfile.open(source) as archive:
        assert archive.getnames() == ["train.py"]
    if not logs_unavailable(server):
        line = next(x for x in out.splitlines() if x.startswith("hyperparameters:"))
        assert "'lr': 0.5" in line and "'--epochs', '3'" in line
    job = server.client().describe_training_job(TrainingJobName="cli-good")
    assert job["HyperParameters"] == {
        "lr": "0.5",
        "epochs": "3",
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"s3://dockyard-jobs/code/cli-good/source.tar.gz"',
    }


def test_run_as_another_account_uploads_to_its_own_bucket(
    server: DockyardServer, tmp_path: Path
) -> None:
    """The code goes up through the S3 API as the caller: `dockyard-jobs` belongs to the
    development account, so another account's code and output go to the SDK's default
    bucket of that account (it used to be written into the server's directories, in a
    bucket the job was then refused)."""
    account, (key_id, secret) = server.new_account("cli-other")
    keys = {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
    directory = code_dir(tmp_path, "theirs", GOOD)
    run = ("jobs", "run", str(directory), "--entry-point", "train.py")
    result = cli(server, *run, "--name", "cli-theirs", **keys)
    assert result.returncode == 0, result.stdout + result.stderr
    bucket = f"sagemaker-us-east-1-{account}"
    assert f"s3://{bucket}/code/cli-theirs/source.tar.gz" in result.stdout
    s3 = server.client("s3", key=(key_id, secret))
    names = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert "output/cli-theirs/output/model.tar.gz" in names
    refused = cli(
        server, *run, "--name", "cli-nowhere", "--output", "s3://no-such-bucket/out", **keys
    )
    assert refused.returncode == 1
    assert "aws s3 mb s3://no-such-bucket" in refused.stderr + refused.stdout


def test_run_reports_a_failure_then_ls_show_and_stop(
    server: DockyardServer, tmp_path: Path
) -> None:
    result = cli(
        server,
        "jobs",
        "run",
        str(code_dir(tmp_path, "bad", BAD)),
        "--entry-point",
        "train.py",
        "--name",
        "cli-bad",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Failed" in result.stdout and "ValueError: no rows" in result.stdout
    cli(
        server,
        "jobs",
        "run",
        str(code_dir(tmp_path, "fine", GOOD)),
        "--entry-point",
        "train.py",
        "--name",
        "cli-ls-good",
        check=True,
    )

    listed = cli(server, "jobs", "ls", "--name-contains", "cli-", check=True).stdout
    assert "cli-bad" in listed and "cli-ls-good" in listed
    assert listed.index("cli-ls-good") < listed.index("cli-bad"), "newest first"
    failed = cli(server, "jobs", "ls", "--status", "Failed", check=True).stdout
    assert "cli-bad" in failed and "cli-ls-good" not in failed
    newest = cli(server, "jobs", "ls", "--name-contains", "cli-", "--max", "1", check=True)
    assert newest.stdout.count("cli-") == 1

    shown = cli(server, "jobs", "show", "cli-bad", check=True).stdout
    assert "Failed / Failed" in shown and "ValueError: no rows" in shown
    assert "ml.m5.xlarge × 1" in shown and "sagemaker_program = train.py" in shown
    shown = cli(server, "jobs", "show", "cli-ls-good", check=True).stdout
    for step in ("Starting", "Downloading", "Training", "Uploading", "Completed"):
        assert f"│ {step} " in shown
    assert "Launching requested ML instances." in shown and "Training job completed" in shown

    stopped = cli(server, "jobs", "stop", "cli-ls-good")
    assert stopped.returncode == 1 and "ValidationException" in stopped.stderr
    missing = cli(server, "jobs", "show", "cli-nope")
    assert missing.returncode == 1 and "ResourceNotFound" in missing.stderr


def test_no_follow_then_stop(server: DockyardServer, tmp_path: Path) -> None:
    directory = code_dir(
        tmp_path, "sleepy", "import time\nprint('up', flush=True)\ntime.sleep(120)\n"
    )
    started = cli(
        server,
        "jobs",
        "run",
        str(directory),
        "--entry-point",
        "train.py",
        "--name",
        "cli-sleeper",
        "--no-follow",
        check=True,
    )
    assert "training-job/cli-sleeper" in started.stdout
    client = server.client()
    deadline = time.monotonic() + 60
    while client.describe_training_job(TrainingJobName="cli-sleeper")["SecondaryStatus"] != (
        "Training"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    stopped = cli(server, "jobs", "stop", "cli-sleeper", check=True).stdout
    assert "asked cli-sleeper to stop" in stopped
    assert wait_for(server, "cli-sleeper")["TrainingJobStatus"] == "Stopped"
    assert "Stopped / Stopped" in cli(server, "jobs", "show", "cli-sleeper", check=True).stdout


def logs_unavailable(server: DockyardServer) -> str | None:
    """Why the server cannot answer CloudWatch Logs calls, or None when it can."""
    try:
        server.client("logs").describe_log_streams(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="cli-"
        )
    except ClientError as exc:
        code = str(exc.response["Error"]["Code"])
        # NotImplementedException once the Logs service is routed but not handled;
        # UnknownOperationException while the server does not route Logs at all.
        if code in ("NotImplementedException", "UnknownOperationException"):
            return code
        raise
    return None


def test_logs(server: DockyardServer, tmp_path: Path) -> None:
    unavailable = logs_unavailable(server)
    if unavailable:
        pytest.skip(f"the server does not implement CloudWatch Logs yet ({unavailable})")
    code = """
        import os
        for i in range(3):
            print(f"line {i} from {os.environ['SM_CURRENT_HOST']}", flush=True)
    """
    cli(
        server,
        "jobs",
        "run",
        str(code_dir(tmp_path, "talky", code)),
        "--entry-point",
        "train.py",
        "--name",
        "cli-logs",
        "--instance-count",
        "2",
        check=True,
    )
    out = cli(server, "jobs", "logs", "cli-logs", check=True).stdout
    for host in ("algo-1", "algo-2"):
        for i in range(3):
            assert f"[{host}] line {i} from {host}" in out
    followed = cli(server, "jobs", "logs", "cli-logs", "--follow", check=True).stdout
    assert "[algo-2] line 2 from algo-2" in followed
    slow = (
        "import time\nfor i in range(4):\n    print(f'tick {i}', flush=True)\n    time.sleep(1)\n"
    )
    cli(
        server,
        "jobs",
        "run",
        str(code_dir(tmp_path, "slow", slow)),
        "--entry-point",
        "train.py",
        "--name",
        "cli-logs-slow",
        "--no-follow",
        check=True,
    )
    followed = cli(server, "jobs", "logs", "cli-logs-slow", "--follow", check=True).stdout
    assert [x for x in followed.splitlines() if x.startswith("tick")] == [
        f"tick {i}" for i in range(4)
    ]
    assert (
        server.client().describe_training_job(TrainingJobName="cli-logs-slow")["TrainingJobStatus"]
        == "Completed"
    )
    missing = cli(server, "jobs", "logs", "cli-no-such-job")
    assert missing.returncode == 1 and "ResourceNotFound" in missing.stderr


def test_default_name_and_packing(tmp_path: Path) -> None:
    now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert default_name(Path(tmp_path / "My_Model.v2"), now) == "my-model-v2-20250304-050607"
    long = default_name(Path(tmp_path / ("x" * 100)), now)
    assert len(long) == 63 and long.endswith("-20250304-050607")
    assert default_name(Path(tmp_path / "__"), now) == "job-20250304-050607"
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / ".git").mkdir()
    (source / ".git" / "HEAD").write_text("ref")
    (source / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"")
    (source / "pkg" / "util.py").write_text("")
    (source / "train.py").write_text("")
    pack(source, tmp_path / "out" / "source.tar.gz")
    with tarfile.open(tmp_path / "out" / "source.tar.gz") as archive:
        assert sorted(archive.getnames()) == ["pkg", "pkg/util.py", "train.py"]


def test_new_transitions_prints_each_message_once() -> None:
    seen: set[tuple[str, str]] = set()
    job = {"SecondaryStatusTransitions": [{"Status": "Starting", "StatusMessage": "a"}]}
    assert new_transitions(job, seen) == ["Starting — a"]
    assert new_transitions(job, seen) == []
    job["SecondaryStatusTransitions"][0]["StatusMessage"] = "b"
    job["SecondaryStatusTransitions"].append({"Status": "Training", "StatusMessage": "c"})
    assert new_transitions(job, seen) == ["Starting — b", "Training — c"]


class _NoLogs:
    def read(self) -> int:
        raise ClientError({"Error": {"Code": "NotImplementedException", "Message": "no"}}, "X")


def test_run_goes_on_without_logs_on_a_server_without_them() -> None:
    assert _read_quietly(_NoLogs()) is None  # type: ignore[arg-type]
    assert _read_quietly(None) is None
