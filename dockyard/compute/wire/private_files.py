"""Files the control plane and the agents hand each other, written whole and private."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Replace `path` atomically - a reader sees the old file or the new one - readable by
    its owner only (a spec may carry S3 credentials). The temporary name is this process's
    and thread's own: the backend and an agent both write some files (agent.pid), and an
    agent writes from several threads."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
