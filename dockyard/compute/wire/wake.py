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
