"""`dockyard env`: with only its exports, boto3 and the aws CLI reach every service
dockyard answers, no endpoint_url in sight."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DockyardServer, run_cli


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    running = DockyardServer(tmp_path_factory.mktemp("env") / "data").start()
    yield running
    running.stop()


def exported(server: DockyardServer) -> dict[str, str]:
    out = run_cli("env", "--endpoint-url", server.endpoint, data_dir=server.data_dir).stdout
    found = {}
    for line in out.splitlines():
        assert line.startswith("export "), line
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = shlex.split(value)[0]
    return found


def clean_env(server: DockyardServer) -> dict[str, str]:
    """This process's environment without any AWS setting, plus `dockyard env`'s."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
    base["PATH"] = f"{Path(sys.executable).parent}:{base['PATH']}"
    return {**base, **exported(server)}


def test_the_exports_name_the_files_it_wrote(server: DockyardServer) -> None:
    env = exported(server)
    assert Path(env["AWS_SHARED_CREDENTIALS_FILE"]) == (server.data_dir / "credentials").resolve()
    config = Path(env["AWS_CONFIG_FILE"]).read_text()
    for service in ("sagemaker", "s3", "sts", "iam", "cloudwatch_logs", "service_quotas"):
        assert f"{service} =\n    endpoint_url = {server.endpoint}" in config
    sdk = Path(env["SAGEMAKER_USER_CONFIG_OVERRIDE"]).read_text()
    assert "DefaultS3Bucket: dockyard-jobs" in sdk and "TelemetryOptOut: true" in sdk


def test_boto3_needs_no_endpoint(server: DockyardServer) -> None:
    code = textwrap.dedent(
        """
        import boto3
        print(boto3.client("sts").get_caller_identity()["Account"])
        print(boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"])
        print([b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]])
        print(boto3.client("iam").get_role(RoleName="demo")["Role"]["Arn"])
        print(len(boto3.client("service-quotas").list_services()["Services"]))
        print(boto3.client("logs").describe_log_streams(
            logGroupName="/aws/sagemaker/TrainingJobs")["logStreams"])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(server),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    account, jobs, buckets, role, services, streams = result.stdout.splitlines()
    assert jobs == "[]" and "dockyard-jobs" in buckets and streams == "[]"
    assert role == f"arn:aws:iam::{account}:role/demo" and int(services) >= 1


def test_the_aws_cli_needs_no_endpoint(server: DockyardServer) -> None:
    env = clean_env(server)
    for command in (
        ["aws", "sts", "get-caller-identity"],
        ["aws", "sagemaker", "list-training-jobs"],
        ["aws", "s3", "ls"],
    ):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, (command, result.stderr)
    assert "dockyard-jobs" in result.stdout


def test_without_a_server_it_says_so(tmp_path: Path) -> None:
    result = run_cli("env", data_dir=tmp_path / "nothing", check=False)
    assert result.returncode == 1 and "start the server" in result.stderr
