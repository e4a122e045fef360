"""The local backend: each instance is an agent process on this host, in its own root.

Agents run in their own sessions and talk to the control plane only through files in
their root (`job.json` in, `state.json` and `logs/` out, `stop` to ask them to stop),
so they outlive a server restart and a restarted server finds them by their roots.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


class LocalBackend:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir).resolve() / "instances"
        # Handles of agents this process started, so they are reaped rather than left
        # as zombies; agents from before a restart were reparented and need nothing.
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _root(self, job_key: str, host: str) -> Path:
        return self.root / job_key / host

    def launch(self, job_key: str, host_specs: list[dict[str, Any]]) -> list[str]:
        handles = []
        for spec in host_specs:
            root = self._root(job_key, spec["host"])
            handles.append(str(root))
            if (root / "agent.pid").exists() or str(root) in self._children:
                continue  # launched already (e.g. before a restart): never twice
            root.mkdir(parents=True, exist_ok=True)
            # The spec may carry S3 credentials: readable by its owner only.
            tmp = root / "job.json.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(spec, indent=2))
            os.replace(tmp, root / "job.json")
            with open(root / "agent.log", "ab") as log:
                self._children[str(root)] = subprocess.Popen(
                    [sys.executable, "-m", "dockyard.compute.agent", str(root)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=root,
                )
        return handles

    def poll(self, handle: str) -> dict[str, Any]:
        child = self._children.get(handle)
        if child is not None and child.poll() is not None:
            del self._children[handle]
        try:
            return dict(json.loads((Path(handle) / "state.json").read_text()))
        except (FileNotFoundError, ValueError):
            return {"phase": "launching"}

    def stop(self, handle: str) -> None:
        (Path(handle) / "stop").touch()

    def alive(self, handle: str) -> bool:
        child = self._children.get(handle)
        if child is not None:
            return child.poll() is None
        try:
            pid = int((Path(handle) / "agent.pid").read_text())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        return True
