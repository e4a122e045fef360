"""Slurm on this machine: the peer baseline for dockyard's trivial-job throughput.

The question the throughput row answers is "how fast does a real batch system get N
trivial jobs through, on the same hardware?". Slurm is the batch system most of
dockyard's users know, so this module stands up a private one-node Slurm (Debian's
`slurm-wlm`: one slurmctld and one slurmd on localhost), submits N `sbatch --wrap true`
jobs and times from the first submission to the moment `squeue` lists none of them.

Everything lives in a fresh temporary directory and is torn down at the end, also on
error: slurm.conf (and an empty plugstack.conf), the state and spool directories, pid
and log files, and (for auth) a private munged with its own key and socket. Slurm gets
its own free ports and the clients are pointed at the private slurm.conf with
SLURM_CONF, so a system Slurm or munge on the machine is neither used nor disturbed.

Auth. Slurm's own auth/slurm (a shared slurm.key, no munge) exists only from 23.11, and
its SACK sockets sit at fixed paths under /run (/run/slurm, /run/slurmctld, /run/slurmd)
that a system Slurm would share. Debian 12 ships 22.05, where auth/munge is the only
real choice, and munge works on every version, so the module always runs a private
munged (`--socket`, `--key-file`, `--pid-file`, `--seed-file`, `--log-file` in the
temporary directory; ten threads, as the HTC guide suggests) and names its socket in
`AuthInfo=socket=...`, which both auth/munge and cred/munge read.

Configuration, from Slurm's "High Throughput Computing Administration Guide" (HTC guide)
and checked on this machine (`_slurm_conf` gives each line's reason):

* One node declared with max(N, 1024) CPUs (`SlurmdParameters=config_overrides` lets
  slurmd accept a node larger than the hardware) and `select/cons_tres` with `CR_CPU`:
  one CPU a job, so all N jobs may run at once, as on a fleet of N one-CPU instances,
  and the two real cores never hold a job back on the scheduler's side. (Debian builds
  Slurm without --enable-multiple-slurmd, so several slurmds on one host are out.)
* `sched/builtin` with `priority/basic`: FIFO, no priority sorting and no backfill
  cycle (which also holds back the purge of finished jobs).
* `SchedulerParameters=default_queue_depth=max(N, 100),batch_sched_delay=0`. Measured
  here with an array of 300 (seconds until drained): defaults (depth 100, delay 3 s)
  11-22; depth N 8.4-9.4; depth N and no delay 6.8-7.2; `defer` 9.7-10.7; the HTC
  guide's sample set (batch_sched_delay=20, sched_min_interval=2 s) 26, because it
  throttles scheduling for a sustained stream on a large cluster, and a burst on one
  node only waits for it. `defer` makes each `sbatch` return sooner but the jobs still
  wait for the next pass, so the total does not improve; it is left out.
* Nothing per job that is not needed to run one: `proctrack/pgid` (no cgroups, which
  would also live outside the temporary directory), `task/none`, `jobacct_gather/none`,
  `jobcomp/none`, `accounting_storage/none`, no prolog/epilog, logging at `error`.
* `MinJobAge=2` so finished jobs leave slurmctld's memory quickly, `MaxJobCount` and
  `MaxArraySize` large enough for N, two slurmctld ports, `MessageTimeout=30` so a
  busy two-core machine does not time RPCs out.

What bounds the number then is the node, not the scheduler: each job is a slurmstepd
forked by slurmd that loads its plugins, discovers the hardware topology (hwloc), opens
the output file, runs the script, reports back, and is confirmed gone by one more
slurmctld -> slurmd round trip (the job shows as CG until then); tens of ms of CPU a
job, which a two-core machine runs a few dozen of a second.

Two submission styles are measured on the same cluster: "sbatch x N" (N separate
`sbatch` processes one after another, what a user's shell loop does; the plain peer)
and "array of N" (`sbatch --array=1-N --wrap true`, how Slurm users submit many jobs).
The array is not much faster here: with N = 1000 on the idle two-core machine, 19.3 s
(52 jobs/s, 15.9 s of it submitting) against 18.4 s (54 jobs/s), because jobs run
while the sbatch loop is still submitting and the node's per-job work bounds both.

Not measured: accounting (there is no slurmdbd, hence no sacct), so a job's success
is checked by its output file existing, which slurmstepd writes before the job runs.

Run as root (slurmd must be); when `slurmctld` is missing and we are root, `slurm-wlm`
is installed with apt-get. Anything that keeps Slurm from starting is answered with
{"skipped": reason} rather than an exception. `python -m bench.slurm [N]` prints one
measurement (N = 1000 by default).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_JOBS = 1_000
# Where Debian puts the daemons; a non-login root shell may lack /usr/sbin in PATH.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin"])
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
# squeue is one RPC to slurmctld: 20 a second is cheap for it and bounds the error
# in the end time to 50 ms.
POLL_S = 0.05


class Unavailable(Exception):
    """Slurm cannot be installed or started here; `measure` answers skipped."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


