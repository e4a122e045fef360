"""How soon a restarted server answers (issue 12, item 8).

A data directory is made once (database, fleet, development account, and the finished
training jobs api_throughput seeds); then `dockyard serve` is started on it again and
again, each start timed from the process's start to its first `/healthz` 200 and to
its first answered ListTrainingJobs (a signed boto3 call). Beside it, measured in the
same run: the same restarts with no compiled bytecode to read (an empty pycache prefix,
and PYTHONDONTWRITEBYTECODE as on this machine), which is how every start ran before
`make` compiled the environment ahead; and a bare `python -c pass`, the floor. Goal:
`/healthz` within 2 s at p50 and at worst.
"""

from __future__ import annotations

import configparser
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.table import Table

from bench.api_throughput import HOST, ROOT, _seed_dockyard, free_port
from bench.saved import save

DEADLINE_S = 120


def _restart(data_dir: Path, env: dict[str, str]) -> tuple[float, float]:
    """(seconds to /healthz, seconds to the first ListTrainingJobs) of one start."""
    port = free_port()
    command = [sys.executable, "-m", "dockyard.cli.main", "serve", "--host", HOST]
    command += ["--port", str(port), "--data-dir", str(data_dir)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"dockyard exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/healthz", timeout=5):
                    break
            except OSError:
                if time.perf_counter() - started > DEADLINE_S:
                    raise RuntimeError("dockyard did not answer /healthz") from None
                time.sleep(0.01)
        healthy = time.perf_counter() - started
        credentials = configparser.ConfigParser()
        credentials.read(data_dir / "credentials")
        boto3.client(
            "sagemaker",
            endpoint_url=f"http://{HOST}:{port}",
            region_name="us-east-1",
            aws_access_key_id=credentials["default"]["aws_access_key_id"],
            aws_secret_access_key=credentials["default"]["aws_secret_access_key"],
        ).list_training_jobs(MaxResults=10)
        answered = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=30)
    return healthy, answered


def _bare_python(runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        seconds.append(time.perf_counter() - started)
    return seconds


def run_benchmark(quick: bool) -> dict[str, Any]:
    runs = 3 if quick else 7
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKYARD_", "AWS_"))}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        _restart(data_dir, env)  # the first start makes the data directory
        _seed_dockyard(f"sqlite:///{(data_dir / 'dockyard.db').resolve()}")
        _restart(data_dir, env)  # and the page cache warm
        compiled = [_restart(data_dir, env) for _ in range(runs)]
        no_bytecode = {
            **env,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPYCACHEPREFIX": str(Path(tmp) / "empty-pycache"),
        }
        from_source = [_restart(data_dir, no_bytecode) for _ in range(runs)]
    return {
        "runs": runs,
        "compiled": compiled,
        "from_source": from_source,
        "bare_python": _bare_python(runs),
    }


def report(results: dict[str, Any]) -> bool:
    console = Console()
    table = Table(title=f"Restart to answering (p50 and worst of {results['runs']} starts)")
    table.add_column("start")
    table.add_column("/healthz p50 ms", justify="right")
    table.add_column("/healthz max ms", justify="right")
    table.add_column("first ListTrainingJobs p50 ms", justify="right")
    for label, key in (
        ("dockyard serve (bytecode compiled by make)", "compiled"),
        ("dockyard serve, no bytecode (before issue 12)", "from_source"),
    ):
        healthy = [h for h, _ in results[key]]
        answered = [a for _, a in results[key]]
        table.add_row(
            label,
            f"{statistics.median(healthy) * 1000:.0f}",
            f"{max(healthy) * 1000:.0f}",
            f"{statistics.median(answered) * 1000:.0f}",
        )
    bare = results["bare_python"]
    table.add_row("bare python -c pass", f"{statistics.median(bare) * 1000:.0f}", "", "")
    console.print(table)
    worst = max(h for h, _ in results["compiled"])
    met = worst <= 2.0
    console.print(f"restarted server answers /healthz within 2 s: {'met' if met else 'missed'}")
    save("restart", results, console)
    return met


def run(quick: bool = False) -> bool:
    return report(run_benchmark(quick))


if __name__ == "__main__":
    sys.exit(0 if run(quick="--quick" in sys.argv) else 1)
