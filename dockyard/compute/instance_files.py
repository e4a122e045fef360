"""What instances leave on disk, read by job key and host: their logs, latest metrics
and the spec they were launched with (`<root>/<job key>/<host>/`, `agent_env.Layout`).

The local backend reads its instances' own files through this; the Ray backend keeps
the files of instances whose actors have ended (shipped from their nodes) in a root of
the server's and reads them the same way.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Any

from dockyard.compute.agent_env import Layout
from dockyard.compute.log_index import LogReader, index_path, read_metrics
from dockyard.domain.metrics import Latest

_HOST = re.compile(r"algo-[1-9][0-9]*")


class InstanceFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _root(self, job_key: str, host: str) -> Path:
        return self.root / job_key / host

    def _kept(self, job_key: str, host: str) -> list[Path]:
        """The files that say what an instance did, for shipping elsewhere."""
        layout = Layout(self._root(job_key, host))
        return [
            layout.log_file,
            index_path(layout.log_file),
            layout.metrics_file,
            layout.job_file,
            layout.state_file,
        ]

    def logged_hosts(self, job_key: str) -> list[str]:
        try:
            hosts = [
                entry.name
                for entry in (self.root / job_key).iterdir()
                if _HOST.fullmatch(entry.name) and Layout(entry).log_file.is_file()
            ]
        except OSError:
            return []
        return sorted(hosts, key=lambda name: int(name.removeprefix("algo-")))

    def logged_instances(self, key_prefix: str) -> list[tuple[str, str]]:
        pattern = f"{glob.escape(key_prefix)}*/*/logs/output.jsonl"
        found = [
            (log.parent.parent.parent.name, log.parent.parent.name)
            for log in self.root.glob(pattern)
        ]
        return sorted(found)

    def open_log(self, job_key: str, host: str) -> LogReader:
        return LogReader(Layout(self._root(job_key, host)).log_file)

    def metrics(self, job_key: str, host: str) -> Latest:
        return read_metrics(Layout(self._root(job_key, host)).metrics_file)

    def launched_spec(self, job_key: str, host: str) -> dict[str, Any] | None:
        try:
            spec = json.loads(Layout(self._root(job_key, host)).job_file.read_text())
        except (OSError, ValueError):
            return None
        return spec if isinstance(spec, dict) else None

    def has(self, job_key: str, host: str) -> bool:
        return Layout(self._root(job_key, host)).job_file.is_file()

    # -- shipping an ended instance's files --------------------------------------------

    def pack(self, job_key: str, host: str) -> dict[str, bytes]:
        """The instance's kept files, by path relative to its directory."""
        base = self._root(job_key, host)
        packed = {}
        for path in self._kept(job_key, host):
            try:
                packed[str(path.relative_to(base))] = path.read_bytes()
            except OSError:
                continue
        return packed

    def unpack(self, job_key: str, host: str, files: dict[str, bytes]) -> None:
        """Keep files `pack` made; the spec last, so `has` says all are there."""
        base = self._root(job_key, host).resolve()
        names = sorted(files, key=lambda name: name == "job.json")
        for name in names:
            target = (base / name).resolve()
            if base not in target.parents:
                continue  # only the instance's own directory
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_bytes(files[name])
            os.replace(temporary, target)

    def set_state_aside(self, job_key: str, host: str) -> None:
        """A new attempt begins: the last one's end state is not its state."""
        state = Layout(self._root(job_key, host)).state_file
        if state.exists():
            os.replace(state, state.with_name("state.json.previous"))

    def state(self, job_key: str, host: str) -> dict[str, Any] | None:
        """The state the instance last reported, None if it left none here."""
        try:
            state = json.loads(Layout(self._root(job_key, host)).state_file.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None
