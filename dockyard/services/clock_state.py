"""Persisting the manual clock, so a restart resumes at the instant it had reached."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from dockyard.store.tables import ClockState


def load(session: Session) -> datetime | None:
    row = session.get(ClockState, 1)
    return row.now if row is not None else None


def save(session: Session, now: datetime) -> None:
    row = session.get(ClockState, 1)
    if row is None:
        session.add(ClockState(id=1, now=now))
    else:
        row.now = now
