"""The README's examples work as written against a server laid out like `make run`'s."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import REPO, DockyardServer

README = (REPO / "README.md").read_text()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, DockyardServer]]:
    """A directory whose ./.dockyard is a running server's data dir, as after `make run`."""
    base = tmp_path_factory.mktemp("readme")
    server = DockyardServer(base / ".dockyard").start()
    yield base, server
    server.stop()


def on_port(text: str, server: DockyardServer) -> str:
    return text.replace("127.0.0.1:8080", f"127.0.0.1:{server.port}")


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ")[0]
    assert "make run" in head and "make test" in head
    assert head.index("make run") < head.index("```python")


def test_boto3_example(workdir: tuple[Path, DockyardServer]) -> None:
    base, server = workdir
    code = re.search(r"```python\n(.*?)```", README, re.S)
    assert code is not None
    assert len(code.group(1).strip().splitlines()) <= 6
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    result = subprocess.run(
        [sys.executable, "-c", on_port(code.group(1), server)],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[]")


def test_aws_cli_example(workdir: tuple[Path, DockyardServer]) -> None:
    base, server = workdir
    block = re.search(r"```sh\nexport AWS_SHARED.*?```", README, re.S)
    assert block is not None
    script = on_port(block.group(0).strip("`").removeprefix("sh\n"), server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # The aws CLI the project installs (awscli is a test dependency), as after `make test`.
    env["PATH"] = str(Path(sys.executable).parent) + ":" + env["PATH"]
    result = subprocess.run(
        ["bash", "-c", script], cwd=base, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert '"TrainingJobSummaries": []' in result.stdout


def test_warm_pool_example(workdir: tuple[Path, DockyardServer]) -> None:
    base, server = workdir
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    code = next(block for block in blocks if "KeepAlivePeriodInSeconds" in block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    result = subprocess.run(
        [sys.executable, "-c", on_port(code, server)],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "'Status': 'Reused'" in result.stdout and "'ReusedByJob': 'warm-2'" in result.stdout
    # A copier gets Completed jobs (the default bucket exists on a new server).
    client = server.client()
    for name in ("warm-1", "warm-2"):
        job = client.describe_training_job(TrainingJobName=name)
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
