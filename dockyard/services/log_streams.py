"""The log groups and streams dockyard answers, found through the backend that ran the
instances (`compute.backends.protocol.InstanceRecords`: which of a job's instances have
a log, and each log).

`/aws/sagemaker/TrainingJobs`: one stream per instance of a job, `<job>/algo-N-<epoch>`
(epoch: the job's CreationTime in whole seconds). `/aws/sagemaker/Clusters/<name>/<id>`:
one stream per node of a HyperPod cluster, `LifecycleConfig/<instance group>/<instance
id>`. Both scoped to the caller's account and region; `logs` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select

from dockyard.clock import utc
from dockyard.compute.backends.protocol import InstanceLog, InstanceRecords
from dockyard.domain.jobs import instance_key
from dockyard.services.errors import ServiceError
from dockyard.store.tables import Cluster, TrainingJob

GROUP = "/aws/sagemaker/TrainingJobs"
JOBS = TrainingJob.__table__
CLUSTERS = Cluster.__table__
# A HyperPod cluster's log group: /aws/sagemaker/Clusters/<cluster name>/<cluster id>.
_CLUSTER_GROUP = re.compile(
    r"/aws/sagemaker/Clusters/([a-zA-Z0-9](?:-*[a-zA-Z0-9])*)/([a-z0-9]{12})"
)
_SCOPE = (JOBS.c.account_id == bindparam("account_id"), JOBS.c.region == bindparam("region"))
_ALL_JOBS = select(JOBS.c.name, JOBS.c.creation_time, JOBS.c.uid).where(*_SCOPE)
_ONE_JOB = _ALL_JOBS.where(JOBS.c.name == bindparam("name"))
RUNTIME = select(JOBS.c.runtime, JOBS.c.uid).where(*_SCOPE, JOBS.c.name == bindparam("name"))
_HOST = re.compile(r"algo-([1-9][0-9]*)")
_STREAM_SUFFIX = re.compile(r"(algo-[1-9][0-9]*)-([0-9]+)")


class ResourceNotFoundException(ServiceError):
    code = "ResourceNotFoundException"


class InvalidParameterException(ServiceError):
    code = "InvalidParameterException"


GROUP_NOT_FOUND = "The specified log group does not exist."
STREAM_NOT_FOUND = "The specified log stream does not exist."


@dataclass(frozen=True)
class Stream:
    name: str
    job_name: str
    host: str
    job_created_ms: int
    key: str  # the backend's name for the instances (with `host`: the instance)

    def open(self, records: InstanceRecords) -> InstanceLog:
        return records.open_log(self.key, self.host)


def _epoch_seconds(moment: datetime) -> int:
    return int(utc(moment).timestamp())


def _streams_of(
    records: InstanceRecords,
    account_id: str,
    region: str,
    name: str,
    uid: str | None,
    created: datetime,
) -> list[Stream]:
    epoch = _epoch_seconds(created)
    key = instance_key(account_id, region, name, uid)
    return [
        Stream(
            name=f"{name}/{host}-{epoch}",
            job_name=name,
            host=host,
            job_created_ms=int(utc(created).timestamp() * 1000),
            key=key,
        )
        for host in records.logged_hosts(key)
    ]


def _job_streams(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    prefix: str = "",
) -> list[Stream]:
    scope = {"account_id": account_id, "region": region}
    job_name, slash, _ = prefix.partition("/")
    if slash:  # the prefix names one job
        rows = connection.execute(_ONE_JOB, {**scope, "name": job_name}).all()
    else:
        rows = connection.execute(_ALL_JOBS, scope).all()
    streams = [
        stream
        for row in rows
        if row.name.startswith(job_name)
        for stream in _streams_of(
            records, account_id, region, row.name, row.uid, row.creation_time
        )
        if stream.name.startswith(prefix)
    ]
    streams.sort(key=lambda stream: stream.name)
    return streams


def _find_job_stream(
    connection: Connection, records: InstanceRecords, account_id: str, region: str, name: str
) -> Stream:
    job_name, _, suffix = name.partition("/")
    parts = _STREAM_SUFFIX.fullmatch(suffix)
    if parts is None:
        raise ResourceNotFoundException(STREAM_NOT_FOUND)
    row = connection.execute(
        _ONE_JOB, {"account_id": account_id, "region": region, "name": job_name}
    ).first()
    if row is None:
        raise ResourceNotFoundException(STREAM_NOT_FOUND)
    for stream in _streams_of(records, account_id, region, row.name, row.uid, row.creation_time):
        if stream.name == name:
            return stream
    raise ResourceNotFoundException(STREAM_NOT_FOUND)


# ------------------------------------------------------------------ groups


@dataclass(frozen=True)
class Group:
    """A log group dockyard answers: the training jobs', or one cluster's."""

    name: str
    # For a cluster's group (`/aws/sagemaker/Clusters/<name>/<id>`): its id and when it
    # was created.
    cluster_id: str | None = None
    created_ms: int = 0


def check_group(
    params: Mapping[str, Any], account_id: str, region: str, connection: Connection
) -> Group:
    name = params.get("logGroupName")
    identifier = params.get("logGroupIdentifier")
    if name and identifier:
        raise InvalidParameterException(
            "LogGroup name and LogGroup ARN are mutually exclusive parameters."
        )
    if not name and not identifier:
        raise InvalidParameterException(
            "Either logGroupName or logGroupIdentifier must be specified."
        )
    group = str(name or identifier)
    if group.startswith("arn:"):
        prefix = f"arn:aws:logs:{region}:{account_id}:log-group:"
        if not group.startswith(prefix):
            raise ResourceNotFoundException(GROUP_NOT_FOUND)
        group = group.removeprefix(prefix).removesuffix(":*")
    if group == GROUP:
        return Group(GROUP)
    parts = _CLUSTER_GROUP.fullmatch(group)
    if parts is not None:
        row = connection.execute(
            select(CLUSTERS.c.cluster_id, CLUSTERS.c.created_at).where(
                CLUSTERS.c.account_id == account_id,
                CLUSTERS.c.region == region,
                CLUSTERS.c.name == parts.group(1),
                CLUSTERS.c.cluster_id == parts.group(2),
            )
        ).first()
        if row is not None:
            created = int(utc(row.created_at).timestamp() * 1000)
            return Group(group, cluster_id=row.cluster_id, created_ms=created)
    raise ResourceNotFoundException(GROUP_NOT_FOUND)


def _cluster_streams(
    records: InstanceRecords, account_id: str, region: str, group: Group, prefix: str = ""
) -> list[Stream]:
    """A cluster's streams, one per node that has run (`LifecycleConfig/<instance group>/
    <instance id>`, as HyperPod names them): found through the backend, so a node that
    is gone keeps its log until the cluster is deleted."""
    streams = []
    for key, host in records.logged_instances(
        f"{account_id}-{region}-cluster-{group.cluster_id}-"
    ):
        spec = records.launched_spec(key, host)
        instance_group = (spec.node or {}).get("group") if spec is not None else None
        if not isinstance(instance_group, str):
            continue
        name = f"LifecycleConfig/{instance_group}/{host}"
        if name.startswith(prefix):
            streams.append(Stream(name, group.name, host, group.created_ms, key))
    streams.sort(key=lambda stream: stream.name)
    return streams


def streams(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    group: Group,
    prefix: str = "",
) -> list[Stream]:
    if group.cluster_id is not None:
        return _cluster_streams(records, account_id, region, group, prefix)
    return _job_streams(connection, records, account_id, region, prefix)


def find_stream(
    connection: Connection,
    records: InstanceRecords,
    account_id: str,
    region: str,
    group: Group,
    name: str,
) -> Stream:
    if group.cluster_id is None:
        return _find_job_stream(connection, records, account_id, region, name)
    for stream in _cluster_streams(records, account_id, region, group, name):
        if stream.name == name:
            return stream
    raise ResourceNotFoundException(STREAM_NOT_FOUND)
