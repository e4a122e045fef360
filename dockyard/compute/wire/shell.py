"""The shell wire: interactive sessions on a cluster's node, as frames on a unix socket.

The agent listens on `exec/shell.sock` in the node's root (mode 0600 in a 0700
directory: root's, and no sandbox sees the root). Each connection is a session:
    server -> agent: one JSON line {"rows", "cols", "term", "editing"}, then frames
    agent -> server: frames
A frame is a type byte and a 4-byte big-endian length, then that many bytes (see the
kinds below). The agent's side is `agent.shell.NodeShells`.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from pathlib import Path

SOCKET_NAME = "shell.sock"


HEADER = struct.Struct("!cI")


MAX_FRAME = 1024 * 1024


DEFAULT_TERM = "xterm-256color"


_TERM = re.compile(r"^[A-Za-z0-9._+-]{1,64}$")


# The exit code of a session the node's stop ended (128 + SIGKILL), as exec's.
STOPPED = 137


DATA = b"d"


WINDOW = b"w"


EOF = b"e"


EXIT = b"x"


ERROR = b"!"


def socket_path(root: Path) -> Path:
    return root / "exec" / SOCKET_NAME


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def short_address(path: Path) -> tuple[str, int]:
    """A unix socket's address short enough for sun_path (108 bytes) however deep the
    node's root is: through an O_PATH descriptor of its directory, which the caller
    closes once it has bound or connected."""
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{directory}/{path.name}", directory


def connect(root: Path) -> socket.socket:
    """The server's end of a new session (blocking); OSError if the agent is not there."""
    address, directory = short_address(socket_path(root))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(directory)
    return sock


def valid_term(term: object) -> bool:
    """Whether `term` may be a shell's TERM (a terminal type's name, nothing else)."""
    return isinstance(term, str) and bool(_TERM.match(term))