def _install() -> None:
    """apt-get slurm-wlm when slurmctld is missing; as root only (raise otherwise)."""
    if _which("slurmctld") and _which("slurmd") and _which("sbatch") and _which("munged"):
        return
    if os.geteuid() != 0:
        raise Unavailable("slurm-wlm is not installed and installing it needs root")
    if not _which("apt-get"):
        raise Unavailable("slurm-wlm is not installed and there is no apt-get here")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "slurm-wlm"],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise Unavailable(f"`{' '.join(command)}` failed: {' / '.join(tail)}")
    if not (_which("slurmctld") and _which("munged")):
        raise Unavailable("slurm-wlm installed but slurmctld or munged is still missing")


def _version() -> str:
    done = subprocess.run(
        [_which("slurmctld") or "slurmctld", "-V"], capture_output=True, text=True
    )
    match = re.search(r"(\d+\.\d+\.\d+)", done.stdout)
    if not match:
        raise Unavailable(f"cannot tell slurmctld's version from {done.stdout!r}")
    return match.group(1)


def _free_port_run(count: int) -> int:
    """The first of `count` consecutive free TCP ports on localhost (binding each)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("", 0))
            first = int(probe.getsockname()[1])
        if first + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise Unavailable(f"found no {count} consecutive free ports")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"({path.name} not written)"
    return " / ".join(text[-lines:]) or f"({path.name} empty)"


@dataclass
class Cluster:
    """A private Slurm under `root`: started by `start`, always ended by `stop`."""

    root: Path
    jobs: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        # SLURM_CONF points every client (and, inherited, every slurmstepd and job) at
        # the private cluster; `_sweep` finds strays by it.
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}

    def start(self) -> None:
        # munged wants every directory above its socket searchable by all.
        self.root.chmod(0o755)
        for name in ("state", "spool", "log", "run"):
            (self.root / name).mkdir()
        self._start_munged()
        ctld_port = _free_port_run(2)
        slurmd_port = _free_port_run(1)
        (self.root / "plugstack.conf").write_text("")
        self.conf.write_text(self._slurm_conf(ctld_port, slurmd_port))
        self._spawn("slurmctld", [_which("slurmctld") or "slurmctld", "-D", "-f", str(self.conf)])
        self._spawn(
            "slurmd",
            [_which("slurmd") or "slurmd", "-D", "-f", str(self.conf), "-N", "dybench1"],
        )
        self._wait_idle()

    def _start_munged(self) -> None:
        key = self.root / "munge.key"
        # munged refuses a key readable by others; 1024 random bits as mungekey makes.
        key.touch(mode=0o600)
        key.write_bytes(os.urandom(128))
        socket_path = self.root / "run" / "munge.socket"
        self._spawn(
            "munged",
            [
                _which("munged") or "munged", "--foreground", "--num-threads=10",
                f"--socket={socket_path}", f"--key-file={key}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--seed-file={self.root / 'run' / 'munged.seed'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
            ],
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not socket_path.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise Unavailable("munged did not create its socket in time")
            time.sleep(0.02)

    def _slurm_conf(self, ctld_port: int, slurmd_port: int) -> str:
        root = self.root
        cpus = max(self.jobs, 1024)
        return "\n".join(
            [
                "ClusterName=dybench",
                # slurmctld only runs where SlurmctldHost names this host.
                f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
                # Two ports: the HTC guide's remedy for bursts beyond the listen backlog.
                f"SlurmctldPort={ctld_port}-{ctld_port + 1}",
                f"SlurmdPort={slurmd_port}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={root / 'run' / 'munge.socket'}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
                # The HTC guide: more logging costs throughput; errors are what we read.
                "SlurmctldDebug=error",
                "SlurmdDebug=error",
                "MailProg=/bin/true",
                # Not /etc/slurm/plugstack.conf: no system SPANK plugin joins in.
                f"PlugStackConfig={root / 'plugstack.conf'}",
                # Per-job work Slurm does only when asked: no accounting, no cgroups,
                # no affinity, no completion log.
                "ProctrackType=proctrack/pgid",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "JobCompType=jobcomp/none",
                "AccountingStorageType=accounting_storage/none",
                "SwitchType=switch/none",
                "MpiDefault=none",
                # FIFO: the HTC guide's choice for short jobs.
                "SchedulerType=sched/builtin",
                "PriorityType=priority/basic",
                # Every pass may start every pending job (the default tries 100), and
                # batch jobs are scheduled on slurmctld's next one-second tick rather
                # than after the default 3 s; see the module docstring for what else
                # was measured.
                f"SchedulerParameters=default_queue_depth={max(100, self.jobs)},"
                "batch_sched_delay=0",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                # Finished jobs leave slurmctld's memory after 2 s (2 is the least the
                # man page recommends); room for N jobs and an array of N.
                "MinJobAge=2",
                f"MaxJobCount={max(10_000, 4 * self.jobs)}",
                f"MaxArraySize={max(1_001, self.jobs + 1)}",
                "MessageTimeout=30",
                "ReturnToService=2",
                # A node bigger than the machine: slurmd reports what is declared here.
                "SlurmdParameters=config_overrides",
                f"NodeName=dybench1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus}"
                " State=UNKNOWN",
                "PartitionName=bench Nodes=dybench1 Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            # A new session: a terminal's Ctrl-C reaches us, and `stop` ends them.
            self.processes[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.root / "log" / (f"{name}.log" if name != "munged" else "munged.out")
                raise Unavailable(
                    f"{name} exited with status {process.returncode}: {_tail(log)}"
                    f" {_tail(self.root / 'log' / f'{name}.out')}"
                )

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            self._check_alive()
            done = self.run(["sinfo", "-h", "-o", "%T"], check=False)
            state = done.stdout.strip()
            if done.returncode == 0 and state == "idle":
                return
            time.sleep(0.1)
        raise Unavailable(
            f"the node did not become idle in {START_TIMEOUT_S:.0f} s (state {state!r}):"
            f" {_tail(self.root / 'log' / 'slurmctld.log')}"
        )

    def run(
        self, argv: list[str], *, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, env=self.env, cwd=cwd or self.root, capture_output=True, text=True
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
        return done

    def pending(self) -> int:
        """Jobs slurmctld still lists (pending, running or completing): all are ours."""
        return len(self.run(["squeue", "-h", "-o", "%i"]).stdout.split())

    def wait_drained(self, timeout_s: float) -> float:
        """Poll squeue until it lists nothing; the perf_counter time it first did."""
        deadline = time.monotonic() + timeout_s
        while self.pending():
            if time.monotonic() > deadline:
                raise RuntimeError(f"jobs still queued after {timeout_s:.0f} s")
            self._check_alive()
            time.sleep(POLL_S)
        return time.perf_counter()

    def stop(self) -> None:
        """End the daemons (slurmd first, munged last), then any job they left."""
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._sweep()

    def _sweep(self) -> None:
        """Kill slurmstepds and jobs still running: slurmstepd daemonises away from
        slurmd, but it and the job inherit our SLURM_CONF, which names only them."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _submit_each(cluster: Cluster, jobs: int, work: Path) -> tuple[float, float, float]:
    """N sbatch processes one after another: (start, last submitted, all done)."""
    sbatch = [_which("sbatch") or "sbatch", "--wrap", "true"]
    started = time.perf_counter()
    for _ in range(jobs):
        cluster.run(sbatch, cwd=work)
    submitted = time.perf_counter()
    return started, submitted, cluster.wait_drained(_drain_timeout(jobs))


