"""Warm start on the Ray backend beside the local one: from CreateTrainingJob's response
to the first line of user code, for a job that reuses the previous job's warm pool
(issue 16). The Ray cluster is `ray.cluster_utils.Cluster` on this machine (a head that
takes no instance and one worker node), so the difference is what the backend adds:
actor calls instead of local files and processes. Cold starts are shown too (a new
actor and placement group on Ray, a new agent locally).

Both servers share nothing; each run's first job warms caches and is not counted.
"""

from __future__ import annotations

import configparser
import socket
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

from bench.cold_start import _jobs
from bench.saved import save
from dockyard.compute.local import end_agents


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _measure(data_dir: Path, extra: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(cold, warm) first-line latencies on a server started with `extra` flags."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "dockyard.cli.main", "serve", "--port", str(port),
         "--data-dir", str(data_dir), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        credentials = configparser.ConfigParser()
        credentials.read(data_dir / "credentials")
        client: Any = boto3.client(
            "sagemaker",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id=credentials["default"]["aws_access_key_id"],
            aws_secret_access_key=credentials["default"]["aws_secret_access_key"],
        )
        cold = _jobs(client, data_dir, "cold", None, runs)
        warm = _jobs(client, data_dir, "warm", None, runs, keep_alive=600)
    finally:
        server.terminate()
        server.wait(timeout=60)
        end_agents(data_dir, grace=1.0)
    return cold, warm


def run(quick: bool = False) -> bool:
    from ray import cluster_utils

    runs = 3 if quick else 7
    console = Console()
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = _measure(Path(tmp) / "local", [], runs)
            on_ray = _measure(
                Path(tmp) / "ray", ["--backend", "ray", "--ray-address", cluster.address], runs
            )
    finally:
        cluster.shutdown()
    rows = {
        "local, cold": local[0],
        "local, warm pool": local[1],
        "ray, cold": on_ray[0],
        "ray, warm pool": on_ray[1],
    }
    table = Table(title=f"Start to the first line of user code (p50 of {runs} runs)")
    for column in ("backend, start", "p50 ms", "min ms", "max ms"):
        table.add_column(column, justify="left" if column.startswith("backend") else "right")
    for label, values in rows.items():
        table.add_row(
            label,
            f"{statistics.median(values) * 1000:.0f}",
            f"{min(values) * 1000:.0f}",
            f"{max(values) * 1000:.0f}",
        )
    console.print(table)
    ratio = statistics.median(on_ray[1]) / statistics.median(local[1])
    console.print(f"warm start on Ray / local: {ratio:.1f}x (goal: within 3x)")
    save("ray_warm", rows, console)
    return ratio <= 3
