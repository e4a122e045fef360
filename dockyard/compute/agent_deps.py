"""A script job's requirements.txt, installed with uv before the job starts (SPEC §4.1).

Each instance gets a virtual environment of its own in its root that still sees the
interpreter's packages (`--system-site-packages`), so a job adds what it needs
without reinstalling what is there. uv's cache lives outside the instance (in the
data dir, or a warm pool's cache later), so a second install of the same
requirements copies files instead of downloading them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dockyard.compute.agent_data import ClientError
from dockyard.compute.agent_env import Layout
from dockyard.compute.agent_spec import JobSpec

INSTALL_TIMEOUT_SECONDS = 1800


def _uv() -> str:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else (shutil.which("uv") or "uv")


def _run(command: list[str], env: dict[str, str]) -> None:
    try:
        result = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClientError(f"installing requirements.txt failed: {exc}") from exc
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise ClientError("installing requirements.txt failed: " + " | ".join(tail))


def install_requirements(spec: JobSpec, layout: Layout) -> JobSpec:
    """Install the code's requirements.txt, if it has one; answer the spec to run with."""
    requirements = layout.code_dir / "requirements.txt"
    if not requirements.is_file():
        return spec
    venv = layout.root / "venv"
    python = venv / "bin" / "python"
    env = {**os.environ, "UV_CACHE_DIR": spec.uv_cache_dir or str(layout.root / "uv-cache")}
    if not python.exists():
        _run(
            [
                _uv(),
                "venv",
                "--quiet",
                "--system-site-packages",
                "--python",
                spec.python,
                str(venv),
            ],
            env,
        )
    _run(
        [_uv(), "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)], env
    )
    return dataclasses.replace(spec, python=str(python))
