"""The server's end of the agents' wake-ups (`wire.wake`): a listener on this server
process's socket that nudges the reconcilers."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from dockyard.compute.wire.wake import MAX_MESSAGE, sweep_sockets

log = logging.getLogger("dockyard.compute.wake")


class Listener:
    """The server's end: calls `on_wake` (from its own thread) for each burst of wake-ups,
    with the keys they named."""

    def __init__(self, path: Path, on_wake: Callable[[set[str]], None]) -> None:
        self.path = path
        self._on_wake = on_wake
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            sweep_sockets(self.path.parent)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a socket a previous server left behind
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(str(self.path))
        except OSError as exc:  # e.g. a data dir path longer than a socket's 108 bytes
            sock.close()
            log.warning(
                "no wake-ups from the agents (%s): %s; the tick still runs", self.path, exc
            )
            return
        os.chmod(self.path, 0o600)
        with contextlib.suppress(OSError):  # room for a burst from many agents at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="dockyard-wake", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        sock.settimeout(0.5)  # to see close() without racing it for the socket
        while not self._stopping:
            try:
                keys = {sock.recv(MAX_MESSAGE)}
            except TimeoutError:
                continue
            except OSError:
                return
            # Many agents may report at once: one nudge wakes one pass for all of them.
            # Drained without waiting (in timeout mode even MSG_DONTWAIT first waits
            # for the timeout: a wake-up took half a second).
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                while True:
                    keys.add(sock.recv(MAX_MESSAGE))
            sock.settimeout(0.5)
            try:
                self._on_wake({key.decode(errors="replace") for key in keys} - {"!"})
            except Exception:  # a wake-up must never end the listener
                log.exception("handling an agent's wake-up failed")

    def close(self) -> None:
        self._stopping = True
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
