"""Accounts and their access keys: who may call dockyard, and whose resources are whose.

A key is Active or Inactive (IAM's words; `dockyard keys disable|enable`), or deleted.
Only an Active key is ever found for a request, and disabling or deleting a key ends its
console sessions for good (`console_sessions`). Servers cache the keys they found
(`api.keys.KeyCache`); a key disabled or deleted outside the server (the `dockyard keys`
commands work on the database) is announced in the data dir's revocation file, which
every server on that data dir looks at before it trusts its cache.
"""

from __future__ import annotations

import enum
import os
import secrets
import string
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import Connection, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.domain.policy import PolicyError, parse_policy
from dockyard.secretbox import SecretBox
from dockyard.services import console_sessions
from dockyard.services.errors import ConflictException, ResourceNotFound, ValidationException
from dockyard.store.tables import AccessKey, Account

DEVELOPMENT_ACCOUNT = "development"
# In the data dir: one line appended for every key disabled or deleted. Its size only
# grows, so a server that saw another size knows its cached keys may be stale.
REVOCATIONS_FILE = "revoked-keys"
_KEY_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


class KeyStatus(enum.Enum):
    ACTIVE = "Active"
    INACTIVE = "Inactive"


@dataclass(frozen=True)
class Credentials:
    account_id: str
    access_key_id: str
    secret_access_key: str


@dataclass(frozen=True)
class KeyRecord:
    """What request verification needs to know about an access key."""

    access_key_id: str
    account_id: str
    secret_access_key: str
    policy: str | None


def _new_account_id(session: Session) -> str:
    while True:
        candidate = str(secrets.randbelow(9 * 10**11) + 10**11)
        if session.get(Account, candidate) is None:
            return candidate


def create_account(
    session: Session, now: datetime, name: str, account_id: str | None = None
) -> Account:
    if not name or len(name) > 64:
        raise ValidationException("account name must be 1 to 64 characters")
    if account_id is not None and (len(account_id) != 12 or not account_id.isdigit()):
        raise ValidationException(f"account id must be 12 digits (got {account_id!r})")
    if session.scalar(select(Account).where(Account.name == name)) is not None:
        raise ConflictException(f"an account named {name!r} already exists")
    account = Account(id=account_id or _new_account_id(session), name=name, created_at=now)
    session.add(account)
    try:
        session.flush()
    except IntegrityError as exc:
        raise ConflictException(f"account {account.id} already exists") from exc
    return account


def find_account(session: Session, id_or_name: str) -> Account:
    account = session.get(Account, id_or_name) or session.scalar(
        select(Account).where(Account.name == id_or_name)
    )
    if account is None:
        raise ResourceNotFound(f"no account with id or name {id_or_name!r}")
    return account


def list_accounts(session: Session) -> list[Account]:
    return list(session.scalars(select(Account).order_by(Account.created_at, Account.id)))


def create_access_key(
    session: Session, now: datetime, box: SecretBox, account_id: str, policy: str | None = None
) -> Credentials:
    """A new key for the account; `policy` (IAM JSON) limits what it may do, None nothing."""
    if policy is not None:
        try:
            # Stored compact, as parsed: what is enforced is exactly what was validated.
            policy = parse_policy(policy).text
        except PolicyError as exc:
            raise ValidationException(f"invalid policy: {exc}") from exc
    account = find_account(session, account_id)
    access_key_id = "AKIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    session.add(
        AccessKey(
            access_key_id=access_key_id,
            account_id=account.id,
            secret_ciphertext=box.encrypt(secret),
            policy=policy,
            created_at=now,
            status=KeyStatus.ACTIVE.value,
        )
    )
    session.flush()
    return Credentials(account.id, access_key_id, secret)


def list_access_keys(session: Session, account_id: str | None = None) -> list[AccessKey]:
    query = select(AccessKey).order_by(AccessKey.created_at)
    if account_id is not None:
        query = query.where(AccessKey.account_id == account_id)
    return list(session.scalars(query))


def lookup_key(
    connection: Connection | Session,
    box: SecretBox,
    access_key_id: str,
    *,
    active_only: bool = True,
) -> KeyRecord | None:
    """The key, if it exists and (unless `active_only` is False) is Active: what every
    request is verified against, so a disabled key is refused as an unknown one."""
    keys = AccessKey.__table__
    query = select(keys.c.account_id, keys.c.secret_ciphertext, keys.c.policy).where(
        keys.c.access_key_id == access_key_id
    )
    if active_only:
        query = query.where(keys.c.status == KeyStatus.ACTIVE.value)
    row = connection.execute(query).first()
    if row is None:
        return None
    return KeyRecord(access_key_id, row.account_id, box.decrypt(row.secret_ciphertext), row.policy)


def _find_key(session: Session, access_key_id: str) -> AccessKey:
    key = session.get(AccessKey, access_key_id)
    if key is None:
        raise ResourceNotFound(f"no access key {access_key_id!r}")
    return key


def set_key_status(session: Session, access_key_id: str, status: KeyStatus) -> KeyStatus:
    """Disable (Inactive) or enable (Active) a key; answer the status it had. Either
    way round is allowed, and setting the status it has changes nothing."""
    key = _find_key(session, access_key_id)
    before = KeyStatus(key.status)
    key.status = status.value
    if status is KeyStatus.INACTIVE:
        # Its console sessions end for good: enabling the key again does not revive them.
        console_sessions.end_all(session, access_key_id)
    session.flush()
    return before


def delete_access_key(session: Session, access_key_id: str) -> str:
    """Delete a key for good (its id is never found again); answer its account's id."""
    key = _find_key(session, access_key_id)
    account_id = key.account_id
    console_sessions.end_all(session, access_key_id)
    session.execute(delete(AccessKey).where(AccessKey.access_key_id == access_key_id))
    return account_id


def announce_revocation(data_dir: Path, now: datetime, access_key_id: str, what: str) -> None:
    """Tell every server on this data dir, at its next request, that a key it may have
    cached was disabled or deleted (call after the change is committed)."""
    line = f"{now.isoformat()} {what} {access_key_id}\n".encode()
    fd = os.open(Path(data_dir) / REVOCATIONS_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def revocations_seen(data_dir: Path) -> tuple[int, int]:
    """What the revocation file looks like now (its inode and size; (0, 0) if there is
    none): a server compares it with what it saw when it filled its cache."""
    try:
        found = os.stat(Path(data_dir) / REVOCATIONS_FILE)
    except FileNotFoundError:
        return (0, 0)
    return (found.st_ino, found.st_size)
