"""Who owns each bucket of the embedded S3 service.

Bucket names are global, as in S3; the account that created a bucket owns it, and
every other account is refused it (AccessDenied) and does not see it in a listing.
A bucket directory nobody created through the API (one an operator made with `mkdir`
under `<data-dir>/s3`, or the `dockyard-jobs` bucket of a new server) belongs to the
development account, the operator's own.

What the database says is also marked beside the store (`dockyard.compute.wire.bucket_marks`)
for the instance agents, which have no database: a bucket's mark is written once its
owner is known and removed before it is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.compute.wire import bucket_marks
from dockyard.domain.job_paths import s3_locations
from dockyard.services.errors import ValidationException
from dockyard.store.tables import Bucket


@dataclass(frozen=True)
class BucketStore:
    """The embedded S3 service's directory, and who owns a bucket nobody created."""

    root: Path
    default_owner: str


def owner(session: Session, name: str, store: BucketStore) -> str | None:
    """The bucket's account; None when there is no such bucket."""
    found = session.scalar(select(Bucket.account_id).where(Bucket.name == name))
    if found is not None:
        return str(found)
    if name not in ("", ".", "..") and "/" not in name and (store.root / name).is_dir():
        # A directory made by hand: the agents learn whose it is the first time it is
        # looked up.
        bucket_marks.mark(store.root, name, store.default_owner)
        return store.default_owner
    return None


def owned(session: Session, account_id: str, store: BucketStore) -> set[str]:
    """Every bucket the account owns (a directory without a row is the default owner's)."""
    names = set(session.scalars(select(Bucket.name).where(Bucket.account_id == account_id)))
    if account_id == store.default_owner and store.root.is_dir():
        recorded = set(session.scalars(select(Bucket.name)))
        names |= {p.name for p in store.root.iterdir() if p.is_dir() and p.name not in recorded}
    return names


def claim(session: Session, name: str, account_id: str, now: datetime) -> bool:
    """Record the account as the bucket's owner; False if another account was first.
    (`mark` it once this is committed.)"""
    try:
        with session.begin_nested():
            session.add(Bucket(name=name, account_id=account_id, created_at=now))
    except IntegrityError:
        return session.scalar(select(Bucket.account_id).where(Bucket.name == name)) == account_id
    return True


def mark(store: BucketStore, name: str, account_id: str) -> None:
    """Once the bucket's owner is committed: the agents may use it for that account."""
    bucket_marks.mark(store.root, name, account_id)


def unmark(store: BucketStore, name: str) -> None:
    """Before a bucket is deleted: no agent uses it from now on."""
    bucket_marks.unmark(store.root, name)


def forget(session: Session, name: str) -> None:
    session.execute(delete(Bucket).where(Bucket.name == name))


def mark_all(session: Session, store: BucketStore) -> None:
    """Every bucket directory's mark, as the database says (at the server's start: the
    marks of a data dir from before they existed, or left by a crash)."""
    if not store.root.is_dir():
        return
    recorded = {str(n): str(a) for n, a in session.execute(select(Bucket.name, Bucket.account_id))}
    for path in store.root.iterdir():
        if path.is_dir() and not path.is_symlink():
            bucket_marks.mark(store.root, path.name, recorded.get(path.name, store.default_owner))


def check_job_buckets(
    session: Session, account_id: str, params: dict[str, object], store: BucketStore
) -> None:
    """A job reads and writes only its own account's buckets (spec §4.8): a request
    naming another account's is refused, as S3 would refuse the job's requests."""
    for field, uri in s3_locations(params):
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        found = owner(session, bucket, store)
        if found is not None and found != account_id:
            raise ValidationException(
                f'{field}: access to the bucket "{bucket}" is denied: it belongs to another '
                "account"
            )


def put_object(
    session: Session, store: BucketStore, account_id: str, bucket: str, key: str, data: bytes
) -> str:
    """Write one object of the account's own bucket (as the gateway stores it: a file of
    `<root>/<bucket>/<key>`, whole or not at all); its s3:// URI. The key is the
    caller's own making (no `.`/`..` segments), never a request's."""
    if owner(session, bucket, store) != account_id:
        raise ValidationException(f"the bucket {bucket!r} is not one of this account's")
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") for p in parts):
        raise ValidationException(f"{key!r} is not an object key dockyard writes")
    path = store.root.joinpath(bucket, *parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    partial.replace(path)
    return f"s3://{bucket}/{key}"
