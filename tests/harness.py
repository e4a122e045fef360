"""A real dockyard server on a loopback port, for end-to-end tests."""

from __future__ import annotations

import configparser
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from dockyard.compute.backends.local import end_agents

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
# Every test server's reconcilers tick once an hour: what a test waits for must come
# from a nudge, an agent's wake-up or a deadline the reconcilers keep (issue 13), never
# from the tick.
TICK = {"DOCKYARD_RECONCILE_INTERVAL_SECONDS": "3600"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dockyard_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dockyard.cli.main", *args]


def run_cli(
    *args: str, data_dir: Path, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dockyard_command(*args),
        cwd=REPO,
        env={**os.environ, "DOCKYARD_DATA_DIR": str(data_dir), "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


class DockyardServer:
    def __init__(self, data_dir: Path, *, clock: str = "real", database_url: str | None = None):
        self.data_dir = data_dir
        self.clock = clock
        self.database_url = database_url
        self.port = free_port()
        self.process: subprocess.Popen[str] | None = None
        self.log_path = data_dir / "server.log"
        self.extra_args: list[str] = []
        self.extra_env: dict[str, str] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> DockyardServer:
        args = [
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--clock",
            self.clock,
        ]
        if self.database_url:
            args += ["--database-url", self.database_url]
        args += self.extra_args
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")  # noqa: SIM115 - the child process owns it
        self.process = subprocess.Popen(
            dockyard_command(*args),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **TICK, **self.extra_env},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dockyard exited early:\n{self.log_path.read_text()}")
            try:
                with urllib.request.urlopen(self.endpoint + "/healthz", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"dockyard did not become healthy:\n{self.log_path.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no chance to clean up, as in a crash."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reap_agents()

    def reap_agents(self) -> None:
        """Warm pools keep their agents running past the server (as they must across a
        restart); a test's data dir is thrown away, so its agents go with it."""
        end_agents(self.data_dir)

    def credentials(self) -> tuple[str, str]:
        parser = configparser.ConfigParser()
        parser.read(self.data_dir / "credentials")
        return parser["default"]["aws_access_key_id"], parser["default"]["aws_secret_access_key"]

    def client(
        self,
        service: str = "sagemaker",
        key: tuple[str, str] | None = None,
        region: str = REGION,
        **config: Any,
    ) -> Any:
        access_key, secret = key or self.credentials()
        return boto3.session.Session().client(
            service,
            endpoint_url=self.endpoint,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 1}, **config),
        )

    def aws_env(self) -> dict[str, str]:
        """Environment for the `aws` CLI, as the README tells a person to set it."""
        return {
            **os.environ,
            "AWS_SHARED_CREDENTIALS_FILE": str(self.data_dir / "credentials"),
            "AWS_CONFIG_FILE": str(self.data_dir / "config"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def own_bucket(self, name: str, key: tuple[str, str] | None = None) -> str:
        """Create a bucket through the S3 API as the key's account (its owner from then
        on); answer its s3:// URI. A bucket made with mkdir is the development account's."""
        s3 = self.client("s3", key=key)
        try:
            s3.create_bucket(Bucket=name)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        return f"s3://{name}"

    def new_account(self, name: str) -> tuple[str, tuple[str, str]]:
        """Create an account and a key with the operator CLI; returns (account id, key)."""
        out = run_cli("accounts", "create", name, *self._database, data_dir=self.data_dir)
        account_id = out.stdout.split()[2]
        return account_id, self.new_key(account_id)

    def new_key(self, account_id: str, policy: str | None = None) -> tuple[str, str]:
        """A key of the account made with the operator CLI (`dockyard keys create`), with
        an IAM-style policy (its JSON text) when one is given."""
        extra = list(self._database)
        if policy is not None:
            file = self.data_dir.parent / f"policy-{uuid.uuid4().hex}.json"
            file.write_text(policy)
            extra += ["--policy", str(file)]
        out = run_cli("keys", "create", "--account", account_id, *extra, data_dir=self.data_dir)
        fields = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
        return fields["aws_access_key_id"].strip(), fields["aws_secret_access_key"].strip()

    @property
    def _database(self) -> tuple[str, ...]:
        return ("--database-url", self.database_url) if self.database_url else ()


# Inside a job: a file the test creates (`open_gate`) to let a waiting job go on. The job
# sees only its own tree, so the gate is in it, where the test (root) can reach it.
GATE = "/opt/ml/input/go"
WAIT_FOR_GATE = (
    "import pathlib, time; print('up', flush=True); "
    f"[time.sleep(0.05) for _ in iter(lambda: pathlib.Path({GATE!r}).exists(), True)]"
)


# The uid that ends a job's instance directory name (domain.jobs.instance_key), as a glob:
# instances/*-<job name>-{UID}/algo-1.
UID = "?" * 16


def instance_root(server: DockyardServer, job_name: str, host: str = "algo-1") -> Path:
    """The root of the instance running a job on the local backend: the job's own, or
    the warm pool's it was handed to (whose agent its run directory names)."""
    instances = server.data_dir / "instances"
    # <account>-<region>-<job name>-<the job's uid> (domain.jobs.instance_key)
    key = re.compile(rf"\d{{12}}-[a-z]+-[a-z]+-\d+-{re.escape(job_name)}-[0-9a-f]{{16}}")
    deadline = time.monotonic() + 60
    while True:
        runs = [
            found / host
            for found in (instances.iterdir() if instances.is_dir() else [])
            if key.fullmatch(found.name) and (found / host).is_dir()
        ]
        if runs and (runs[0] / "agent.pid").is_file():
            run = runs[0]
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"no instance runs {job_name}")
        time.sleep(0.05)
    if (run / "attempt").is_file():
        return run  # launched for this job (a warm pool's run directory has no attempt)
    agent = (run / "agent.pid").read_text()
    for home in instances.glob(f"*/{host}"):
        if (home / "attempt").is_file() and (home / "agent.pid").read_text() == agent:
            return home
    raise AssertionError(f"no warm pool instance runs {job_name}")


def open_gate(server: DockyardServer, job_name: str, host: str = "algo-1") -> None:
    path = instance_root(server, job_name, host) / GATE.lstrip("/")
    path.touch()


def signed_post(
    server: DockyardServer,
    target: str,
    body: bytes,
    *,
    key: tuple[str, str] | None = None,
    service: str = "sagemaker",
    region: str = REGION,
    signed_at: Any = None,
    sign: bool = True,
    tamper: bytes | None = None,
    unsigned: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST a raw body, SigV4-signed by botocore's own signer (optionally at another time);
    `unsigned` headers are left out of the signature and sent as well."""
    import datetime as _dt
    import http.client
    import json
    from unittest import mock

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    access_key, secret = key or server.credentials()
    request = AWSRequest(
        method="POST",
        url=server.endpoint + "/",
        data=body,
        headers={
            name: value
            for name, value in {
                "X-Amz-Target": target,
                "Content-Type": "application/x-amz-json-1.1",
            }.items()
            if name not in (unsigned or {})
        },
    )
    if sign:
        when = signed_at or _dt.datetime.now(_dt.UTC).replace(tzinfo=None)
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            SigV4Auth(Credentials(access_key, secret), service, region).add_auth(request)
    prepared = request.prepare()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(
            "POST",
            "/",
            body=tamper if tamper is not None else body,
            headers={**dict(prepared.headers), **(unsigned or {})},
        )
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    try:
        decoded = json.loads(payload) if payload else {}
    except ValueError:
        decoded = {"raw": payload.decode(errors="replace")}
    return response.status, decoded
