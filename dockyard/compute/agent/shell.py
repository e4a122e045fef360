"""Interactive shells on a cluster's node, with a terminal: `dockyard clusters shell`
(what `aws ssm start-session` is to a HyperPod node).

The agent listens on a unix socket in the node's root (`exec/shell.sock`, mode 0600 in
a 0700 directory: root's, and no sandbox sees the root). Each connection is a session:

    server -> agent: one JSON line {"rows", "cols", "term", "editing"}, then frames
    agent -> server: frames

A frame is a type byte and a 4-byte big-endian length, then that many bytes:
`d` terminal bytes (both ways), `w` a window size (server -> agent: rows, cols as two
big-endian uint16), `e` end of input (server -> agent: the terminal's EOF character is
typed), `x` the shell's exit code (agent -> server, big-endian int32, the last frame),
`!` why the session could not start (agent -> server, text, then `x`).

The shell runs in a fresh sandbox of the node's confinement, as a command of
`dockyard clusters exec` does (`agent.exec`). Its terminal is made inside the sandbox
(its own devpts, so `tty` names it): the sandbox's boot opens the pseudo-terminal, hands
the master to the agent over a socket pair made for this one session (SCM_RIGHTS), and
becomes the shell on the other side. The agent relays the master; nothing of the
agent's or the server's reaches the sandbox. The session ends when the shell exits,
when the server's end goes away (the sandbox is killed), or when the node stops.

`editing` false (a caller whose input is not a terminal: a script, a pipe) starts bash
without line editing: it reads whole lines with the terminal in canonical mode, so the
EOF character that ends such input is read as the end of input wherever it lands,
never as a byte that readline's raw mode took in while a command ran.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import socket
import struct
import termios
import threading
import uuid
from typing import Any

from dockyard.compute.agent.confinement import Confinement, ConfinementError
from dockyard.compute.agent.exec import BOOT_PRELUDE
from dockyard.compute.agent.outcome import exit_code
from dockyard.compute.agent.zygote import Zygote
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.shell import (
    DATA,
    DEFAULT_TERM,
    EOF,
    ERROR,
    EXIT,
    HEADER,
    MAX_FRAME,
    STOPPED,
    WINDOW,
    frame,
    short_address,
    socket_path,
    valid_term,
)
from dockyard.compute.wire.spec import JobSpec

MAX_SESSIONS = 8
MAX_HELLO = 4096
# Bytes typed ahead of the shell that the agent holds before it stops reading more.
MAX_PENDING = 1024 * 1024


# Runs in the sandbox (as the node's user, `python -S -c`): after the prelude's JSON
# line (`agent.exec.BOOT_PRELUDE`), opens a pseudo-terminal (the sandbox's own devpts),
# sends its master to the agent over the inherited socket, and becomes the shell,
# session leader on the slave.
SHELL_BOOT = (
    BOOT_PRELUDE
    + """\
import fcntl, socket, struct, termios
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", job["rows"], job["cols"], 0, 0))
channel = socket.socket(fileno=job["fd"])
socket.send_fds(channel, [b"m"], [master])
channel.close()
os.close(master)
try:
    os.setsid()
except OSError:
    pass  # already a session leader (bwrap --new-session), with no terminal
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
for fd in (0, 1, 2):
    os.dup2(slave, fd)
if slave > 2:
    os.close(slave)
for where in (job["cwd"], "/"):
    try:
        os.chdir(where)
        break
    except OSError:
        pass
shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
argv = [shell] if job["editing"] or shell != "/bin/bash" else [shell, "--noediting"]
try:
    os.execve(shell, argv, job["env"])
except OSError as exc:
    os.write(2, f"dockyard: cannot run {shell}: {exc.strerror}\\r\\n".encode())
    os._exit(127)
