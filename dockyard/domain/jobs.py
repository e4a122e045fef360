"""Training-job rules: statuses, their checked transitions, and SageMaker's messages.

`TrainingJobStatus` is what the job is (InProgress until it ends); `SecondaryStatus`
is what it is doing, with SageMaker's own words for each step (spec §4.2).
"""

from __future__ import annotations

from enum import StrEnum

from dockyard.domain.transitions import Transitions


class JobStatus(StrEnum):
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"


class Secondary(StrEnum):
    STARTING = "Starting"
    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    COMPLETED = "Completed"
    FAILED = "Failed"
    # A job on a training plan whose block ended under it, and its return (spec §3.4).
    INTERRUPTED = "Interrupted"
    RESTARTING = "Restarting"


_J = JobStatus
JOB_TRANSITIONS = Transitions(
    "training job",
    {
        _J.IN_PROGRESS: frozenset({_J.COMPLETED, _J.FAILED, _J.STOPPING, _J.STOPPED}),
        _J.STOPPING: frozenset({_J.STOPPED, _J.FAILED, _J.COMPLETED}),
        _J.COMPLETED: frozenset(),
        _J.FAILED: frozenset(),
        _J.STOPPED: frozenset(),
    },
)
TERMINAL = frozenset({_J.COMPLETED, _J.FAILED, _J.STOPPED})

_S = Secondary
_ENDS = frozenset({_S.STOPPING, _S.STOPPED, _S.FAILED, _S.MAX_RUNTIME_EXCEEDED})
SECONDARY_TRANSITIONS = Transitions(
    "training job secondary status",
    {
        _S.STARTING: frozenset({_S.PENDING, _S.DOWNLOADING, _S.TRAINING, _S.INTERRUPTED}) | _ENDS,
        _S.PENDING: frozenset({_S.STARTING, _S.RESTARTING}) | _ENDS,
        _S.DOWNLOADING: frozenset({_S.TRAINING, _S.UPLOADING, _S.INTERRUPTED}) | _ENDS,
        _S.TRAINING: frozenset({_S.UPLOADING, _S.COMPLETED, _S.INTERRUPTED}) | _ENDS,
        _S.UPLOADING: frozenset({_S.COMPLETED, _S.INTERRUPTED}) | _ENDS,
        _S.INTERRUPTED: frozenset({_S.PENDING, _S.RESTARTING}) | _ENDS,
        _S.RESTARTING: frozenset({_S.DOWNLOADING, _S.TRAINING, _S.INTERRUPTED, _S.PENDING})
        | _ENDS,
        # A job may finish on its own before a stop reaches it.
        _S.STOPPING: frozenset({_S.STOPPED, _S.MAX_RUNTIME_EXCEEDED, _S.FAILED, _S.COMPLETED}),
        _S.STOPPED: frozenset(),
        _S.MAX_RUNTIME_EXCEEDED: frozenset(),
        _S.COMPLETED: frozenset(),
        _S.FAILED: frozenset(),
    },
)

# SageMaker's status messages, word for word.
STARTING = "Starting the training job."
LAUNCHING = "Launching requested ML instances."
PREPARING = "Preparing the instances for training."
DOWNLOADING = "Downloading input data"
TRAINING = "Training image download completed. Training in progress."
UPLOADING = "Uploading generated training model"
COMPLETED = "Training job completed"
STOPPING = "Stopping the training job."
STOPPED = "Training job stopped."
MAX_RUNTIME = "Training job reached the maximum allowed runtime and was stopped."
FAILED = "Training job failed."


def warm_start(previous_job: str) -> str:
    """The Starting message of a job that reuses a warm pool (spec §4.2)."""
    return f"Starting the training job using a warm pool (the instances of {previous_job})."


def instance_key(account_id: str, region: str, job_name: str, uid: str | None = None) -> str:
    """The name of a job's instances on a backend: unique per account, region and job,
    and per job created under that name (its uid; jobs from before uids have none)."""
    base = f"{account_id}-{region}-{job_name}"
    return f"{base}-{uid}" if uid else base


def host_names(count: int) -> list[str]:
    """A job's instances as SageMaker names them: algo-1 .. algo-N."""
    return [f"algo-{i}" for i in range(1, count + 1)]
