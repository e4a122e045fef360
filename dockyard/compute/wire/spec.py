"""`job.json`: what the control plane tells one instance agent to run.

The control plane writes it and the agent reads it, possibly from a different version of
dockyard after an upgrade, so both sides share this one dataclass, unknown keys are
ignored - and logged - (newer control plane, older agent) and every key but the job name
has a default.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("dockyard.compute.wire.spec")


@dataclass
class JobSpec:
    job_name: str
    host: str = "algo-1"
    hosts: list[str] = field(default_factory=lambda: ["algo-1"])
    # Strings, as CreateTrainingJob carries them.
    hyperparameters: dict[str, str] = field(default_factory=dict)
    # The API's InputDataConfig and ResourceConfig, exactly as given.
    input_data_config: list[dict[str, Any]] = field(default_factory=list)
    resource_config: dict[str, Any] = field(default_factory=dict)
    entrypoint: list[str] | None = None  # ContainerEntrypoint
    arguments: list[str] | None = None  # ContainerArguments
    program: str | None = None  # hyperparameter sagemaker_program (script mode)
    submit_directory: str | None = None  # hyperparameter sagemaker_submit_directory
    python: str = field(default_factory=lambda: sys.executable)
    environment: dict[str, str] = field(default_factory=dict)
    output_path: str | None = None  # OutputDataConfig.S3OutputPath
    checkpoint_s3_uri: str | None = None
    checkpoint_local_path: str = "/opt/ml/checkpoints"
    max_runtime_seconds: float = 86400
    stop_grace_seconds: float = 30
    s3: dict[str, Any] = field(default_factory=dict)
    master_port: int = 7777
    # EnableNetworkIsolation: the job's network namespace has only loopback.
    network_isolation: bool = False
    # The job's account's own uv cache, shared by its instances so reinstalls are quick
    # (never another account's: a cache is code the next install runs).
    uv_cache_dir: str | None = None
    job_arn: str = ""
    account_id: str = ""
    # How the instance is confined (see `Confinement`): {"mode": "bwrap" | "none",
    # "uid": the account's sandbox user, "limits": {"memory_bytes", "cpus", "pids"}}.
    sandbox: dict[str, Any] = field(default_factory=dict)
    # ResourceConfig.KeepAlivePeriodInSeconds: > 0 keeps the instance after the job (a
    # warm pool candidate): the agent waits for the next job or its release.
    keep_alive_seconds: int = 0
    # AlgorithmSpecification.MetricDefinitions: scraped from the lines as they are written.
    metric_definitions: list[dict[str, Any]] = field(default_factory=list)
    # The server's wake-up socket (see `wake`): told of each state change.
    wake_socket: str | None = None
    # 1, or the attempt of a job on a training plan resumed in a later block (fresh
    # instances: its checkpoints come back from S3).
    attempt: int = 1
    # The host GPUs the instance runs on (given by the backend from its pool's GPUs):
    # CUDA_VISIBLE_DEVICES and SM_NUM_GPUS say them, and only their devices are in the
    # sandbox.
    gpus: list[int] = field(default_factory=list)
    # A HyperPod cluster's node (spec §3.5), not a job: {"cluster", "group", and, when
    # its S3 is dockyard's own, "s3": {"host", "port" (the server's), "access_key_id",
    # "secret_access_key", "region" (the node's credentials)}}. Its command is the
    # group's OnCreate script; once that succeeded the node stays up ("running") until
    # it is stopped, and nothing is uploaded.
    node: dict[str, Any] | None = None
    # Where the control plane placed it: the capacity pool (the backend gives the
    # instance that pool's GPUs, and places it on a machine that offers the pool) and
    # its availability zone.
    pool: str = ""
    availability_zone: str = ""
    # On a backend whose hosts are on different machines (Ray): the job network
    # (`agent.overlay`) - {"key": hex secret, "peers": {host: [node address, UDP port]}}.
    # The instance gets a network namespace of its own, joined to its peers' by it.
    overlay: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        if not isinstance(data, dict) or not isinstance(data.get("job_name"), str):
            raise ValueError("job.json must be an object with a string job_name")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            # A newer control plane's keys reach an older agent (a warm pool's, running
            # across an upgrade): it runs without them, and says so in its log.
            log.warning("job.json: keys this version does not know, ignored: %s", unknown)
        # None means "the default" for every key that has one, so the control plane may
        # write null for what it does not know.
        values = {k: v for k, v in data.items() if k in known and v is not None}
        for name in ("entrypoint", "arguments", "program", "submit_directory"):
            if name in data:
                values[name] = data[name]
        spec = cls(**values)
        spec.hyperparameters = {str(k): str(v) for k, v in spec.hyperparameters.items()}
        spec.environment = {str(k): str(v) for k, v in spec.environment.items()}
        if spec.host not in spec.hosts:
            raise ValueError(f"host {spec.host!r} is not one of hosts {spec.hosts!r}")
        return spec

    @classmethod
    def from_json(cls, text: str | bytes) -> JobSpec:
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @property
    def rank(self) -> int:
        return self.hosts.index(self.host)

    @property
    def is_leader(self) -> bool:
        """The first host: the one that uploads the model and output, as on SageMaker."""
        return self.rank == 0

    @property
    def unconfined(self) -> bool:
        """--unsafe-no-sandbox: the job runs as a plain process of the agent's."""
        return self.sandbox.get("mode") == "none"

    @property
    def sandbox_uid(self) -> int | None:
        uid = self.sandbox.get("uid")
        return uid if isinstance(uid, int) and not isinstance(uid, bool) and uid > 0 else None

    @property
    def instance_type(self) -> str:
        return str(self.resource_config.get("InstanceType", "ml.local"))
