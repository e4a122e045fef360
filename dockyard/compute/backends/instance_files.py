"""What instances leave on disk, read by job key and host: their logs, latest metrics
and the spec they were launched with (`<root>/<job key>/<host>/`, `agent.env.Layout`).

The local backend reads its instances' own files through this; the Ray backend keeps
the files of instances whose actors have ended (shipped from their nodes) in a root of
the server's and reads them the same way.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.log_format import RECORD, LogReader, index_path, read_metrics
from dockyard.compute.wire.spec import JobSpec
from dockyard.domain.metrics import Latest

_HOST = re.compile(r"algo-[1-9][0-9]*")
# Where removed instances' files wait to be deleted (no job key starts with a dot).
PURGING = ".purging"


def _whole(path: Path, data: bytes) -> bytes:
    """`data` up to its last whole index record, or log line."""
    if path.suffix == ".idx":
        return data[: len(data) - len(data) % RECORD.size]
    return data[: data.rfind(b"\n") + 1]


class InstanceFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _root(self, job_key: str, host: str) -> Path:
        return self.root / job_key / host

    def _kept(self, job_key: str, host: str) -> list[Path]:
        """The files that say what an instance did, for shipping elsewhere."""
        layout = Layout(self._root(job_key, host))
        return [
            # The index before the log: read in this order, every event it indexes
            # is in the log read after it.
            index_path(layout.log_file),
            layout.log_file,
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

    def launched_spec(self, job_key: str, host: str) -> JobSpec | None:
        try:
            return JobSpec.from_json(Layout(self._root(job_key, host)).job_file.read_bytes())
        except (OSError, ValueError, TypeError):
            return None

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
        """Keep files `pack` made, each whole."""
        for name, data in files.items():
            target = self._inside(job_key, host, name)
            if target is not None:
                temporary = target.with_name(f".{target.name}.tmp")
                temporary.write_bytes(data)
                os.replace(temporary, target)

    def _inside(self, job_key: str, host: str, name: str) -> Path | None:
        """Where file `name` of the instance goes; None for a name leading out of it."""
        base = self._root(job_key, host).resolve()
        target = (base / name).resolve()
        if base not in target.parents:
            return None
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return target

    # -- shipping a running instance's files as they grow ------------------------------

    def _growing(self, job_key: str, host: str) -> list[Path]:
        """Files only ever appended to (the log and its index), index first."""
        return self._kept(job_key, host)[:2]

    def sizes(self, job_key: str, host: str) -> dict[str, int]:
        """How much of each growing file is here: where the next increment starts."""
        base = self._root(job_key, host)
        found = {}
        for path in self._growing(job_key, host):
            try:
                found[str(path.relative_to(base))] = path.stat().st_size
            except OSError:
                found[str(path.relative_to(base))] = 0
        return found

    def since(
        self, job_key: str, host: str, sizes: dict[str, int]
    ) -> dict[str, tuple[int | None, bytes]]:
        """What the instance wrote after `sizes` (another copy's `sizes`): each growing
        file from that offset up to its last whole line or record - a half-written one
        is never shipped, as an agent that restarts drops it - and the metrics and spec
        whole (offset None). No state: a running instance's state is asked for, not
        shipped."""
        base = self._root(job_key, host)
        parts: dict[str, tuple[int | None, bytes]] = {}
        for path in self._kept(job_key, host)[:4]:
            name = str(path.relative_to(base))
            try:
                with open(path, "rb") as file:
                    if name in sizes:
                        start = min(sizes[name], os.fstat(file.fileno()).st_size)
                        file.seek(start)
                        parts[name] = (start, _whole(path, file.read()))
                    else:
                        parts[name] = (None, file.read())
            except OSError:
                continue
        return parts

    def extend(self, job_key: str, host: str, parts: dict[str, tuple[int | None, bytes]]) -> None:
        """Keep an increment `since` made: growing files written at the offset it was
        read from (so a repeated increment changes nothing), the rest whole."""
        for name, (start, data) in parts.items():
            if start is None:
                self.unpack(job_key, host, {name: data})
                continue
            target = self._inside(job_key, host, name)
            if target is None:
                continue
            with open(target, "ab") as file:  # made if missing; writes go to its end
                file.truncate(start)
                file.write(data)

    def set_state_aside(self, job_key: str, host: str) -> None:
        """A new attempt begins: the last one's end state is not its state."""
        state = Layout(self._root(job_key, host)).state_file
        if state.exists():
            os.replace(state, state.with_name("state.json.previous"))

    def remove(self, job_key: str, held: Callable[[Path], bool] = lambda _root: False) -> bool:
        """Delete everything of `job_key`'s instances, unless one of them is `held` (an
        agent still runs there, and so may use what its instances share: their network);
        True once nothing is left under the job's name. The files are moved aside at
        once and deleted by a thread of their own (a tree a crashed agent left can hold
        a million files: no caller waits for them), by descriptor: a link the job left
        goes as a link."""
        top = self.root / job_key
        if top.is_symlink():
            top.unlink()
        if not top.is_dir():
            return True
        if any([held(entry) for entry in top.iterdir()]):
            return False
        aside = self.root / PURGING / f"{job_key}-{uuid.uuid4().hex[:8]}"
        aside.parent.mkdir(mode=0o700, exist_ok=True)
        os.replace(top, aside)
        self.sweep_purged()
        return True

    def sweep_purged(self) -> None:
        """Delete what `remove` moved aside (also what a restart interrupted)."""
        directory = self.root / PURGING
        if not directory.is_dir():
            return
        threading.Thread(
            target=shutil.rmtree, args=(directory,), kwargs={"ignore_errors": True}, daemon=True
        ).start()

    def state(self, job_key: str, host: str) -> dict[str, Any] | None:
        """The state the instance last reported, None if it left none here."""
        try:
            state = json.loads(Layout(self._root(job_key, host)).state_file.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None
