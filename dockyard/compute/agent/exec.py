"""Commands run on a cluster's node from outside it: `dockyard clusters exec|shell`.

HyperPod reaches a node through SSM (`aws ssm start-session`); dockyard reaches it
through its agent, which is the only thing that may start code in the node's
sandbox. The protocol is files in the node's root, as for everything else the agent
and the control plane say to each other (the agent never talks to the server):

In:  `exec/in/<id>.json`, written atomically by the server: {"argv": [...],
     "stdin": base64, "timeout": seconds, "cwd": a directory of the node or null}.
Out: `exec/out/<id>.json`, written atomically by the agent: {"exit_code": n,
     "output": base64 of stdout and stderr as they interleaved, "truncated": bool}.

A byte on the node's `wake` FIFO makes the agent look at once. Each command runs in a
fresh sandbox of the node's confinement - the node's uid, host name, network
namespace, cgroup and `/opt/ml`, never root - and is killed at its timeout or when the
node stops. `NodeExec` is the agent's side; `write_request`/`read_result` the
server's (through the backend).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import select
import threading

from dockyard.clock import monotonic, wall_now
from dockyard.compute.agent.confinement import Confinement, ConfinementError
from dockyard.compute.agent.outcome import exit_code
from dockyard.compute.agent.zygote import Zygote
from dockyard.compute.wire.exec import ID_PATTERN, ExecRequest, requests_dir, results_dir
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.private_files import write_private
from dockyard.compute.wire.spec import JobSpec

# What one command may bring back (more is cut, and says so) and take in.
MAX_OUTPUT_BYTES = 1024 * 1024
# Commands running on one node at once; more wait their turn in exec/in.
MAX_RUNNING = 8
# Results nobody fetched (the caller gave up) are removed after this long.
STALE_RESULT_SECONDS = 3600.0

# How every program started on a node's sandbox begins (as the node's user, `python
# -S -c`): readier than the node's agent to be killed for memory, then one JSON line
# read from stdin byte by byte, so that nothing after it is consumed - the rest of
# stdin is the program's - into `job`.
BOOT_PRELUDE = """\
import json, os
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")
except OSError:
    pass
line = b""
while not line.endswith(b"\\n"):
    c = os.read(0, 1)
    if not c:
        raise SystemExit(0)
    line += c
job = json.loads(line)
"""
# A command (`dockyard clusters exec`): the prelude, then it becomes the command.
EXEC_BOOT = (
    BOOT_PRELUDE
    + """\
for where in (job["cwd"], job["env"].get("HOME", "/"), "/"):
    try:
        os.chdir(where)
        break
    except OSError:
        if where == job["cwd"]:
            os.write(2, f"dockyard: cannot cd to {where}\\n".encode())
try:
    os.execvpe(job["argv"][0], job["argv"], job["env"])
except OSError as exc:
    os.write(2, f"dockyard: cannot run {job['argv'][0]}: {exc.strerror}\\n".encode())
    os._exit(127)
