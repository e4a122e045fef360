"""A preheated interpreter: how a warm pool starts the next job's Python at once.

Starting Python costs tens of milliseconds (the interpreter, `site`, the namespaces
around it) before a job's first line runs. An instance kept in a warm pool starts
that interpreter while it waits, inside the namespaces its jobs run in and with the
Python environment the last job used, then parked on its stdin. When the next job
arrives and would run `PYTHON SCRIPT ARGS...` with the same interpreter, the agent
hands it the job's argv, environment and working directory; it becomes the job's
process (its own process group, its output the job's log) and runs the script as
`python SCRIPT` would, as `__main__`.

Jobs it cannot stand for start cold as before: a ContainerEntrypoint that is not this
Python running a script, another interpreter (new requirements, another image), or an
Environment with `PYTHON*` variables, which only take effect at interpreter start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass

# Runs inside the parked interpreter. What it imports before the job arrives (json,
# runpy) is imported already when the job asks for it, as in any warm interpreter.
BOOT = """\
import json as _json, os, runpy, sys
_line = sys.stdin.buffer.readline()
if not _line:
    raise SystemExit(0)
_job = _json.loads(_line)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.chdir(_job["cwd"])
os.environ.clear()
os.environ.update(_job["env"])
sys.argv = list(_job["argv"])
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
del _line, _json, _job, _null
runpy.run_path(sys.argv[0], run_name="__main__")
"""

# Variables that only mean something when the interpreter starts (PYTHONUNBUFFERED is
# set for every job, so the parked interpreter has it already).
_STARTUP_ONLY = "PYTHON"
_ALWAYS_SET = frozenset({"PYTHONUNBUFFERED"})


def script_argv(command: list[str], python: str, environment: dict[str, str]) -> list[str] | None:
    """The argv a parked `python` would run for `command`, or None if it cannot."""
    if len(command) < 2 or command[0] != python or command[1].startswith("-"):
        return None
    if any(k.startswith(_STARTUP_ONLY) and k not in _ALWAYS_SET for k in environment):
        return None
    return command[1:]


@dataclass
class Zygote:
    """A parked interpreter and what it was started as (`key`), to check it fits a job."""

    process: subprocess.Popen[bytes]
    key: tuple[str, ...]

    @classmethod
    def start(
        cls, key: tuple[str, ...], command: list[str], cwd: str, env: dict[str, str]
    ) -> Zygote:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a job's process has
        )
        return cls(process, key)

    def activate(
        self, argv: list[str], env: dict[str, str], cwd: str
    ) -> subprocess.Popen[bytes] | None:
        """Hand the job over; the process is the job's from here. None if it is gone."""
        if self.process.poll() is not None or self.process.stdin is None:
            return None
        message = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode() + b"\n"
        try:
            self.process.stdin.write(message)
            self.process.stdin.close()
        except OSError:
            self.discard()
            return None
        return self.process

    def discard(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
