"""A script job's requirements.txt, installed with uv before the job starts (spec §4.1).

Each instance gets a virtual environment of its own in its root that still sees the
interpreter's packages (`--system-site-packages`), so a job adds what it needs
without reinstalling what is there. Installing runs the job's own code (a
requirement may be an sdist whose build runs anything), so it runs in the instance's
sandbox, as the job will, with only the venv and uv's cache writable; the job then sees
the venv read-only at /opt/venv. On a warm pool the environment stays from job to job
and is installed into again only when the requirements differ (their hash is kept
beside it, where the install cannot write). uv's cache is the account's own, shared
by its instances, or, for a job that may leave a warm pool, in the pool's persistent
cache (spec §5.5), so a pool that must reinstall copies files instead of downloading.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from dockyard.compute.agent.confinement import Confinement, uv_binary
from dockyard.compute.agent.data import ClientError
from dockyard.compute.agent.files import read_regular
from dockyard.compute.sandbox.bwrap import UV, UV_CACHE, VENV, make_owned_dir
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.spec import JobSpec

INSTALL_TIMEOUT_SECONDS = 1800
MAX_REQUIREMENTS_BYTES = 1024 * 1024


def _check(result_code: int, output: str) -> None:
    if result_code != 0:
        tail = output.strip().splitlines()[-5:]
        raise ClientError("installing requirements.txt failed: " + " | ".join(tail))


def _uv_cache(spec: JobSpec, layout: Layout, confinement: Confinement) -> tuple[str, Path | None]:
    """(UV_CACHE_DIR as the install sees it, a host directory to bind there)."""
    if layout.warm_pool_cache.is_dir():
        return confinement.inside(layout.warm_pool_cache / ".dockyard" / "uv"), None
    if spec.uv_cache_dir:
        shared = Path(spec.uv_cache_dir)
        if confinement.sandbox is None:
            return str(shared), None
        make_owned_dir(shared, confinement.sandbox.uid)
        return UV_CACHE, shared
    return "/tmp/uv-cache", None  # for this install only


def _marker(layout: Layout) -> dict[str, str]:
    try:
        data = json.loads(layout.venv_marker.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def install_requirements(spec: JobSpec, layout: Layout, confinement: Confinement) -> JobSpec:
    """Install the code's requirements.txt, if it has one; answer the spec to run with."""
    requirements = read_regular(
        layout.opt_ml, layout.code_dir / "requirements.txt", MAX_REQUIREMENTS_BYTES
    )
    if requirements is None:
        return spec
    venv = layout.venv
    python = venv / "bin" / "python"
    # What was installed, for which interpreter: the same again needs no installing.
    wanted = hashlib.sha256(spec.python.encode() + b"\0" + requirements).hexdigest()
    marker = _marker(layout)
    if marker.get("requirements") == wanted and (python.exists() or python.is_symlink()):
        return dataclasses.replace(spec, python=str(python))
    if marker.get("base") != spec.python or not (python.exists() or python.is_symlink()):
        # Made for another interpreter, or never: a new one. (rmtree removes a tree by
        # descriptor, never through a link the install may have left.)
        shutil.rmtree(venv, ignore_errors=True)
    layout.venv_marker.unlink(missing_ok=True)
    uid = confinement.uid
    if uid is not None:
        make_owned_dir(venv, uid)
    cache, shared = _uv_cache(spec, layout, confinement)
    inside_venv = VENV if confinement.sandbox else str(venv)
    uv = UV if confinement.sandbox else uv_binary()
    env = {
        **confinement.base_env(spec.python),
        "UV_CACHE_DIR": cache,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
        # The host's trust store (bound read-only), so a TLS-inspecting proxy the host
        # trusts is trusted here too, with no variable of the server's passed in.
        "UV_SYSTEM_CERTS": "1",
    }
    if not (python.exists() or python.is_symlink()):
        result = confinement.run(
            [
                uv,
                "venv",
                "--quiet",
                "--system-site-packages",
                "--python",
                spec.python,
                inside_venv,
            ],
            spec.python,
            env,
            INSTALL_TIMEOUT_SECONDS,
            uv_cache=shared,
        )
        _check(result.code, result.output)
    code_dir = confinement.inside(layout.code_dir)
    result = confinement.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            f"{inside_venv}/bin/python",
            "-r",
            f"{code_dir}/requirements.txt",
        ],
        spec.python,
        env,
        INSTALL_TIMEOUT_SECONDS,
        uv_cache=shared,
    )
    _check(result.code, result.output)
    tmp = layout.venv_marker.with_name(".venv.json.tmp")
    tmp.write_text(json.dumps({"requirements": wanted, "base": spec.python}))
    os.replace(tmp, layout.venv_marker)
    return dataclasses.replace(spec, python=str(python))
