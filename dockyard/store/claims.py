"""Claims: a reconciler takes a row for the length of one step, so that servers sharing a
database never act on the same row at the same time. Any table with the claim columns
(`tables.Claimed`: training jobs, clusters, warm pools, training plans) is claimed the
same way; `control/pattern.py` is the step built on it.

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
from typing import Any, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from dockyard.clock import wall_now
from dockyard.store.tables import Claimed, TrainingJob

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


# Any table that carries a claim (`tables.Claimed`): jobs, clusters, warm pools, plans.
Row = TypeVar("Row", bound=Claimed)


def claim(
    session: Session, table: type[Row], row_id: int, claimant: Claimant, token: str
) -> Row | None:
    """The row, claimed for this step under `token` (and locked until the transaction
    ends, where the database locks rows); None if another server is stepping it, or
    the row is gone."""
    now = wall_now()
    free = or_(
        table.claim_owner.is_(None),
        table.claim_owner == claimant.owner,
        table.claim_expires_at < now,
    )
    if not _take(session, table, row_id, free, claimant, token, now):
        holder: str | None = session.execute(
            select(table.claim_owner).where(_id(table) == row_id)
        ).scalar()
        if holder is None or not claimant.gone(holder):
            return None
        # Compare-and-set on the owner read: of two servers breaking one dead claim,
        # one wins.
        if not _take(session, table, row_id, table.claim_owner == holder, claimant, token, now):
            return None
    return held_row(session, table, row_id, token)


def claim_job(session: Session, job_id: int, claimant: Claimant, token: str) -> TrainingJob | None:
    """A training job, claimed (see `claim`)."""
    return claim(session, TrainingJob, job_id, claimant, token)


def _take(
    session: Session,
    table: type[Claimed],
    row_id: int,
    condition: object,
    claimant: Claimant,
    token: str,
    now: datetime,
) -> bool:
    result = session.execute(
        update(table)
        .where(_id(table) == row_id, condition)  # type: ignore[arg-type]
        .values(
            claim_owner=claimant.owner,
            claim_token=token,
            claim_expires_at=now + timedelta(seconds=claimant.seconds),
        )
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def held_row(session: Session, table: type[Row], row_id: int, token: str) -> Row | None:
    """The row if it is still claimed under `token`, locked until the transaction ends;
    None if the claim was lost (it expired and another server took the row over)."""
    found: Row | None = session.execute(
        select(table)
        .where(_id(table) == row_id, table.claim_token == token)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar()
    return found


def _id(table: type[Claimed]) -> Any:
    """The row's primary key column (every claimed table's is an integer `id`)."""
    return table.id  # type: ignore[attr-defined]


def held(session: Session, job_id: int, token: str) -> TrainingJob | None:
    """A training job still claimed under `token` (see `held_row`)."""
    return held_row(session, TrainingJob, job_id, token)


def release(row: Claimed) -> None:
    """Give the claim up (in the step's last transaction)."""
    row.claim_owner = None
    row.claim_token = None
    row.claim_expires_at = None
