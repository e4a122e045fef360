"""A live `dockyard serve` for the benchmarks that measure through the API with boto3."""

from __future__ import annotations

import configparser
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from bench.api_throughput import HOST, _subprocess_server, free_port
from dockyard.compute.backends.local import end_agents

REGION = "us-east-1"


@dataclass(frozen=True)
class Live:
    port: int
    data_dir: Path

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def development_key(self) -> tuple[str, str]:
        """The development account's key, from the credentials file the server wrote."""
        credentials = configparser.ConfigParser()
        credentials.read(self.data_dir / "credentials")
        default = credentials["default"]
        return default["aws_access_key_id"], default["aws_secret_access_key"]

    def client(self, service: str = "sagemaker", key: tuple[str, str] | None = None) -> Any:
        key = key or self.development_key()
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key[0],
            aws_secret_access_key=key[1],
        )


def command(port: int, data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "dockyard.cli.main", "serve", "--host", HOST,
        "--port", str(port), "--data-dir", str(data_dir), *extra,
    ]  # fmt: skip


@contextmanager
def live_server(data_dir: Path, *extra: str, port: int | None = None) -> Iterator[Live]:
    """Serve on `data_dir` (made if missing) until the block ends, then end its agents
    (warm pools outlive a server by design)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    try:
        with _subprocess_server(
            "dockyard", command(port, data_dir, *extra), port, data_dir, "/healthz"
        ):
            yield Live(port, data_dir)
    finally:
        end_agents(data_dir, grace=1.0)
