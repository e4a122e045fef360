"""Cold and warm start: from CreateTrainingJob's response to the first line of user code.

Measured on the local backend for a job with no requirements and for one with a small
requirements.txt, started cold (new instances: an agent, the /opt/ml tree, a venv
installed with uv — uv's cache warm after the first run, as on any server that has run
a job before) and warm (a managed warm pool left by the previous matching job: the
same agent, venv and a parked interpreter), beside the cost of starting a bare Python
process that imports nothing — the floor any backend pays. Goal (issue 5): warm p50
within 3x of bare Python and at least 20x faster than cold.

The first line's time is the agent's timestamp of it in the instance's log (this
machine's wall clock, as is the client's timestamp of the response).
"""

from __future__ import annotations

import configparser
import io
import json
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
from rich.console import Console
from rich.table import Table

from bench.saved import save
from dockyard.compute.backends.local import end_agents

CODE = b"print('first line', flush=True)\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(data_dir: Path, extra: Sequence[str] = ()) -> Iterator[Any]:
    """A dockyard server on a free port with `extra` flags, until the block ends (its
    agents ended with it); a boto3 SageMaker client for its development account."""
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
                time.sleep(0.1)
        credentials = configparser.ConfigParser()
        credentials.read(data_dir / "credentials")
        yield boto3.client(
            "sagemaker",
            endpoint_url=f"http://127.0.0.1:{port}",
            region_name="us-east-1",
            aws_access_key_id=credentials["default"]["aws_access_key_id"],
            aws_secret_access_key=credentials["default"]["aws_secret_access_key"],
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
        end_agents(data_dir, grace=1.0)


def _bare_python(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-S", "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return times


def _archive(requirements: str | None) -> bytes:
    buffer = io.BytesIO()
    files = {
        "train.py": CODE,
        **({"requirements.txt": requirements.encode()} if requirements else {}),
    }
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _first_line_at(data_dir: Path, name: str, deadline: float) -> float:
    pattern = f"*-{name}-{'?' * 16}/algo-1/logs/output.jsonl"  # <key>-<name>-<uid>
    while time.monotonic() < deadline:
        for path in (data_dir / "instances").glob(pattern):
            text = path.read_text()
            if text.strip():
                return int(json.loads(text.splitlines()[0])["t"]) / 1000
        time.sleep(0.005)
    raise RuntimeError(f"job {name} printed nothing in time")


def _wait_available(client: Any, name: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        status = client.describe_training_job(TrainingJobName=name).get("WarmPoolStatus", {})
        if status.get("Status") == "Available":
            return
        time.sleep(0.02)
    raise RuntimeError(f"job {name} left no Available warm pool")


def _jobs(
    client: Any,
    data_dir: Path,
    label: str,
    requirements: str | None,
    runs: int,
    keep_alive: int = 0,
) -> list[float]:
    bucket = data_dir / "s3" / "bench"
    (bucket / "code").mkdir(parents=True, exist_ok=True)
    (bucket / "code" / f"{label}.tar.gz").write_bytes(_archive(requirements))
    latencies = []
    for index in range(runs + 1):  # the first run warms uv's cache and the page cache
        name = f"{label}-{index}"
        client.create_training_job(
            TrainingJobName=name,
            AlgorithmSpecification={"TrainingImage": "python:3.11", "TrainingInputMode": "File"},
            HyperParameters={
                "sagemaker_program": '"train.py"',
                "sagemaker_submit_directory": f'"s3://bench/code/{label}.tar.gz"',
            },
            RoleArn="arn:aws:iam::123456789012:role/bench",
            OutputDataConfig={"S3OutputPath": "s3://bench/out"},
            ResourceConfig={
                "InstanceType": "ml.m5.xlarge",
                "InstanceCount": 1,
                "VolumeSizeInGB": 10,
                **({"KeepAlivePeriodInSeconds": keep_alive} if keep_alive else {}),
            },
            StoppingCondition={"MaxRuntimeInSeconds": 600},
        )
        answered = time.time()  # wall clock: compared with the agent's wall-clock stamp
        first = _first_line_at(data_dir, name, time.monotonic() + 180)
        if index:
            latencies.append(first - answered)
        while (
            client.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress"
        ):
            time.sleep(0.05)
        if keep_alive:
            # The next job is a researcher's next iteration: it comes once the pool is
            # there (and its interpreter parked, a few tens of ms after the job ends).
            _wait_available(client, name, time.monotonic() + 60)
            time.sleep(0.3)
    return latencies


def run(quick: bool = False) -> bool:
    runs = 3 if quick else 7
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        with serving(data_dir) as client:
            bare = _bare_python(runs * 3)
            plain = _jobs(client, data_dir, "plain", None, runs)
            with_requirements = _jobs(client, data_dir, "reqs", "tomli-w==1.0.0\n", runs)
            warm = _jobs(client, data_dir, "warm", "tomli-w==1.0.0\n", runs, keep_alive=600)
    rows = {
        "bare python -S -c pass": bare,
        "cold job, no requirements": plain,
        "cold job, small requirements.txt": with_requirements,
        "warm job, small requirements.txt": warm,
    }
    table = Table(title=f"Start to the first line of user code (p50 of {runs} runs)")
    table.add_column("what")
    table.add_column("p50 ms", justify="right")
    table.add_column("min ms", justify="right")
    table.add_column("max ms", justify="right")
    table.add_column("x bare", justify="right")
    floor = statistics.median(bare)
    for label, values in rows.items():
        p50 = statistics.median(values)
        table.add_row(
            label,
            f"{p50 * 1000:.0f}",
            f"{min(values) * 1000:.0f}",
            f"{max(values) * 1000:.0f}",
            f"{p50 / floor:.1f}",
        )
    console.print(table)
    cold_p50 = statistics.median(with_requirements)
    warm_p50 = statistics.median(warm)
    console.print(
        f"warm pool, small requirements.txt: p50 {warm_p50 * 1000:.1f} ms = "
        f"{warm_p50 / floor:.1f}x bare python (goal <= 3x); cold/warm = "
        f"{cold_p50 / warm_p50:.0f}x (goal >= 20x)"
    )
    save("cold_start", rows, console)
    return warm_p50 <= 3 * floor and cold_p50 >= 20 * warm_p50
