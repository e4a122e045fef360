"""Claims: a reconciler takes a row for the length of one step, so that servers sharing a
database never act on the same row at the same time.

A step is two short transactions with slow work between them and no session open
(launching instances, reading their state): the first claims the row (owner, a token
of this step, an expiry), the last finds the row still under that token, applies
the result and gives the claim up. Whoever claims a row another holds is refused until
the claim expires, or at once when its owner is known to be gone (a server on this host
that is no longer running, or from before this host's last boot): a server killed in
the middle of a step holds up nothing after its restart.

Expiry is measured on the wall clock (`clock.wall_now`): the control plane's clock may
be a manual one that jumps by days.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from dockyard.clock import wall_now
from dockyard.store.tables import TrainingJob

# Longer than any step takes (a step never waits on a job, only on files and a fork).
CLAIM_SECONDS = 60


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "-"


def _start_ticks(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot): a pid reused later differs."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _this_process() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}/{_boot_id()}/{pid}/{_start_ticks(pid) or '-'}"


@dataclass(frozen=True)
class Claimant:
    """One server process, as a claim names it: host, boot, pid and the pid's start."""

    owner: str = field(default_factory=_this_process)
    seconds: int = CLAIM_SECONDS

    def gone(self, owner: str) -> bool:
        """Whether `owner` is known to hold nothing any more: on this host, not running
        (or from an earlier boot). A server on another host is waited out."""
        try:
            host, boot, pid, start = owner.split("/")
        except ValueError:
            return False
        mine_host, mine_boot, _, _ = self.owner.split("/")
        if host != mine_host:
            return False
        if boot != mine_boot:
            return True
        return not pid.isdigit() or _start_ticks(int(pid)) != start


def new_token() -> str:
    return uuid.uuid4().hex


def claim_job(session: Session, job_id: int, claimant: Claimant, token: str) -> TrainingJob | None:
    """The job, claimed for this step under `token` (and locked until the transaction
    ends, where the database locks rows); None if another server is stepping it."""
    now = wall_now()
    free = or_(
        TrainingJob.claim_owner.is_(None),
        TrainingJob.claim_owner == claimant.owner,
        TrainingJob.claim_expires_at < now,
    )
    if not _take(session, job_id, free, claimant, token, now):
        holder = session.scalar(select(TrainingJob.claim_owner).where(TrainingJob.id == job_id))
        if holder is None or not claimant.gone(holder):
            return None
        # Compare-and-set on the owner read: of two servers breaking one dead claim,
        # one wins.
        if not _take(session, job_id, TrainingJob.claim_owner == holder, claimant, token, now):
            return None
    return held(session, job_id, token)


def _take(
    session: Session, job_id: int, condition: object, claimant: Claimant, token: str, now: datetime
) -> bool:
    result = session.execute(
        update(TrainingJob)
        .where(TrainingJob.id == job_id, condition)  # type: ignore[arg-type]
        .values(
            claim_owner=claimant.owner,
            claim_token=token,
            claim_expires_at=now + timedelta(seconds=claimant.seconds),
        )
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def held(session: Session, job_id: int, token: str) -> TrainingJob | None:
    """The job if it is still claimed under `token`, locked until the transaction ends;
    None if the claim was lost (it expired and another server took the job)."""
    return session.scalar(
        select(TrainingJob)
        .where(TrainingJob.id == job_id, TrainingJob.claim_token == token)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def release(job: TrainingJob) -> None:
    """Give the claim up (in the step's last transaction)."""
    job.claim_owner = None
    job.claim_token = None
    job.claim_expires_at = None
