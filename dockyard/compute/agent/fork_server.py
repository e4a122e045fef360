"""The agents' fork server: an instance's agent for the price of a fork.

An agent started as a new interpreter spends most of its CPU before it does anything:
starting Python and importing dockyard's agent modules (about 90 ms of the agent's
100 on a small host - more than the rest of a trivial job's instance costs together).
So the local backend starts one long-lived process, `python -m dockyard.compute.agent
--fork-server`, with the agent and everything it imports loaded, and asks it for each
agent: it forks, and the child runs `agent.main([ROOT])` as `python -m
dockyard.compute.agent ROOT` would.

What stays as it was:

- An agent is still a process of its own session, not tied to whoever started it: it
  outlives the fork server and the server as before (warm pools survive restarts), and
  a restarted server finds it by `agent.pid` in its root. The fork server is its parent
  and reaps it when it exits (a single fork, not a double one: an orphan would be
  reaped only by whatever the host's init is, and a dockyard that is PID 1 of a
  container never would); if the fork server is gone by then, its agents are orphans
  like those of a server that restarted.
- Except where the backend says its agents end with it (`end_with_owner`: a Ray node's
  backend, whose instance is its actor's and must not outlive it): then the fork server,
  once its stdin closes (the actor's process gone, however it went), asks each of its
  agents to stop (SIGTERM: it stops its job, leaves its network and cgroup) and kills
  those still there after `OWNER_GONE_SECONDS`; an agent it forked is also killed by the
  kernel if the fork server itself dies (`PR_SET_PDEATHSIG`). Its sandboxes die with it
  (bwrap's `--die-with-parent`), and so does slirp4netns (`sandbox.network`).
- Its command line still names `dockyard.compute.agent`, which is how `end_agents` and
  the network's membership tell a live agent from a reused PID.
- It starts with what a new agent would: stdin from /dev/null, stdout and stderr
  appended to `ROOT/agent.log`, ROOT as its working directory, default signal
  dispositions, no file descriptor but those, and fresh random state.

The fork server runs no user code and reads no job's files: it only forks. It is
started by the backend with none of the server's file descriptors, talks to it over
its stdin and stdout (one JSON line each way per agent; no socket another process
could connect to), and exits when the backend closes its stdin - the backend object
going away, or the server (or the Ray actor) exiting. It is single-threaded (a fork
copies only the forking thread) and starts no thread of its own.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import random
import select
import signal
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from dockyard.clock import monotonic
from dockyard.compute.wire.forks import OWNER_GONE_SECONDS

_PR_SET_PDEATHSIG = 1


# -- the backend's side -----------------------------------------------------------------


# -- the fork server ----------------------------------------------------------------------


def serve() -> int:
    """Fork an agent for each request on stdin until stdin closes."""
    # Preloaded here, so every agent has it without importing it; tarfile packs the
    # job's outputs with gzip, which it imports only when first asked to.
    import gzip  # noqa: F401

    from dockyard.compute.agent import instance as agent  # noqa: F401

    # What is loaded now is shared with every agent until one writes to it: kept out of
    # the collector's sight, a collection in an agent neither walks nor copies it (a
    # full collection in a forked agent: 7.9 ms of CPU without, 1.4 ms with).
    gc.freeze()
    requests, replies = sys.stdin.fileno(), sys.stdout.fileno()
    # An agent's exit wakes the loop, so it is reaped at once rather than left a zombie
    # that looks alive to whoever checks its PID.
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    # The backend closes our stdin to end us; signals meant for a terminal are not ours.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pending = b""
    owned: set[int] = set()  # the agents that end with the backend
    while True:
        _reap(owned)
        try:
            readable, _, _ = select.select([requests, wake_read], [], [])
        except InterruptedError:
            continue
        if wake_read in readable:
            try:
                while os.read(wake_read, 4096):
                    pass
            except BlockingIOError:
                pass
        if requests not in readable:
            continue
        chunk = os.read(requests, 65536)
        if not chunk:
            # The backend is gone; the agents run on without us, but for those that end
            # with it.
            _end(owned)
            return 0
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            reply = _fork_agent(line, owned)
            _write_all(replies, json.dumps(reply).encode() + b"\n")


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _reap(owned: set[int]) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        owned.discard(pid)


def _end(owned: set[int]) -> None:
    """Stop the agents that end with the backend: SIGTERM, then SIGKILL for those still
    there after OWNER_GONE_SECONDS."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in owned:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        give_up = monotonic() + OWNER_GONE_SECONDS
        while owned and monotonic() < give_up:
            _reap(owned)
            if owned:
                select.select([], [], [], 0.05)
    _reap(owned)


def _fork_agent(line: bytes, owned: set[int]) -> dict[str, object]:
    try:
        request = json.loads(line)
        root = Path(str(request["root"]))
        ends_with_owner = bool(request.get("end_with_owner", False))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"error": f"bad request: {exc}"}
    if not root.is_absolute() or not root.is_dir():
        return {"error": f"{root} is not an instance's root"}
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed: {exc}"}
    if pid == 0:
        _become_agent(root, server if ends_with_owner else None)
    if ends_with_owner:
        owned.add(pid)
    return {"pid": pid}


def _become_agent(root: Path, parent: int | None) -> NoReturn:
    """In the forked child: become `python -m dockyard.compute.agent ROOT`; killed when
    the fork server (`parent`) dies, if one is given."""
    code = 1
    try:
        if parent is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
            if os.getppid() != parent:  # it died before the above took effect
                os._exit(1)
        os.setsid()  # as start_new_session: a session, and a process group, of its own
        # What the fork server set up for itself goes; the agent sets its own handlers.
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter's
        os.chdir(root)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(root / "agent.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # Nothing of the fork server's but the three standard streams: its requests,
        # replies and wake-up pipe are not the agent's (nor, through it, a job's).
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        # os.fork() reseeds `random` already; every other generator the agent uses
        # (tempfile's names, the OS's) is seeded per process or reads the kernel's.
        random.seed()
        sys.argv = [str(Path(__file__).with_name("__main__.py")), str(root)]
        from dockyard.compute.agent.instance import main

        code = main([str(root)])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        # Never back into the fork server's loop, nor its exit handlers.
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
