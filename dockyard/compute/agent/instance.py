"""The instance agent: runs one host of one training job, start to finish, on this machine.

`python -m dockyard.compute.agent ROOT` is started detached (its own session) by the
local backend - forked, as that command would run, by the backend's fork server
(`agent.fork_server`, `python -m dockyard.compute.agent --fork-server`). It must outlive a
restart of the server, so it never talks to the server: everything goes through files
in ROOT.

In:  `job.json` (a `JobSpec`); `stop` (created to ask for a stop; SIGTERM does the same);
     for a running cluster node, commands to run in its sandbox (`exec/`, see `agent.exec`).
Out: `agent.pid`; `state.json` (replaced atomically on every change, see `State`);
     `logs/output.jsonl` (one `{"t": epoch_ms, "m": line}` per line the job prints)
     with its index `logs/output.idx` (see `wire.log_format`); `logs/metrics.json` (the latest
     value of each of the job's MetricDefinitions, scraped as the lines arrive);
     the SageMaker container tree under `ROOT/opt/ml` (see `agent.env`).

Every run of the job's code is confined (`agent.confinement`): its own sandbox, as an
unprivileged user, in its instances' network, within its instance type's limits. A
stop reaches every process it started: SIGTERM to all of them, `stop_grace_seconds` to
finish, then SIGKILL - SageMaker's contract; when the job's first process ends, the
rest end with its sandbox.

Warm pools (spec §5): a job with a keep-alive period leaves its agent running after
the job ends. The agent waits for `next.json` (naming the next job's own directory,
whose `job.json`, `state.json` and `logs/` are that job's) or for `release`; a byte on
the `wake` FIFO makes it look at once. Between jobs /opt/ml is emptied except for the
pool's persistent cache, and an interpreter is parked (`agent.zygote`) so the next
job's Python is running before the job arrives. On release the cache is deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from dockyard.clock import monotonic, wall_now
from dockyard.compute.agent.charged import ChargedWorkKilled, charged
from dockyard.compute.agent.confinement import Confinement, ConfinementError
from dockyard.compute.agent.data import ClientError, clean_tmp, stage_inputs, upload_outputs
from dockyard.compute.agent.deps import install_requirements
from dockyard.compute.agent.env import (
    job_command,
    make_dirs,
    remove_instance_files,
    reset_for_next_job,
    write_config,
)
from dockyard.compute.agent.exec import NodeExec
from dockyard.compute.agent.files import read_regular
from dockyard.compute.agent.outcome import (
    MAX_REASON,
    describe_exit,
    exit_code,
    failure_reason,
    out_of_memory,
)
from dockyard.compute.agent.output import OutputReader
from dockyard.compute.agent.s3 import S3Error, S3Store, s3_from_config
from dockyard.compute.agent.s3_relay import S3Relay, relay_environment
from dockyard.compute.agent.shell import NodeShells
from dockyard.compute.agent.volume import VolumeWatch
from dockyard.compute.agent.zygote import Zygote, job_message
from dockyard.compute.sandbox.netns import NetnsError
from dockyard.compute.wire import wake
from dockyard.compute.wire.layout import Layout
from dockyard.compute.wire.private_files import write_private
from dockyard.compute.wire.spec import JobSpec
from dockyard.compute.wire.state import ENDED_PHASES, InstanceState

__all__ = ["JobSpec", "Agent", "State", "TERMINAL_PHASES", "main"]

TERMINAL_PHASES = ENDED_PHASES
POLL_SECONDS = 0.1
# An idle warm-pool agent is woken through its FIFO; this is only the fallback.
IDLE_POLL_SECONDS = 1.0
# How often a running node looks for a stop (a command sent to it wakes it at once).
NODE_POLL_SECONDS = 0.5


def _iso_now() -> str:
    return wall_now().isoformat()


class State:
    """`state.json`: the instance's report (`InstanceState`, its keys documented there),
    which the control plane turns into DescribeTrainingJob."""

    def __init__(self, path: Path, on_change: Callable[[], None] = lambda: None) -> None:
        self.path = path
        self._on_change = on_change  # the control plane's wake-up (see `wake`)
        self._lock = threading.Lock()  # the log reader thread records first_output_at
        self.data: InstanceState = {
            "phase": "downloading",
            "pid": None,
            "exit_code": None,
            "failure_reason": None,
            "started_at": None,
            "training_started_at": None,
            "ended_at": None,
            "first_output_at": None,
            "stop_reason": None,
        }

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.data.update(changes)  # type: ignore[typeddict-item]
            write_private(self.path, json.dumps(self.data, indent=2))
        self._on_change()


class StopRequested(Exception):
    """Raised inside staging when a stop arrives before the job has started."""


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


class Agent:
    def __init__(self, root: Path) -> None:
        self.layout = Layout(root.resolve())
        self.state = State(self.layout.state_file, self._wake)
        # Set by SIGTERM/SIGINT; checked, with the stop file, by the polling loops. A
        # plain flag: a handler that takes a lock (Event.set) deadlocks when a second
        # signal lands while the first handler holds it.
        self._signalled = False
        self.spec: JobSpec | None = None  # the job being run, as it runs (after installs)
        self._zygote: Zygote | None = None
        # The instance's sandbox, network and limits: made for its first job, kept for
        # every job a warm pool runs on it, closed when the instance ends.
        self.confinement: Confinement | None = None
        # A cluster node's way to S3, while it is up.
        self._relay: S3Relay | None = None
        self._lock_fd: int | None = None
        # The children doing the agent's work for the job (`agent.charged`), running.
        self._children: set[int] = set()

    def _wake(self) -> None:
        # Known once the job's spec is read: every change after that wakes the server,
        # naming the job (its instance key, the name of its run directory's parent).
        wake.notify(
            self.spec.wake_socket if self.spec is not None else None,
            self.layout.run_dir.parent.name,
        )

    # -- stopping ---------------------------------------------------------------------

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True
        for pid in list(self._children):  # the work in hand for the job stops too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def stop_requested(self) -> bool:
        return self._signalled or self.layout.stop_file.exists()

    def _check_stop(self) -> None:
        if self.stop_requested():
            raise StopRequested()

    # -- the whole run ----------------------------------------------------------------

    def run(self) -> int:
        self._hold_instance()
        previous = self._previous_state()
        if previous is not None and previous.get("phase") in TERMINAL_PHASES:
            return 0  # a finished instance is never run twice
        write_private(self.layout.pid_file, f"{os.getpid()}\n")
        self.state.update(phase="downloading", started_at=_iso_now())
        if previous is not None:
            # An earlier agent died mid-job. A sandboxed job died with it (its sandbox
            # dies with its parent); an unconfined one may still run and cannot be adopted
            # (its output pipe died with the agent), so end it rather than run twice.
            if isinstance(previous.get("pid"), int) and previous.get("unconfined"):
                _kill_group(previous["pid"], signal.SIGKILL)
            return self._finish(
                "failed", failure_reason="InternalServerError: the instance agent was restarted"
            )
        while True:
            self._run_guarded()
            spec = self.spec
            if spec is None or spec.keep_alive_seconds <= 0:
                return self._shut_down()
            # A warm pool candidate: wait for the next job, or for the pool's release
            # (whether it is kept, the control plane decides: spec §5.1, §5.7).
            run_dir = self._idle(spec)
            if run_dir is None:
                return self._shut_down()
            self.layout = self.layout.for_run(run_dir)
            self.state = State(self.layout.state_file, self._wake)
            self.state.update(phase="downloading", started_at=_iso_now())
            self.spec = None

    def _hold_instance(self) -> None:
        """One agent per instance. A second one - launched again while the first had not
        yet said so, or a resumed job's while the last attempt's agent is still
        shutting down - waits for the first to exit, then goes on from what it left (a
        finished instance is never run twice)."""
        fd = os.open(self.layout.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel as this process exits
        self._lock_fd = fd

    def _run_guarded(self) -> None:
        try:
            self._run()
        except Exception as exc:  # whatever happens, the state must say so
            pid = self.state.data.get("pid")
            if isinstance(pid, int):
                _kill_group(pid, signal.SIGKILL)
            self._finish("failed", failure_reason=f"InternalServerError: {exc!r}")

    def _shut_down(self) -> int:
        """The instance goes: its warm pool cache with it (spec §5.5), its sandbox's
        network and cgroup once nothing of it runs, and every file of its own but what
        the API still reads (state, logs, metrics, the spec): its tree (the model,
        output and checkpoints are uploaded, the inputs are copies), venv and home."""
        if self._zygote is not None:
            self._zygote.discard()
            self._zygote = None
        shutil.rmtree(self.layout.warm_pool_cache, ignore_errors=True)
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self.confinement is not None:
            # What the job left is removed at the job's cost (a million files take a
            # while), while its cgroup is still there to bear it.
            with contextlib.suppress(Exception):
                self._charged(self.confinement, lambda: remove_instance_files(self.layout))
            self.confinement.close()
            self.confinement = None
        remove_instance_files(self.layout)  # done already, but unconfined or left over
        return 0

    def _previous_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.layout.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _finish(self, phase: str, **changes: Any) -> int:
        if isinstance(changes.get("failure_reason"), str):
            changes["failure_reason"] = changes["failure_reason"][:MAX_REASON]
        self.state.update(phase=phase, ended_at=_iso_now(), **changes)
        clean_tmp(self.layout)
        return 0

    def _run(self) -> int:
        try:
            spec = JobSpec.from_json(self.layout.job_file.read_text())
            store = s3_from_config(spec.s3, spec.account_id)
        except (OSError, ValueError, TypeError, S3Error) as exc:
            return self._finish(
                "failed", failure_reason=f"InternalServerError: unusable job.json: {exc}"
            )
        self.spec = spec
        if spec.attempt > 1 and self.layout.run is None:
            # A resumed job starts on fresh instances: nothing of the last attempt's
            # /opt/ml survives but what it saved to S3 (its checkpoints).
            shutil.rmtree(self.layout.opt_ml, ignore_errors=True)
        try:
            confinement = self._confine(spec)
            self._reach_s3(spec, confinement)
        except (ConfinementError, OSError) as exc:
            reason = (
                str(exc) if isinstance(exc, ConfinementError) else f"InternalServerError: {exc}"
            )
            return self._finish("failed", failure_reason=reason)
        try:
            make_dirs(self.layout, spec)
            write_config(spec, self.layout)

            def stage() -> None:
                stage_inputs(spec, self.layout, store, self._check_stop)
                # From here the tree is the job's: the install already runs its code.
                confinement.hand_over()

            self._charged(confinement, stage)
            spec = install_requirements(spec, self.layout, confinement)
            self.spec = spec
            command = job_command(spec, self.layout)
        except StopRequested:
            return self._finish("stopped", stop_reason="stop")
        except ClientError as exc:
            return self._finish("failed", failure_reason=str(exc))
        except ConfinementError as exc:
            return self._finish("failed", failure_reason=str(exc))
        except ValueError as exc:
            return self._finish("failed", failure_reason=f"ClientError: {exc}")
        outcome = self._train(spec, command, confinement)
        if outcome["phase"] is None:
            return self._finish("failed", failure_reason=outcome["failure_reason"])
        if spec.node is not None:
            return self._serve_node(outcome)
        return self._upload(spec, store, outcome)

    # -- a cluster's node ---------------------------------------------------------------

    def _serve_node(self, outcome: dict[str, Any]) -> int:
        """After the node's OnCreate script: up ("running") until asked to stop, or
        failed with what the script said."""
        if outcome["phase"] == "stopped":
            return self._finish("stopped", stop_reason=outcome.get("stop_reason"))
        if outcome["phase"] != "completed":
            reason = outcome.get("failure_reason") or describe_exit(int(outcome["exit_code"]))
            return self._finish(
                "failed",
                exit_code=outcome.get("exit_code"),
                failure_reason=f"The lifecycle script (OnCreate) failed: {reason}",
            )
        # Up: commands sent to the node (`dockyard clusters exec|shell`) run in sandboxes
        # of its confinement, each in a thread of its own, while this loop looks for a stop.
        assert self.spec is not None and self.confinement is not None
        commands = NodeExec(self.layout, self.confinement, self.spec)
        shells = NodeShells(self.layout, self.confinement, self.spec)
        self.state.update(phase="running", pid=None, exit_code=0, ready_at=_iso_now())
        try:
            while not self.stop_requested():
                commands.wait(NODE_POLL_SECONDS)
        finally:
            shells.close()
            commands.close()
        return self._finish("stopped", stop_reason="stop")

    def _reach_s3(self, spec: JobSpec, confinement: Confinement) -> None:
        """A node whose S3 is dockyard's own gets its relay (`agent.s3_relay`), and the
        variables that point AWS tools at it with the node's credentials."""
        access = (spec.node or {}).get("s3")
        if not isinstance(access, dict):
            return
        if self._relay is None:
            namespace = confinement.network.path if confinement.network is not None else None
            try:
                upstream = (str(access["host"]), int(access["port"]))
                self._relay = S3Relay.open(namespace, upstream)
            except (NetnsError, OSError, KeyError, TypeError, ValueError) as exc:
                raise ConfinementError(
                    f"InternalServerError: could not give the node its way to S3: {exc}"
                ) from exc
        spec.environment.update(relay_environment(access, self._relay.port))

    def _confine(self, spec: JobSpec) -> Confinement:
        if self.confinement is None:
            self.confinement = Confinement.open(spec, self.layout)
            if self.confinement.note:
                print(f"dockyard agent: {self.confinement.note}", file=sys.stderr, flush=True)
        return self.confinement

    # -- waiting in a warm pool -------------------------------------------------------

    def _idle(self, spec: JobSpec) -> Path | None:
        """Wait for the control plane: the next job's directory, or None (released)."""
        # The finished job's files are uploaded: the next job gets a fresh /opt/ml (but
        # the pool's cache), /tmp and home, made now rather than while it waits.
        if self.confinement is not None:
            confinement = self.confinement

            def empty() -> None:
                reset_for_next_job(self.layout)
                confinement.wipe_scratch()

            try:
                self._charged(confinement, empty)  # at the job's cost (see `_shut_down`)
            except Exception:
                empty()  # the pool's next job gets its fresh tree all the same
        else:
            reset_for_next_job(self.layout)
        make_dirs(self.layout, spec)  # the usual tree, ready before the next job comes
        self._park_interpreter(spec)
        fifo = self.layout.wake_fifo
        if not fifo.exists():
            os.mkfifo(fifo, 0o600)
        # Read-write, so the FIFO always has a writer and select() sleeps until a byte
        # arrives rather than seeing end-of-file.
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        try:
            while True:
                if self._signalled or self.layout.release_file.exists():
                    return None
                run_dir = self._next_run()
                if run_dir is not None:
                    return run_dir
                readable, _, _ = select.select([fd], [], [], IDLE_POLL_SECONDS)
                if readable:
                    try:
                        os.read(fd, 4096)
                    except BlockingIOError:
                        pass
        finally:
            os.close(fd)

    def _next_run(self) -> Path | None:
        try:
            data = json.loads(self.layout.next_file.read_text())
            run_dir = Path(str(data["run"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        self.layout.next_file.unlink(missing_ok=True)
        if (run_dir / "state.json").exists() or not (run_dir / "job.json").is_file():
            return None  # run already, or not a job: never twice
        return run_dir

    def _park_interpreter(self, spec: JobSpec) -> None:
        confinement = self.confinement
        if confinement is None:
            return
        python = confinement.inside(spec.python)
        if self._zygote is not None:
            if self._zygote.key == confinement.key(python) and self._zygote.process.poll() is None:
                return
            self._zygote.discard()
            self._zygote = None
        try:
            self._zygote = confinement.park(python)
        except (OSError, ConfinementError):
            self._zygote = None  # the next job starts cold

    def _charged(self, confinement: Confinement, work: Callable[[], object]) -> None:
        """The agent's own work for the job, in the job's cgroup (`agent.charged`)."""
        spec = self.spec
        try:
            charged(confinement.cgroup, work, self._children)
        except ChargedWorkKilled as exc:
            if spec is not None and confinement.oom_kills() > 0:
                raise ClientError(out_of_memory(spec).removeprefix("ClientError: ")) from exc
            if exc.signal_number == signal.SIGTERM:
                raise StopRequested() from exc
            raise

    def _upload(self, spec: JobSpec, store: S3Store, outcome: dict[str, Any]) -> int:
        self.state.update(phase="uploading", pid=None)
        try:
            assert self.confinement is not None
            self._charged(self.confinement, lambda: upload_outputs(spec, self.layout, store))
        except StopRequested:
            # The agent itself is being ended (SIGTERM) mid-upload.
            outcome.update(
                phase="failed",
                failure_reason="InternalServerError: the upload of "
                "the job's outputs was interrupted",
            )
        except ClientError as exc:
            # A job that failed on its own keeps its own reason: that is what to fix first.
            if outcome["phase"] != "failed":
                outcome.update(phase="failed", failure_reason=str(exc))
        phase = outcome.pop("phase")
        return self._finish(phase, **outcome)

    # -- training ---------------------------------------------------------------------

    def _start(
        self, spec: JobSpec, command: list[str], confinement: Confinement
    ) -> tuple[Zygote, subprocess.Popen[bytes], bool]:
        """The job's process: the parked interpreter if it fits, else a new one."""
        python = confinement.inside(spec.python)
        if command and command[0] == spec.python:
            command = [python, *command[1:]]
        if self.layout.code_dir.is_dir():
            cwd = confinement.inside(self.layout.code_dir)
        else:
            cwd = "/" if confinement.sandbox else str(self.layout.root)
        message = job_message(
            command,
            python,
            confinement.job_env(spec),
            cwd,
            confinement.inside(self.layout.failure_file),
        )
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            if zygote.key == confinement.key(python):
                process = zygote.activate(message)
                if process is not None:
                    return zygote, process, True
            zygote.discard()
        zygote = confinement.park(python, exec_only=bool(message["exec"]))
        process = zygote.activate(message)
        if process is None:
            zygote.discard()
            raise OSError("the job's interpreter exited before the job was handed to it")
        return zygote, process, False

    def _train(
        self, spec: JobSpec, command: list[str], confinement: Confinement
    ) -> dict[str, Any]:
        oom_before = confinement.oom_kills()
        try:
            zygote, process, parked = self._start(spec, command, confinement)
        except (OSError, ConfinementError) as exc:
            reason = (
                exc
                if isinstance(exc, ConfinementError)
                else f"ClientError: cannot run {command[0]}: {exc}"
            )
            return {"phase": None, "failure_reason": str(reason)}
        # The reader first: the job's first line is stamped when it is read.
        assert process.stdout is not None
        reader = OutputReader(
            process.stdout,
            spec,
            self.layout,
            confinement.cgroup,
            lambda at: self.state.update(first_output_at=at),
            self._children,
        )
        self.state.update(
            phase="training",
            pid=process.pid,
            training_started_at=_iso_now(),
            interpreter="parked" if parked else "started",
            unconfined=confinement.sandbox is None,
        )
        deadline = monotonic() + spec.max_runtime_seconds
        stop_reason: str | None = None
        watch = VolumeWatch(spec, self.layout, confinement)
        while process.poll() is None:
            if self.stop_requested():
                stop_reason = "stop"
            elif monotonic() >= deadline:
                stop_reason = "max_runtime"
            elif watch.over is not None:
                stop_reason = "volume"
            if stop_reason is not None:
                self._terminate(zygote, spec.stop_grace_seconds)
                break
            reader.poll()
            # Back as soon as the job exits, not at the next poll: a short job's end is
            # seen at once (a stop or the deadline at most POLL_SECONDS late).
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=POLL_SECONDS)
        # The job is over when its first process ends, as when a container's entrypoint
        # exits: whatever it left behind ends with it (and with its sandbox).
        code = exit_code(zygote.end())
        watch.stop()
        if spec.node is None:
            # Before anything of the tree is read: it is root's again, whatever another
            # instance of the job (the same user, still running) tries meanwhile. (A
            # node's tree stays its own: the node runs on, and its agent reads none of it
            # but the failure file, by descriptor.)
            self._charged(confinement, confinement.take_back)
        reader.join(timeout=5)
        if stop_reason == "volume":
            return {"phase": "failed", "exit_code": code, "failure_reason": watch.over}
        if stop_reason is not None:
            return {"phase": "stopped", "exit_code": code, "stop_reason": stop_reason}
        if code == 0:
            return {"phase": "completed", "exit_code": 0}
        if confinement.oom_kills() > oom_before:
            return {"phase": "failed", "exit_code": code, "failure_reason": out_of_memory(spec)}
        return {"phase": "failed", "exit_code": code, "failure_reason": self._failure(code)}

    def _terminate(self, zygote: Zygote, grace: float) -> None:
        zygote.signal(signal.SIGTERM)
        give_up = monotonic() + grace
        while zygote.process.poll() is None and monotonic() < give_up:
            time.sleep(POLL_SECONDS)
        zygote.end()

    def _failure(self, code: int) -> str:
        # The job's own file, read as the job could (no links, nothing but a file).
        written = read_regular(self.layout.opt_ml, self.layout.failure_file, MAX_REASON * 4)
        return failure_reason((written or b"").decode(errors="replace"), code)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m dockyard.compute.agent ROOT | --fork-server", file=sys.stderr)
        return 2
    agent = Agent(Path(args[0]))
    signal.signal(signal.SIGTERM, agent.on_signal)
    signal.signal(signal.SIGINT, agent.on_signal)
    # Detached from any terminal already; a hang-up of the launching shell means nothing.
    # A no-op handler rather than SIG_IGN, which the job would inherit across exec.
    signal.signal(signal.SIGHUP, lambda signum, frame: None)
    return agent.run()
