"""`dockyard clusters shell`'s client: an interactive shell on a node, through the
server's WebSocket (`/_dockyard/clusters/shell`), as `aws ssm start-session` is.

On a terminal, the local terminal is put in raw mode (every key goes to the node's
shell, Ctrl-C included) and restored on the way out, and its size follows SIGWINCH.
Otherwise stdin is streamed as it comes, and its end types the shell's EOF character.
The CLI exits with the shell's exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlencode

from dockyard.cli.client import signed_headers
from dockyard.cli.common import err_console, fail

SHELL_PATH = "/_dockyard/clusters/shell"
DEFAULT_TERM = "xterm-256color"


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(size.lines, 1), max(size.columns, 1)


@contextlib.contextmanager
def _raw(fd: int, interactive: bool) -> Iterator[None]:
    if not interactive:
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run_shell(endpoint_url: str, data_dir: Path, region: str, cluster: str, node: str) -> int:
    """Run the session; answer the shell's exit code."""
    from websockets.exceptions import InvalidHandshake, InvalidStatus
    from websockets.sync.client import connect

    stdin = sys.stdin.fileno()
    interactive = os.isatty(stdin)
    rows, cols = _size(stdin) if interactive else (24, 80)
    term = os.environ.get("TERM") or DEFAULT_TERM
    query = urlencode(
        {
            "ClusterName": cluster,
            "NodeId": node,
            "Rows": rows,
            "Cols": cols,
            "Term": term,
            "LineEditing": "true" if interactive else "false",
        }
    )
    base = endpoint_url.rstrip("/")
    headers = signed_headers(data_dir, region, "GET", f"{base}{SHELL_PATH}?{query}")
    url = "ws" + base.removeprefix("http") + f"{SHELL_PATH}?{query}"
    try:
        connection = connect(url, additional_headers=headers, open_timeout=120, max_size=None)
    except InvalidStatus as exc:
        raise fail(_refusal(exc.response.status_code, exc.response.body)) from exc
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        raise fail(f"cannot reach dockyard at {endpoint_url}: {exc}") from exc
    with connection:
        outcome = _session(connection, stdin, interactive)
    if "ExitCode" in outcome:
        return int(outcome["ExitCode"])
    if "__type" in outcome:
        raise fail(f"{outcome['__type']}: {outcome.get('message')}")
    reason = connection.close_reason or "the connection closed"
    err_console.print(f"dockyard: the session ended: {reason}", markup=False)
    return 255


def _session(connection: Any, stdin: int, interactive: bool) -> dict[str, Any]:
    """Relay the terminal until the server closes; answer its last text message."""
    from websockets.exceptions import ConnectionClosed

    # SIGWINCH wakes the input thread, which sends the new size (one sender at a time).
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    done = threading.Event()

    def on_resize(_signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_write, b"w")

    def pump_input() -> None:
        reading = True
        with contextlib.suppress(ConnectionClosed, OSError):
            while not done.is_set():
                watched = [wake_read, stdin] if reading else [wake_read]
                readable, _, _ = select.select(watched, [], [], 0.5)
                if wake_read in readable:
                    os.read(wake_read, 64)
                    new_rows, new_cols = _size(stdin)
                    connection.send(json.dumps({"Rows": new_rows, "Cols": new_cols}))
                if stdin in readable:
                    data = os.read(stdin, 65536)
                    if data:
                        connection.send(data)
                    else:
                        connection.send(json.dumps({"Eof": True}))
                        reading = False

    previous = signal.signal(signal.SIGWINCH, on_resize) if interactive else None
    outcome: dict[str, Any] = {}
    try:
        with _raw(stdin, interactive):
            sender = threading.Thread(target=pump_input, daemon=True)
            sender.start()
            with contextlib.suppress(ConnectionClosed):
                for message in connection:
                    if isinstance(message, bytes):
                        sys.stdout.buffer.write(message)
                        sys.stdout.buffer.flush()
                    else:
                        with contextlib.suppress(ValueError):
                            outcome = json.loads(message)
            done.set()
            sender.join(timeout=2)
    finally:
        if interactive:
            signal.signal(signal.SIGWINCH, previous)
        os.close(wake_read)
        os.close(wake_write)
    return outcome


def _refusal(status: int, body: bytes | bytearray | None) -> str:
    try:
        answer = json.loads(body or b"")
        return f"{answer['__type']}: {answer['message']}"
    except (ValueError, KeyError, TypeError):
        return f"the server refused the shell (HTTP {status})"
