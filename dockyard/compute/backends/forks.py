"""The local backend's handle on the agents' fork server (`agent.fork_server`): an
instance's agent for the price of a fork. The protocol is in `wire.forks`."""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import weakref
from pathlib import Path
from typing import IO

from dockyard.clock import monotonic
from dockyard.compute.wire.forks import FIRST_REPLY_SECONDS, REPLY_SECONDS, command


class ForkServerError(Exception):
    """The fork server did not start an agent; the caller starts one itself."""


class AgentForks:
    """The backend's handle on its fork server: started on first use, started again if
    it died. Safe to use from several threads."""

    def __init__(self, log: Path, *, end_with_owner: bool = False) -> None:
        self.log = log
        # Whether its agents end with this process (see the module's docstring); read
        # at each spawn.
        self.end_with_owner = end_with_owner
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._answered = False  # whether the current fork server has answered once

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def spawn(self, root: Path) -> int:
        """Start the agent of the instance at `root`; answer its PID.

        Asked again of a new fork server if the first fails to answer - which may have
        forked the agent before it failed: a second agent of an instance waits for the
        first to exit and never runs its job again (`Agent.run` holds agent.lock)."""
        with self._lock:
            for attempt in range(2):
                process = self._running()
                try:
                    return self._ask(process, root)
                except ForkServerError:
                    self._stop()  # a fork server that fails once is not asked again
                    if attempt:
                        raise
            raise AssertionError("unreachable")

    def close(self) -> None:
        """Let the fork server go (its agents run on)."""
        with self._lock:
            self._stop()

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        self._stop()
        try:
            with open(self.log, "ab") as log:
                self._process = subprocess.Popen(
                    command(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    start_new_session=True,  # nothing aimed at the server's group hits it
                    cwd="/",
                )
        except OSError as exc:
            raise ForkServerError(f"could not start the agents' fork server: {exc}") from exc
        # Once nothing here refers to it, its stdin closes and it exits. (A Popen left
        # running is kept by the subprocess module, and with it its pipes.)
        weakref.finalize(self, _close, self._process.stdin, self._process.stdout)
        self._answered = False
        return self._process

    def _ask(self, process: subprocess.Popen[bytes], root: Path) -> int:
        assert process.stdin is not None and process.stdout is not None
        try:
            request = {"root": str(root), "end_with_owner": self.end_with_owner}
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
        except OSError as exc:
            raise ForkServerError(f"the agents' fork server is gone: {exc}") from exc
        wait = REPLY_SECONDS if self._answered else FIRST_REPLY_SECONDS
        line = _read_line(process.stdout.fileno(), wait)
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ForkServerError(f"the agents' fork server answered {line[:200]!r}") from exc
        if not isinstance(reply, dict) or not isinstance(reply.get("pid"), int):
            raise ForkServerError(f"the agents' fork server failed: {reply!r}")
        self._answered = True
        return int(reply["pid"])

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        _close(process.stdin, process.stdout)
        # Its stdin closed, it exits by itself; one that hangs is not waited for.
        if process.poll() is None:
            process.kill()
        process.wait()


def _close(*streams: IO[bytes] | None) -> None:
    for stream in streams:
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _read_line(fd: int, timeout: float) -> bytes:
    """One line from the fork server, read unbuffered so nothing is left behind."""
    data = b""
    give_up = monotonic() + timeout
    while not data.endswith(b"\n"):
        left = give_up - monotonic()
        if left <= 0:
            raise ForkServerError("the agents' fork server did not answer")
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            raise ForkServerError("the agents' fork server exited")
        data += chunk
    return data