def _submit_array(cluster: Cluster, jobs: int, work: Path) -> tuple[float, float, float]:
    """One sbatch of an array of N: (start, submitted, all done)."""
    sbatch = [_which("sbatch") or "sbatch", f"--array=1-{jobs}", "--wrap", "true"]
    started = time.perf_counter()
    cluster.run(sbatch, cwd=work)
    submitted = time.perf_counter()
    return started, submitted, cluster.wait_drained(_drain_timeout(jobs))


def _drain_timeout(jobs: int) -> float:
    return 120.0 + jobs * 0.5


def _row(jobs: int, times: tuple[float, float, float], work: Path) -> dict[str, Any]:
    started, submitted, done = times
    ran = sum(1 for _ in work.glob("slurm-*.out"))
    if ran != jobs:
        raise RuntimeError(f"{jobs} jobs submitted but {ran} wrote an output file")
    seconds = done - started
    return {
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_second": round(jobs / seconds, 1),
        "submit_seconds": round(submitted - started, 3),
    }


def measure(jobs: int = DEFAULT_JOBS) -> dict[str, Any]:
    """Time N trivial jobs through a private Slurm, submitted both ways.

    The top level is "sbatch x N" (N sbatch processes); "array" is the same N as one
    job array, on the same cluster after the first batch has drained. Answers
    {"skipped": reason} when Slurm cannot be installed or started here.
    """
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    if os.geteuid() != 0:
        return {"skipped": "Slurm's slurmd must run as root; run the benchmark as root"}
    try:
        _install()
        version = _version()
    except Unavailable as exc:
        return {"skipped": str(exc)}
    with tempfile.TemporaryDirectory(prefix="dockyard-slurm-") as tmp:
        cluster = Cluster(Path(tmp), jobs)
        try:
            setup_started = time.perf_counter()
            try:
                cluster.start()
            except Unavailable as exc:
                return {"skipped": f"Slurm {version} would not start here: {exc}"}
            setup = time.perf_counter() - setup_started
            # One job first, so that neither style pays for the first slurmstepd.
            warm = cluster.root / "warm"
            warm.mkdir()
            _submit_each(cluster, 1, warm)
            each_work, array_work = cluster.root / "each", cluster.root / "array"
            each_work.mkdir()
            array_work.mkdir()
            each = _row(jobs, _submit_each(cluster, jobs, each_work), each_work)
            array = _row(jobs, _submit_array(cluster, jobs, array_work), array_work)
        finally:
            cluster.stop()
    return {
        **each,
        "array": array,
        "setup_seconds": round(setup, 3),
        "slurm_version": version,
        "auth": "auth/munge with a private munged",
    }


def main(argv: list[str]) -> int:
    jobs = int(argv[0]) if argv else DEFAULT_JOBS
    result = measure(jobs)
    print(json.dumps(result, indent=2))
    return 0 if "skipped" not in result else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
