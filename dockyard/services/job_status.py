"""Training job statuses: every change of TrainingJobStatus and SecondaryStatus goes
through here, checked against the transition tables of `domain.jobs`, and each
secondary change is recorded in SecondaryStatusTransitions as the API shows them."""

from __future__ import annotations

from datetime import datetime

from dockyard.domain import jobs as rules
from dockyard.domain.jobs import JobStatus, Secondary
from dockyard.store.tables import TrainingJob


def transition(job: TrainingJob, status: Secondary, message: str, now: datetime) -> None:
    """Move the secondary status through the checked table, closing the previous entry."""
    old = Secondary(job.secondary_status)
    history = list(job.transitions.get("items", []))
    if old is status and history and history[-1]["StatusMessage"] == message:
        return
    rules.SECONDARY_TRANSITIONS.check(old, status)
    if history:
        history[-1] = {**history[-1], "EndTime": history[-1].get("EndTime") or now.isoformat()}
    history.append(
        {"Status": status.value, "StartTime": now.isoformat(), "StatusMessage": message}
    )
    job.transitions = {"items": history}
    job.secondary_status = status.value
    job.last_modified_time = now


def set_status(job: TrainingJob, status: JobStatus, now: datetime) -> None:
    job.status = rules.JOB_TRANSITIONS.check(JobStatus(job.status), status).value
    job.last_modified_time = now


SECONDARY_ORDER = [
    Secondary.STARTING,
    Secondary.RESTARTING,
    Secondary.PENDING,
    Secondary.DOWNLOADING,
    Secondary.TRAINING,
    Secondary.UPLOADING,
]

STEPS = (
    (Secondary.DOWNLOADING, rules.DOWNLOADING),
    (Secondary.TRAINING, rules.TRAINING),
    (Secondary.UPLOADING, rules.UPLOADING),
)


def catch_up(job: TrainingJob, upto: Secondary, now: datetime) -> None:
    """Record the steps a job went through between two polls, up to `upto`.

    Only a job still on the normal path is caught up; one being stopped is not.
    """
    for status, message in STEPS:
        current = Secondary(job.secondary_status)
        if current not in SECONDARY_ORDER:
            return
        if SECONDARY_ORDER.index(current) < SECONDARY_ORDER.index(status):
            transition(job, status, message, now)
        if status is upto:
            return
