"""Warm start on the Ray backend beside the local one: from CreateTrainingJob's response
to the first line of user code, for a job that reuses the previous job's warm pool
(issue 16). The Ray cluster is `ray.cluster_utils.Cluster` on this machine (a head that
takes no instance and one worker node), so the difference is what the backend adds:
actor calls instead of local files and processes. Cold starts are shown too (a new
actor and placement group on Ray, a new agent locally).

Both servers share nothing; each run's first job warms caches and is not counted.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.cold_start import _jobs, serving
from bench.saved import save


def _measure(data_dir: Path, extra: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(cold, warm) first-line latencies on a server started with `extra` flags."""
    with serving(data_dir, extra) as client:
        cold = _jobs(client, data_dir, "cold", None, runs)
        warm = _jobs(client, data_dir, "warm", None, runs, keep_alive=600)
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
