"""Wake-ups from the instance agents: a state change reaches the control plane at once.

The agents never depend on the server (they outlive its restarts), so this is a hint,
not a channel: after each change of `state.json` an agent sends one datagram to the
server's unix socket `<data-dir>/control.sock` and carries on whether or not anyone
is listening. The server's listener answers each by nudging the reconcilers, which
read the state files as before; a wake-up lost (no server, a full buffer) only means
the change is seen on the next tick. The socket lives in the data directory (0700),
which a job's sandbox cannot see.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("dockyard.compute.wake")

SOCKET_NAME = "control.sock"


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir).resolve() / SOCKET_NAME


def notify(path: str | None) -> None:
    """Tell the control plane something changed; never fails, never blocks."""
    if not path:
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.sendto(b"!", path)


class Listener:
    """The server's end: calls `on_wake` (from its own thread) for each burst of wake-ups."""

    def __init__(self, path: Path, on_wake: Callable[[], None]) -> None:
        self.path = path
        self._on_wake = on_wake
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
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
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="dockyard-wake", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        sock.settimeout(0.5)  # to see close() without racing it for the socket
        while not self._stopping:
            try:
                sock.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            # Many agents may report at once: one nudge wakes one pass for all of them.
            # Drained without waiting (in timeout mode even MSG_DONTWAIT first waits
            # for the timeout: a wake-up took half a second).
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                while sock.recv(64):
                    pass
            sock.settimeout(0.5)
            try:
                self._on_wake()
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