"""
)


# -- the server's side (through the backend) -------------------------------------------


# -- the agent's side -------------------------------------------------------------------


class NodeExec:
    """Runs the commands sent to a running node, each in a thread of its own, so the
    node's loop keeps answering stops."""

    def __init__(self, layout: Layout, confinement: Confinement, spec: JobSpec) -> None:
        self.layout = layout
        self.confinement = confinement
        self.spec = spec
        self.inbox = requests_dir(layout.root)
        self.outbox = results_dir(layout.root)
        for directory in (self.inbox.parent, self.inbox, self.outbox):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._zygotes: dict[str, Zygote] = {}
        self._closing = False
        fifo = layout.wake_fifo
        if not fifo.exists():
            os.mkfifo(fifo, 0o600)
        # Read-write, so the FIFO always has a writer: select() sleeps until a byte comes.
        self._fifo = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self._swept = monotonic()

    def wait(self, timeout: float) -> None:
        """Sleep until woken or `timeout`, then start what was asked for."""
        readable, _, _ = select.select([self._fifo], [], [], timeout)
        if readable:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fifo, 4096)
        self.take()

    def take(self) -> None:
        with self._lock:
            for finished in [k for k, t in self._running.items() if not t.is_alive()]:
                del self._running[finished]
            room = MAX_RUNNING - len(self._running)
            if self._closing or room <= 0:
                return
        try:
            names = sorted(os.listdir(self.inbox))
        except OSError:
            return
        for name in names:
            exec_id = name.removesuffix(".json")
            if not name.endswith(".json") or not ID_PATTERN.match(exec_id) or room <= 0:
                continue
            path = self.inbox / name
            try:
                text = path.read_text()
                path.unlink()
            except OSError:
                continue
            thread = threading.Thread(target=self._serve, args=(exec_id, text), daemon=True)
            with self._lock:
                self._running[exec_id] = thread
            thread.start()
            room -= 1
        if monotonic() - self._swept > 60:
            self._swept = monotonic()
            self._sweep()

    def _sweep(self) -> None:
        now = wall_now().timestamp()
        for path in self.outbox.glob("*.json"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_RESULT_SECONDS:
                    path.unlink()

    def close(self) -> None:
        """The node is going: every command still running is killed."""
        with self._lock:
            self._closing = True
            zygotes = list(self._zygotes.values())
            threads = list(self._running.values())
        for zygote in zygotes:
            zygote.end()
        for thread in threads:
            thread.join(timeout=10)
        os.close(self._fifo)

    def _serve(self, exec_id: str, text: str) -> None:
        try:
            request = ExecRequest.from_json(text)
        except (ValueError, TypeError, binascii.Error) as exc:
            self._answer(exec_id, 2, f"dockyard: unusable exec request: {exc}\n".encode())
            return
        try:
            code, output, truncated = self._run(exec_id, request)
        except (OSError, ConfinementError) as exc:
            self._answer(exec_id, 126, f"dockyard: the node's sandbox failed: {exc}\n".encode())
            return
        self._answer(exec_id, code, output, truncated)

    def _answer(self, exec_id: str, code: int, output: bytes, truncated: bool = False) -> None:
        result = {
            "exit_code": code,
            "output": base64.b64encode(output).decode(),
            "truncated": truncated,
        }
        write_private(self.outbox / f"{exec_id}.json", json.dumps(result))

    def _run(self, exec_id: str, request: ExecRequest) -> tuple[int, bytes, bool]:
        confinement = self.confinement
        python = confinement.inside(self.spec.python)
        env = confinement.job_env(self.spec)
        cwd = request.cwd or env.get("HOME") or "/"
        with self._lock:
            if self._closing:
                return 137, b"dockyard: the node is stopping\n", False
        zygote = confinement.park(python, exec_only=True, boot=EXEC_BOOT)
        with self._lock:
            self._zygotes[exec_id] = zygote
        try:
            return self._drive(zygote, request, env, cwd)
        finally:
            with self._lock:
                self._zygotes.pop(exec_id, None)

    def _drive(
        self, zygote: Zygote, request: ExecRequest, env: dict[str, str], cwd: str
    ) -> tuple[int, bytes, bool]:
        process = zygote.process
        assert process.stdin is not None and process.stdout is not None
        message = json.dumps({"argv": request.argv, "env": env, "cwd": cwd}).encode() + b"\n"
        stdin, process.stdin = process.stdin, None

        def feed() -> None:
            # A command that never reads its stdin must not hold the rest up.
            with contextlib.suppress(OSError, ValueError):
                stdin.write(message + request.stdin)
            with contextlib.suppress(OSError, ValueError):
                stdin.close()

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        output = bytearray()
        truncated = False
        timed_out = False
        deadline = monotonic() + request.timeout
        fd = process.stdout.fileno()
        while True:
            left = deadline - monotonic()
            if left <= 0:
                timed_out = True
                break
            readable, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            room = MAX_OUTPUT_BYTES - len(output)
            if len(chunk) > room:
                truncated = True
            output += chunk[: max(room, 0)]
        code = exit_code(zygote.end())
        with contextlib.suppress(OSError):
            process.stdout.close()
        writer.join(timeout=5)
        if timed_out:
            output += f"\ndockyard: timed out after {request.timeout:g} seconds\n".encode()
            return 124, bytes(output), truncated
        with self._lock:
            if self._closing:
                return 137, bytes(output) + b"\ndockyard: the node stopped\n", truncated
        return code, bytes(output), truncated
