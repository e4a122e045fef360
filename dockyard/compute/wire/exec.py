"""The exec wire: commands the server hands a cluster's node, and their results.

The protocol is files in the node's root (the agent never talks to the server):

In:  `exec/in/<id>.json`, written atomically by the server: {"argv": [...],
     "stdin": base64, "timeout": seconds, "cwd": a directory of the node or null}.
Out: `exec/out/<id>.json`, written atomically by the agent: {"exit_code": n,
     "output": base64 of stdout and stderr as they interleaved, "truncated": bool}.

`write_request`/`read_result`/`cancel` are the server's side (through the backend);
the agent's side is `agent.exec.NodeExec`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.compute.wire.private_files import write_private

MAX_STDIN_BYTES = 1024 * 1024


MAX_TIMEOUT_SECONDS = 3600.0


ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")


def requests_dir(root: Path) -> Path:
    return root / "exec" / "in"


def results_dir(root: Path) -> Path:
    return root / "exec" / "out"


@dataclass
class ExecRequest:
    argv: list[str]
    stdin: bytes = b""
    timeout: float = 300.0
    cwd: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "argv": self.argv,
                "stdin": base64.b64encode(self.stdin).decode(),
                "timeout": self.timeout,
                "cwd": self.cwd,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ExecRequest:
        data = json.loads(text)
        argv = data.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        stdin = base64.b64decode(str(data.get("stdin") or ""), validate=True)
        timeout = float(data.get("timeout") or 300.0)
        cwd = data.get("cwd")
        return cls(
            argv=argv,
            stdin=stdin[:MAX_STDIN_BYTES],
            timeout=min(max(timeout, 1.0), MAX_TIMEOUT_SECONDS),
            cwd=cwd if isinstance(cwd, str) and cwd.startswith("/") else None,
        )


def write_request(root: Path, exec_id: str, request: ExecRequest) -> None:
    if not ID_PATTERN.match(exec_id):
        raise ValueError(f"not an exec id: {exec_id!r}")
    directory = requests_dir(root)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(directory / f"{exec_id}.json", request.to_json())


def read_result(root: Path, exec_id: str) -> dict[str, Any] | None:
    """The command's result once it has one (its file is removed), else None."""
    if not ID_PATTERN.match(exec_id):
        raise ValueError(f"not an exec id: {exec_id!r}")
    path = results_dir(root) / f"{exec_id}.json"
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    path.unlink(missing_ok=True)
    try:
        output = base64.b64decode(str(data.get("output") or ""))
    except (binascii.Error, ValueError):
        output = b""
    return {
        "exit_code": int(data.get("exit_code", 1)),
        "output": output,
        "truncated": bool(data.get("truncated")),
    }


def cancel(root: Path, exec_id: str) -> None:
    """A request the caller gave up on before the agent took it."""
    if ID_PATTERN.match(exec_id):
        (requests_dir(root) / f"{exec_id}.json").unlink(missing_ok=True)
