"""A script job's requirements.txt, installed with uv before the job starts (SPEC §4.1).

Each instance gets a virtual environment of its own in its root that still sees the
interpreter's packages (`--system-site-packages`), so a job adds what it needs
without reinstalling what is there. On a warm pool the environment stays from job to
job and is installed into again only when the requirements differ (their hash is kept
beside it). uv's cache lives outside the job: in the data dir, shared by instances,
or, for a job that may leave a warm pool, in the pool's persistent cache (SPEC §5.5),
so a pool that must reinstall copies files instead of downloading them.
"""

from __future__ import annotations

import dataclasses
import hashlib
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


def _uv_cache(spec: JobSpec, layout: Layout) -> str:
    if layout.warm_pool_cache.is_dir():
        return str(layout.warm_pool_cache / ".dockyard" / "uv")
    return spec.uv_cache_dir or str(layout.root / "uv-cache")


def install_requirements(spec: JobSpec, layout: Layout) -> JobSpec:
    """Install the code's requirements.txt, if it has one; answer the spec to run with."""
    requirements = layout.code_dir / "requirements.txt"
    if not requirements.is_file():
        return spec
    venv = layout.venv
    python = venv / "bin" / "python"
    marker = venv / ".dockyard-requirements"
    # What was installed, for which interpreter: the same again needs no installing.
    wanted = hashlib.sha256(spec.python.encode() + b"\0" + requirements.read_bytes()).hexdigest()
    if python.exists() and marker.is_file() and marker.read_text() == wanted:
        return dataclasses.replace(spec, python=str(python))
    env = {**os.environ, "UV_CACHE_DIR": _uv_cache(spec, layout)}
    if python.exists() and not (marker.is_file() and _same_base(marker, spec)):
        shutil.rmtree(venv, ignore_errors=True)  # made for another interpreter
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
    marker.write_text(wanted)
    (venv / ".dockyard-base").write_text(spec.python)
    return dataclasses.replace(spec, python=str(python))


def _same_base(marker: Path, spec: JobSpec) -> bool:
    try:
        return (marker.parent / ".dockyard-base").read_text() == spec.python
    except OSError:
        return False
