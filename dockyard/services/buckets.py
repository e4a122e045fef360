"""Who owns each bucket of the embedded S3 service.

Bucket names are global, as in S3; the account that created a bucket owns it, and
every other account is refused it (AccessDenied) and does not see it in a listing.
A bucket directory nobody created through the API (one an operator made with `mkdir`
under `<data-dir>/s3`, or the `dockyard-jobs` bucket of a new server) belongs to the
development account, the operator's own.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.store.tables import Bucket


def owner(session: Session, name: str, store: Path, default_owner: str) -> str | None:
    """The bucket's account; None when there is no such bucket."""
    found = session.scalar(select(Bucket.account_id).where(Bucket.name == name))
    if found is not None:
        return str(found)
    if name not in ("", ".", "..") and "/" not in name and (store / name).is_dir():
        return default_owner
    return None


def owned(session: Session, account_id: str, store: Path, default_owner: str) -> set[str]:
    """Every bucket the account owns (a directory without a row is the default owner's)."""
    rows = dict(session.execute(select(Bucket.name, Bucket.account_id)).tuples().all())
    names = {name for name, account in rows.items() if account == account_id}
    if account_id == default_owner and store.is_dir():
        names |= {p.name for p in store.iterdir() if p.is_dir() and p.name not in rows}
    return names


def claim(session: Session, name: str, account_id: str, now: datetime) -> bool:
    """Record the account as the bucket's owner; False if another account was first."""
    try:
        with session.begin_nested():
            session.add(Bucket(name=name, account_id=account_id, created_at=now))
    except IntegrityError:
        return session.scalar(select(Bucket.account_id).where(Bucket.name == name)) == account_id
    return True


def forget(session: Session, name: str) -> None:
    session.execute(delete(Bucket).where(Bucket.name == name))
