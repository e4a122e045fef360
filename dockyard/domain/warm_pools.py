"""Managed warm pools (spec §5): statuses, the matching key, and who may keep instances.

A warm pool is the instances of a finished job kept for the next matching job. The
pool itself is Available (waiting), InUse (a job runs on it) or Terminated; each job
sees its own view of it in `WarmPoolStatus`: the job that left it Available, then
Reused once another job took it; the job running on it InUse, then Available, and so
on until the pool is Terminated.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dockyard.domain.transitions import Transitions

# The seed's limit wins over the model's 21600 (spec §5.1).
MAX_KEEP_ALIVE_SECONDS = 3600
# A pool passes from job to job for at most this long in all (spec §5.4).
MAX_LIFETIME = timedelta(days=28)
# Failure reasons that say the instances themselves may be damaged: no pool is kept.
INFRASTRUCTURE_FAILURE_PREFIX = "InternalServerError"


class WarmPoolStatus(StrEnum):
    AVAILABLE = "Available"
    IN_USE = "InUse"
    REUSED = "Reused"
    TERMINATED = "Terminated"


_W = WarmPoolStatus
# The pool row: waiting, running a job, or gone.
POOL_TRANSITIONS = Transitions(
    "warm pool",
    {
        _W.AVAILABLE: frozenset({_W.IN_USE, _W.TERMINATED}),
        _W.IN_USE: frozenset({_W.AVAILABLE, _W.TERMINATED}),
        _W.TERMINATED: frozenset(),
    },
)
# A job's view (DescribeTrainingJob's WarmPoolStatus.Status).
JOB_VIEW_TRANSITIONS = Transitions(
    "training job warm pool status",
    {
        _W.IN_USE: frozenset({_W.AVAILABLE, _W.TERMINATED}),
        _W.AVAILABLE: frozenset({_W.REUSED, _W.TERMINATED}),
        _W.REUSED: frozenset(),
        _W.TERMINATED: frozenset(),
    },
)

# Why a pool ended, as `dockyard pools ls` and the logs say it.
EXPIRED = "the keep-alive period ended"
LIFETIME = "the pool reached the 28-day limit"
RELEASED = "released by the user (KeepAlivePeriodInSeconds set to 0)"
NOT_KEPT_ALIVE = "the job that ran on it asked for no keep-alive period"
QUOTA = "the account's warm pool quota for this instance type is used up"
UNHEALTHY = "an instance of the pool is no longer healthy"
INFRASTRUCTURE = "the job failed for a reason that may have damaged the instances"
NO_CAPACITY = "the instances are needed by a reservation that starts now"
MAINTENANCE = "the instances were taken out of service"
STOPPED_EARLY = "the job was stopped before its instances launched"


def keep_alive_seconds(spec: dict[str, Any]) -> int:
    return int(spec.get("ResourceConfig", {}).get("KeepAlivePeriodInSeconds") or 0)


def match_key(spec: dict[str, Any]) -> str:
    """The fields of §5.3, compared exactly: jobs with equal keys may share a pool.

    SessionChainingConfig takes part only when chaining is on; dockyard has no STS
    sessions, so the session keys are always the same (none) and only the flag counts.
    """
    resources = spec.get("ResourceConfig", {})
    vpc = spec.get("VpcConfig") or {}
    chaining = (spec.get("SessionChainingConfig") or {}).get("EnableSessionTagChaining", False)
    fields = {
        "RoleArn": spec.get("RoleArn"),
        "InstanceCount": int(resources.get("InstanceCount", 0)),
        "InstanceType": resources.get("InstanceType"),
        "VolumeKmsKeyId": resources.get("VolumeKmsKeyId"),
        "VolumeSizeInGB": resources.get("VolumeSizeInGB"),
        "SecurityGroupIds": vpc.get("SecurityGroupIds"),
        "Subnets": vpc.get("Subnets"),
        "EnableInterContainerTrafficEncryption": bool(
            spec.get("EnableInterContainerTrafficEncryption", False)
        ),
        "EnableNetworkIsolation": bool(spec.get("EnableNetworkIsolation", False)),
        "SessionTagChaining": bool(chaining),
        # Where the instances come from: a plan's pool serves only that plan's jobs,
        # an on-demand pool only on-demand jobs (spec §3.4).
        "TrainingPlanArn": resources.get("TrainingPlanArn"),
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def refusal(spec: dict[str, Any]) -> str | None:
    """Why a job may not ask for a warm pool at all (spec §5.1, §5.9), or None."""
    keep = keep_alive_seconds(spec)
    if keep == 0:
        return None
    if keep > MAX_KEEP_ALIVE_SECONDS:
        return (
            f"ResourceConfig.KeepAlivePeriodInSeconds is {keep}; managed warm pools keep "
            f"instances for at most {MAX_KEEP_ALIVE_SECONDS} seconds"
        )
    if spec.get("ResourceConfig", {}).get("InstanceGroups"):
        return (
            "Managed warm pools are not supported for heterogeneous clusters: remove "
            "ResourceConfig.KeepAlivePeriodInSeconds or ResourceConfig.InstanceGroups"
        )
    if spec.get("EnableManagedSpotTraining"):
        return (
            "Managed warm pools are not supported with managed spot training: remove "
            "ResourceConfig.KeepAlivePeriodInSeconds or EnableManagedSpotTraining"
        )
    return None


def may_retain(outcome: str, failure_reason: str | None, launched: bool) -> str | None:
    """Whether a finished job's instances may be kept; None if so, else why not (§5.1).

    Completed: yes. Stopped: once its instances launched. Failed: for an algorithm or
    client error, not for an infrastructure one that may have damaged the instances.
    """
    if not launched:
        return STOPPED_EARLY
    if outcome == "failed" and (failure_reason or "").startswith(INFRASTRUCTURE_FAILURE_PREFIX):
        return INFRASTRUCTURE
    return None


def deadline(ended: datetime, keep_alive: int, born: datetime) -> datetime:
    """When a pool left by a job that ended at `ended` goes, at the latest (§5.1, §5.4)."""
    return min(ended + timedelta(seconds=keep_alive), born + MAX_LIFETIME)
