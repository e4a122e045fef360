"""The agent's work for a job, done inside the job's cgroup: charged to the job.

Staging a job's inputs, unpacking its code, packing its model (gzip of whatever the job
left: an 8 GiB sparse file is 8 GiB of zeros to compress) and measuring what it wrote
cost CPU and memory the job decides. Done by the agent itself - root, outside every
cgroup, its OOM score lowered - that would be the host's to pay, unlimited. So each
such piece of work runs in a child of the agent that first moves itself into the
instance's cgroup and takes the job's OOM score: the instance type's CPUs and memory
bound it, and a job whose outputs outgrow its memory fails as out of memory, never the
agent. Without a cgroup (no limits on this host, or unconfined) the work runs in the
agent as before.

The child is a fork: it has the agent's memory and modules, so the work starts at
once; it touches only files and the pipe that carries its outcome back (the value
returned, or the exception raised, pickled).
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Callable
from typing import TypeVar

from dockyard.compute.sandbox.limits import Cgroup

T = TypeVar("T")


class ChargedWorkKilled(Exception):
    """The child doing the work was killed (by the OOM killer, as a rule)."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


def charged(cgroup: Cgroup | None, work: Callable[[], T], running: set[int] | None = None) -> T:
    """`work()`'s value, computed in a child inside `cgroup` (or here, without one);
    what it raises is raised here. `running` holds the child's PID while it works (a
    signal for the agent is passed on to it)."""
    if cgroup is None:
        return work()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        _child(cgroup, work, write_end)
    os.close(write_end)
    if running is not None:
        running.add(pid)
    chunks = []
    try:
        with os.fdopen(read_end, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
    finally:
        if running is not None:
            running.discard(pid)
    if os.WIFSIGNALED(status):
        raise ChargedWorkKilled(os.WTERMSIG(status))
    try:
        ok, value = pickle.loads(b"".join(chunks))
    except Exception as exc:
        raise RuntimeError(f"the agent's work for the job ended without an answer: {exc}") from exc
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _child(cgroup: Cgroup, work: Callable[[], object], answer: int) -> None:
    code = 0
    try:
        # A stop passed on by the agent ends the work in hand (staging between two
        # objects looks for it as the agent would; the rest ends by the signal).
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        for directory in cgroup.dirs:
            with open(directory / "cgroup.procs", "w") as procs:
                procs.write("0")
        with open("/proc/self/oom_score_adj", "w") as score:
            score.write("0")
        try:
            outcome: tuple[bool, object] = (True, work())
        except Exception as exc:
            outcome = (False, exc)
        try:
            data = pickle.dumps(outcome)
        except Exception as exc:
            data = pickle.dumps((False, RuntimeError(repr(outcome[1]) or repr(exc))))
        with os.fdopen(answer, "wb") as pipe:
            pipe.write(data)
    except BaseException:
        code = 1
    finally:
        os._exit(code)
