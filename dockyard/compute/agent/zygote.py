"""How a job's process starts: a parked interpreter, handed the job on its stdin.

Every run of user code starts the same way: an interpreter (the job's Python) is
started in the instance's sandbox running `BOOT`, and waits on its stdin; the agent
writes it one JSON line - the job's argv, environment and working directory - and it
becomes the job's process: it runs `python SCRIPT ARGS` itself (`runpy`, as
`__main__`), or `exec`s any other command. So the job's environment never passes
through the privileged tools that build the sandbox, nor appears in an argv.

A cold start writes the line at once. A warm pool parks the interpreter while it
waits for the next job, inside the namespaces its jobs run in and with the Python
environment the last job used, so the next job's first line runs without paying
for an interpreter start (spec §5.3). It runs the job itself when it can stand for
`python SCRIPT`: the same interpreter, no interpreter options, and no `PYTHON*`
variable in the job's Environment (those only take effect at interpreter start);
otherwise it `exec`s the command, as a cold start of a non-Python command does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.clock import monotonic

# Runs inside the parked interpreter. What it imports before the job arrives (json,
# runpy) is imported already when the job asks for it, as in any warm interpreter. It
# asks the OOM killer to take the job before anything else on the host.
BOOT = """\
import json as _json, os, runpy, sys
try:
    with open("/proc/self/oom_score_adj", "w") as _f:
        _f.write("500")
except OSError:
    pass
_line = sys.stdin.buffer.readline()
if not _line:
    raise SystemExit(0)
_job = _json.loads(_line)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.chdir(_job["cwd"])
if _job["exec"]:
    try:
        os.execvpe(_job["argv"][0], _job["argv"], _job["env"])
    except OSError as _exc:
        try:
            with open(_job["failure_file"], "w") as _f:
                _f.write(f"cannot run {_job['argv'][0]}: {_exc.strerror}")
        except OSError:
            pass
        os._exit(127)
os.environ.clear()
os.environ.update(_job["env"])
sys.argv = list(_job["argv"])
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
del _line, _json, _job, _null
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Variables that only mean something when the interpreter starts (PYTHONUNBUFFERED is
# set for every process, so the parked interpreter has it already).
_STARTUP_ONLY = "PYTHON"
_ALWAYS_SET = frozenset({"PYTHONUNBUFFERED"})
INFO_SECONDS = 30.0


def script_argv(command: list[str], python: str, environment: dict[str, str]) -> list[str] | None:
    """The argv a parked `python` would run itself for `command`, or None if it cannot."""
    if len(command) < 2 or command[0] != python or command[1].startswith("-"):
        return None
    if any(k.startswith(_STARTUP_ONLY) and k not in _ALWAYS_SET for k in environment):
        return None
    return command[1:]


def job_message(
    command: list[str], python: str, env: dict[str, str], cwd: str, failure_file: str
) -> dict[str, Any]:
    """What a parked interpreter is told to run."""
    argv = script_argv(command, python, env)
    if argv is None:
        return {
            "exec": True,
            "argv": command,
            "env": env,
            "cwd": cwd,
            "failure_file": failure_file,
        }
    return {"exec": False, "argv": argv, "env": env, "cwd": cwd, "failure_file": failure_file}


def _sandbox_pid(info_read: int) -> int | None:
    """The sandbox's init (its PID 1, in this host's numbering), from bwrap's --info-fd."""
    data = b""
    give_up = monotonic() + INFO_SECONDS
    while monotonic() < give_up:
        readable, _, _ = select.select([info_read], [], [], 0.5)
        if not readable:
            continue
        chunk = os.read(info_read, 4096)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


@dataclass
class Zygote:
    """A parked interpreter, what it was started as (`key`), and its sandbox."""

    process: subprocess.Popen[bytes]
    key: tuple[str, ...]
    sandbox_pid: int | None = None  # None: unconfined, a process group of its own
    _namespace: str | None = field(default=None, repr=False)

    @classmethod
    def start(
        cls,
        key: tuple[str, ...],
        command: list[str],
        env: dict[str, str],
        info_fd: tuple[int, int] | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> Zygote:
        """Start `command` (which runs BOOT); `info_fd` is the (read, write) pipe its
        bwrap was told to report on; `pass_fds` are handed to what it runs."""
        try:
            process = subprocess.Popen(
                command,
                cwd="/",
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a job's process has
                pass_fds=((info_fd[1],) if info_fd else ()) + pass_fds,
            )
        except BaseException:
            if info_fd:
                os.close(info_fd[0])
            raise
        finally:
            if info_fd:
                os.close(info_fd[1])
        zygote = cls(process, key)
        if info_fd:
            try:
                zygote.sandbox_pid = _sandbox_pid(info_fd[0])
            finally:
                os.close(info_fd[0])
            if zygote.sandbox_pid is None:
                zygote.discard()
                raise OSError("the sandbox did not start (see the job's log)")
            try:
                zygote._namespace = os.readlink(f"/proc/{zygote.sandbox_pid}/ns/pid")
            except OSError:
                pass
        return zygote

    def activate(self, message: dict[str, Any]) -> subprocess.Popen[bytes] | None:
        """Hand the job over; the process is the job's from here. None if it is gone."""
        if self.process.poll() is not None or self.process.stdin is None:
            return None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.close()
        except OSError:
            self.discard()
            return None
        self.process.stdin = None  # it is the job's now; communicate() must not touch it
        return self.process

    def processes(self) -> list[int]:
        """Every process of the job's sandbox but its init, by host PID."""
        if self._namespace is None:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.sandbox_pid:
                continue
            try:
                if os.readlink(entry / "ns" / "pid") == self._namespace:
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def signal(self, sig: int) -> None:
        """`sig` to every process the job started: its sandbox's, or its process group."""
        if self.sandbox_pid is None:
            try:
                os.killpg(self.process.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            return
        if sig == signal.SIGKILL:
            # The init of a PID namespace takes every process in it along when it dies;
            # checked first to be that init still, as a PID is reused once it is gone.
            try:
                if os.readlink(f"/proc/{self.sandbox_pid}/ns/pid") == self._namespace:
                    os.kill(self.sandbox_pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
            return
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def end(self, timeout: float = 30.0) -> int:
        """Kill whatever is left of it and wait until nothing is; answer the exit code."""
        self.signal(signal.SIGKILL)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        give_up = monotonic() + timeout
        while self._init_running() and monotonic() < give_up:
            time.sleep(0.01)
        return code

    def _init_running(self) -> bool:
        """Whether the sandbox's init has yet to finish dying. An init that dies takes
        every process of its namespace with it, and is a zombie (or gone) only once the
        last of them is: so this answers for all of them, without looking through every
        process on the host (thousands, with a large fleet) as `processes` does."""
        if self.sandbox_pid is None or self._namespace is None:
            return False
        try:
            if os.readlink(f"/proc/{self.sandbox_pid}/ns/pid") != self._namespace:
                return False  # gone, and its PID taken by something else since
            with open(f"/proc/{self.sandbox_pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def discard(self) -> None:
        self.end()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
