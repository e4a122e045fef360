"""Wake-ups from the instance agents: a state change reaches the control plane at once.

The agents never depend on the server (they outlive its restarts), so this is a hint,
not a channel: after each change of `state.json` an agent sends one datagram to each
server's unix socket in `<data-dir>/wake/` (one per server process: servers sharing a
data dir and a database each hear every agent) and carries on whether or not anyone
is listening. The datagram names the job whose instance changed (its instance key), so
a pass looks at that job rather than at every running one. The server's listener
answers each burst by nudging the reconcilers, which read the state files as before; a
wake-up lost (no server, a full buffer) only means the change is seen at the job's next
periodic look. The sockets live in the data directory (0700),
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

DIRECTORY = "wake"
SUFFIX = ".sock"


def directory(data_dir: Path) -> Path:
    """Where the servers of a data dir listen: what an agent is told to notify."""
    return Path(data_dir).resolve() / DIRECTORY


def socket_path(data_dir: Path) -> Path:
    """This server process's socket."""
    return directory(data_dir) / f"{os.getpid()}{SUFFIX}"


# An instance key is far shorter; longer datagrams are cut to this.
MAX_MESSAGE = 512


def notify(path: str | None, key: str = "") -> None:
    """Tell the control plane something of job `key` changed; never fails, never blocks.

    `path` is the data dir's wake directory (every server listening there hears it) or
    one socket."""
    if not path:
        return
    try:
        targets = [os.path.join(path, name) for name in os.listdir(path)]
    except NotADirectoryError:
        targets = [path]
    except OSError:
        return
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for target in targets:
            with contextlib.suppress(OSError):
                sock.sendto(key.encode()[:MAX_MESSAGE] or b"!", target)


def sweep_sockets(folder: Path, prefix: str = "") -> None:
    """Remove the sockets `<prefix><pid>.sock` of server processes that are gone (killed,
    not closed)."""
    for entry in folder.glob(f"{prefix}*{SUFFIX}"):
        pid = entry.name.removeprefix(prefix).removesuffix(SUFFIX)
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            entry.unlink(missing_ok=True)
        except PermissionError:
            pass


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