"""
)


class Refused(Exception):
    pass


class NodeShells:
    """The agent's side: accepts sessions on the node's socket, each in a thread."""

    def __init__(self, layout: Layout, confinement: Confinement, spec: JobSpec) -> None:
        self.confinement = confinement
        self.spec = spec
        path = socket_path(layout.root)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, directory = short_address(path)
        try:
            self._listener.bind(address)
        finally:
            os.close(directory)
        os.chmod(path, 0o600)
        self._listener.listen(16)
        self._path = path
        self._lock = threading.Lock()
        self._closing = False
        self._sessions: dict[str, threading.Thread] = {}
        self._zygotes: dict[str, Zygote] = {}
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def close(self) -> None:
        """The node is going: every shell is killed (its session says so)."""
        with self._lock:
            self._closing = True
            zygotes = list(self._zygotes.values())
            threads = list(self._sessions.values())
        self._acceptor.join(timeout=5)
        for zygote in zygotes:
            zygote.end()
        for thread in threads:
            thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._listener.close()
        self._path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._closing:
            readable, _, _ = select.select([self._listener], [], [], 0.5)
            if not readable or self._closing:
                continue
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            session_id = uuid.uuid4().hex
            with self._lock:
                for done in [k for k, t in self._sessions.items() if not t.is_alive()]:
                    del self._sessions[done]
                if len(self._sessions) >= MAX_SESSIONS:
                    _refuse(conn, f"the node has {MAX_SESSIONS} shells open already")
                    continue
                thread = threading.Thread(
                    target=self._session, args=(session_id, conn), daemon=True
                )
                self._sessions[session_id] = thread
            thread.start()

    def _session(self, session_id: str, conn: socket.socket) -> None:
        with conn:
            try:
                hello = _read_hello(conn)
                code = self._run(session_id, conn, hello)
            except Refused as exc:
                _refuse(conn, str(exc))
                return
            except (OSError, ConfinementError) as exc:
                _refuse(conn, f"the node's sandbox failed: {exc}")
                return
            with contextlib.suppress(OSError):
                conn.sendall(frame(EXIT, struct.pack("!i", code)))

    def _run(self, session_id: str, conn: socket.socket, hello: dict[str, Any]) -> int:
        confinement = self.confinement
        python = confinement.inside(self.spec.python)
        env = confinement.job_env(self.spec)
        env["TERM"] = hello["term"]
        env.setdefault("SHELL", "/bin/sh")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours:
            with self._lock:
                if self._closing:
                    raise Refused("the node is stopping")
            try:
                zygote = confinement.park(
                    python, exec_only=True, boot=SHELL_BOOT, pass_fds=(theirs.fileno(),)
                )
            finally:
                theirs_fd = theirs.fileno()
                theirs.close()
            with self._lock:
                self._zygotes[session_id] = zygote
            try:
                return self._serve(zygote, ours, conn, hello, env, theirs_fd)
            finally:
                with self._lock:
                    self._zygotes.pop(session_id, None)
                zygote.end()
                for stream in (zygote.process.stdin, zygote.process.stdout):
                    if stream is not None:
                        with contextlib.suppress(OSError):
                            stream.close()

    def _serve(
        self,
        zygote: Zygote,
        ours: socket.socket,
        conn: socket.socket,
        hello: dict[str, Any],
        env: dict[str, str],
        fd: int,
    ) -> int:
        process = zygote.process
        assert process.stdin is not None and process.stdout is not None
        cwd = env.get("HOME") or "/"
        job = {**hello, "env": env, "cwd": cwd, "fd": fd}
        with contextlib.suppress(OSError):
            process.stdin.write(json.dumps(job).encode() + b"\n")
            process.stdin.close()
        process.stdin = None
        ours.settimeout(30)
        try:
            _, fds, _, _ = socket.recv_fds(ours, 16, 1)
        except OSError:
            fds = []
        if not fds:
            said = b""
            with contextlib.suppress(OSError):
                said = (
                    os.read(process.stdout.fileno(), 4096) if process.poll() is not None else b""
                )
            raise Refused(
                "the shell's sandbox did not start"
                + (f": {said.decode(errors='replace').strip()}" if said else "")
            )
        master = fds[0]
        try:
            if not os.isatty(master):
                raise Refused("the shell's sandbox sent no terminal")
            os.set_blocking(master, False)
            return self._relay(zygote, conn, master)
        finally:
            os.close(master)

    def _relay(self, zygote: Zygote, conn: socket.socket, master: int) -> int:
        process = zygote.process
        inbox = bytearray()
        pending = bytearray()  # for the terminal, not written yet
        client_open = True
        terminal_open = True
        while True:
            if self._closing:
                zygote.end()
                return STOPPED
            if process.poll() is not None:
                # The shell is gone: what it wrote last is still in the terminal.
                _drain(master, conn)
                return exit_code(zygote.end())
            if not terminal_open:
                # Its terminal is closed but the shell lives on: wait for it.
                readers: list[Any] = [conn] if client_open else []
            else:
                readers = [master]
                if client_open and len(pending) < MAX_PENDING:
                    readers.append(conn)
            writers = [master] if pending and terminal_open else []
            readable, writable, _ = select.select(readers, writers, [], 0.5)
            if conn in readable:
                chunk = conn.recv(65536)
                if not chunk:
                    return _killed(zygote)  # the caller is gone: so is the shell
                inbox += chunk
                while len(inbox) >= HEADER.size:
                    kind, size = HEADER.unpack_from(inbox)
                    if size > MAX_FRAME:
                        return _killed(zygote)
                    if len(inbox) < HEADER.size + size:
                        break
                    payload = bytes(inbox[HEADER.size : HEADER.size + size])
                    del inbox[: HEADER.size + size]
                    if kind == DATA:
                        pending += payload
                    elif kind == WINDOW and len(payload) == 4:
                        rows, cols = struct.unpack("!HH", payload)
                        with contextlib.suppress(OSError):
                            fcntl.ioctl(
                                master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0)
                            )
                    elif kind == EOF:
                        pending += _eof_char(master)
            if master in writable:
                try:
                    written = os.write(master, pending)
                    del pending[:written]
                except BlockingIOError:
                    pass
                except OSError:
                    terminal_open = False
            if master in readable:
                try:
                    output = os.read(master, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: no one has the terminal open any more
                    output = b""
                if not output:
                    terminal_open = False
                    continue
                try:
                    conn.sendall(frame(DATA, output))
                except OSError:
                    return _killed(zygote)


def _killed(zygote: Zygote) -> int:
    return exit_code(zygote.end())


def _eof_char(master: int) -> bytes:
    try:
        return bytes([termios.tcgetattr(master)[6][termios.VEOF][0]])
    except (OSError, termios.error, IndexError, TypeError):
        return b"\x04"


def _drain(master: int, conn: socket.socket) -> None:
    while True:
        try:
            output = os.read(master, 65536)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EIO):
                raise
            return
        if not output:
            return
        with contextlib.suppress(OSError):
            conn.sendall(frame(DATA, output))


def _read_hello(conn: socket.socket) -> dict[str, Any]:
    conn.settimeout(30)
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk or len(line) > MAX_HELLO:
            raise Refused("the session did not start")
        line += chunk
    conn.settimeout(None)
    try:
        hello = json.loads(line)
    except ValueError as exc:
        raise Refused("the session's first line is not JSON") from exc
    if not isinstance(hello, dict):
        raise Refused("the session's first line is not a JSON object")
    rows, cols, term = hello.get("rows", 24), hello.get("cols", 80), hello.get("term")
    if not all(isinstance(n, int) and 0 < n < 65536 for n in (rows, cols)):
        raise Refused("rows and cols must be from 1 to 65535")
    if term is None:
        term = DEFAULT_TERM
    if not valid_term(term):
        raise Refused("term must be a terminal type's name")
    editing = hello.get("editing", True)
    if not isinstance(editing, bool):
        raise Refused("editing must be true or false")
    return {"rows": rows, "cols": cols, "term": term, "editing": editing}


def _refuse(conn: socket.socket, why: str) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(frame(ERROR, why.encode()) + frame(EXIT, struct.pack("!i", 1)))
        conn.close()
