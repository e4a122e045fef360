"""What each instance of a training job is told: its host spec (the agent's `job.json`):
the job's request as the container contract needs it, the interpreter that stands for
its image, its sandbox's limits, where S3 is, and where to send wake-ups."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import Any

from dockyard.compute.wire import wake
from dockyard.compute.wire.bucket_marks import owners_dir
from dockyard.compute.wire.spec import JobSpec
from dockyard.config import Settings
from dockyard.domain import instance_types
from dockyard.domain import jobs as rules
from dockyard.domain.clusters import ON_CREATE_SECONDS
from dockyard.domain.job_runtime import JobRuntime
from dockyard.domain.warm_pools import keep_alive_seconds
from dockyard.services.accounts import Credentials
from dockyard.store.tables import Cluster, ClusterNode, TrainingJob

log = logging.getLogger("dockyard.control.jobs")
STOP_GRACE_SECONDS = 10
# Where a node finds its group's lifecycle scripts: /opt/ml/input/data/<this>.
LIFE_CYCLE_CHANNEL = "lifecycle"


def instance_key(job: TrainingJob) -> str:
    """The backend's name for the job's own instances."""
    return rules.instance_key(job.account_id, job.region, job.name, job.uid)


def _connect_host(bound: str) -> str:
    """Where this host reaches a server bound to `bound` (a wildcard means every
    address of the host: its loopback is one)."""
    if bound in ("", "0.0.0.0"):
        return "127.0.0.1"
    if bound == "::":
        return "::1"
    return bound


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HostSpecs:
    def __init__(self, settings: Settings) -> None:
        self.data_dir = Path(settings.data_dir).resolve()
        # TrainingImage -> the interpreter that stands for it on this backend ([images]).
        self.images = {str(k): str(v) for k, v in dict(settings.extra.get("images", {})).items()}
        # What one instance of a type may use: its sandbox's limits (spec §4.8).
        self.instance_types = instance_types.catalogue(settings.extra.get("instance_types"))
        self.sandbox_mode = settings.sandbox
        # Where the instances find s3:// URIs: a real S3-compatible service, or directories.
        # No stored spec holds the service's secret (`launchable` adds it).
        self.s3: dict[str, Any] = (
            {
                "endpoint_url": settings.s3_endpoint_url,
                "access_key_id": settings.s3_access_key_id,
                "region": settings.s3_region,
            }
            if settings.s3_endpoint_url
            # Agents use only buckets the server marked as their job's account's.
            else {
                "root": str(self.data_dir / "s3"),
                "owners": str(owners_dir(self.data_dir / "s3")),
            }
        )
        # A cluster node reaches S3 through its agent's relay to this server's endpoint,
        # when S3 is dockyard's own (an outside service's keys are the operator's, never
        # a tenant's to hold).
        self.nodes_reach_s3 = not settings.s3_endpoint_url
        self.server = (_connect_host(settings.host), settings.port)
        self._s3_secret = settings.s3_secret_access_key if settings.s3_endpoint_url else ""

    def launchable(self, stored: list[dict[str, Any]]) -> list[JobSpec]:
        """A job's stored specs (`for_job`'s, kept with the job) as its instances get
        them: with the S3 service's secret, which is the server's configuration's and
        never kept in the database."""
        s3 = self._launched_s3()
        return [JobSpec.from_dict({**spec, "s3": s3}) for spec in stored]

    def _launched_s3(self) -> dict[str, Any]:
        if not self._s3_secret:
            return self.s3
        return {**self.s3, "secret_access_key": self._s3_secret}

    def _sandbox(self, instance_type: str) -> dict[str, Any]:
        kind = instance_types.describe(instance_type, self.instance_types)
        return {
            "mode": self.sandbox_mode,
            "limits": {
                "memory_bytes": kind.memory_bytes,
                "cpus": kind.vcpus,
                "pids": kind.max_pids,
            },
        }

    def for_node(
        self,
        cluster: Cluster,
        group: dict[str, Any],
        node: ClusterNode,
        credentials: Credentials | None = None,
    ) -> JobSpec:
        """What a cluster's node runs (`job.json`): its group's lifecycle scripts staged
        as a channel, and its OnCreate script run from there; then it stays up. With
        `credentials` (the node's own key) its programs reach S3 through its agent."""
        life_cycle = group["LifeCycleConfig"]
        reach: dict[str, Any] = {"cluster": cluster.name, "group": node.instance_group}
        if credentials is not None:
            reach["s3"] = {
                "host": self.server[0],
                "port": self.server[1],
                "access_key_id": credentials.access_key_id,
                "secret_access_key": credentials.secret_access_key,
                "region": cluster.region,
            }
        return JobSpec(
            job_name=cluster.name,
            host=node.instance_id,
            hosts=[node.instance_id],
            input_data_config=[
                {
                    "ChannelName": LIFE_CYCLE_CHANNEL,
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": life_cycle["SourceS3Uri"],
                            "S3DataDistributionType": "FullyReplicated",
                        }
                    },
                }
            ],
            resource_config={
                "InstanceType": node.instance_type,
                "InstanceCount": 1,
                "VolumeSizeInGB": 30,
            },
            # The script's name is an argument, never part of the shell's text.
            entrypoint=[
                "/bin/sh",
                "-c",
                f'cd /opt/ml/input/data/{LIFE_CYCLE_CHANNEL} && exec /bin/sh "./$0"',
                life_cycle["OnCreate"],
            ],
            python=sys.executable,
            max_runtime_seconds=ON_CREATE_SECONDS,
            stop_grace_seconds=STOP_GRACE_SECONDS,
            # Made for each launch, never stored: the service's secret may be in it.
            s3=self._launched_s3(),
            uv_cache_dir=str(self.data_dir / "uv-cache" / cluster.account_id),
            job_arn=cluster.arn,
            account_id=cluster.account_id,
            sandbox=self._sandbox(node.instance_type),
            availability_zone=node.availability_zone,
            pool=node.pool_key,
            wake_socket=str(wake.directory(self.data_dir)),
            node=reach,
        )

    def for_job(self, job: TrainingJob, runtime: JobRuntime) -> list[dict[str, Any]]:
        """One spec per host of the job: what its agent runs (`JobSpec`'s keys), as the
        job keeps it - without the S3 service's secret (`launchable`)."""
        placement = runtime.placement
        assert placement is not None  # specs are made for placed jobs only
        spec = job.spec
        count = int(spec["ResourceConfig"]["InstanceCount"])
        hosts = rules.host_names(count)
        hyper = dict(spec.get("HyperParameters", {}))
        algorithm = spec["AlgorithmSpecification"]
        checkpoint = spec.get("CheckpointConfig") or {}
        image = algorithm.get("TrainingImage") or ""
        python = self.images.get(image)
        if python is None:
            python = sys.executable
            log.info(
                "training job %s: image %s is not in [images]; it runs on the server's own "
                "Python (%s)",
                job.name,
                image,
                python,
            )
        port = _free_port()
        sandbox = self._sandbox(spec["ResourceConfig"]["InstanceType"])
        return [
            {
                "job_name": job.name,
                "host": host,
                "hosts": hosts,
                "hyperparameters": hyper,
                "input_data_config": spec.get("InputDataConfig", []),
                "resource_config": spec["ResourceConfig"],
                "entrypoint": algorithm.get("ContainerEntrypoint"),
                "arguments": algorithm.get("ContainerArguments"),
                # As the SDK sends them (JSON-quoted); the agent decodes them.
                "program": hyper.get("sagemaker_program"),
                "submit_directory": hyper.get("sagemaker_submit_directory"),
                "python": python,
                "environment": spec.get("Environment", {}),
                "output_path": spec["OutputDataConfig"]["S3OutputPath"],
                "checkpoint_s3_uri": checkpoint.get("S3Uri"),
                "checkpoint_local_path": checkpoint.get("LocalPath", "/opt/ml/checkpoints"),
                # MaxRuntime counts only time actually run (earlier attempts on a plan).
                "max_runtime_seconds": max(
                    1,
                    int(spec["StoppingCondition"]["MaxRuntimeInSeconds"])
                    - int(runtime.used_seconds),
                ),
                "attempt": runtime.attempt,
                "stop_grace_seconds": STOP_GRACE_SECONDS,
                "s3": self.s3,
                "master_port": port,
                "network_isolation": bool(spec.get("EnableNetworkIsolation", False)),
                # The account's own: a cache is code that the next install runs.
                "uv_cache_dir": str(self.data_dir / "uv-cache" / job.account_id),
                "job_arn": job.arn,
                "account_id": job.account_id,
                "sandbox": sandbox,
                "availability_zone": placement.az,
                # The capacity pool it runs in: the backend gives it that pool's GPUs.
                "pool": placement.pool,
                "keep_alive_seconds": keep_alive_seconds(spec),
                "metric_definitions": algorithm.get("MetricDefinitions") or [],
                "wake_socket": str(wake.directory(self.data_dir)),
            }
            for host in hosts
        ]
