"""The console's sessions that have not ended, kept in the database (issue 25).

A console cookie is sealed, so nobody can forge one, but a sealed cookie alone cannot
be taken back: one copied before its owner signed out worked for its 12 hours, and a
session of a key that was disabled worked again once the key was enabled. So each
sign-in is a row here, named by a random id that the cookie carries; a cookie works
only while its row exists and has not expired. Signing out removes the row, disabling
or deleting a key removes every row of the key (`accounts`), and every server on the
database sees it at once, across restarts.

The table stays small: expired rows are removed at each sign-in, and a key (or the
operator) keeps at most `MAX_PER_PRINCIPAL` sessions - its oldest ends when it signs in
once more.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlalchemy import Connection, delete, select
from sqlalchemy.orm import Session

from dockyard.store.tables import ConsoleSession

MAX_PER_PRINCIPAL = 20


def begin(session: Session, now: datetime, principal: str, expires_at: datetime) -> str:
    """A new session of `principal` (an access key id, or "operator"); answer its id."""
    session.execute(delete(ConsoleSession).where(ConsoleSession.expires_at <= now))
    kept = list(
        session.scalars(
            select(ConsoleSession.id)
            .where(ConsoleSession.principal == principal)
            .order_by(ConsoleSession.created_at.desc(), ConsoleSession.id)
            .offset(MAX_PER_PRINCIPAL - 1)
        )
    )
    if kept:
        session.execute(delete(ConsoleSession).where(ConsoleSession.id.in_(kept)))
    session_id = secrets.token_urlsafe(24)
    session.add(
        ConsoleSession(id=session_id, principal=principal, created_at=now, expires_at=expires_at)
    )
    session.flush()
    return session_id


def live(connection: Connection | Session, session_id: str, principal: str, now: datetime) -> bool:
    """Whether the session has not ended: it exists, is `principal`'s, and has not expired."""
    table = ConsoleSession.__table__
    expires_at = connection.execute(
        select(table.c.expires_at).where(table.c.id == session_id, table.c.principal == principal)
    ).scalar()
    return expires_at is not None and expires_at > now


def end(session: Session, session_id: str) -> None:
    """Sign one session out (nothing if it ended already)."""
    session.execute(delete(ConsoleSession).where(ConsoleSession.id == session_id))


def end_all(session: Session, principal: str) -> None:
    """End every session of `principal` (its key was disabled or deleted)."""
    session.execute(delete(ConsoleSession).where(ConsoleSession.principal == principal))
