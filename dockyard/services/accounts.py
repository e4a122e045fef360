"""Accounts and their access keys: who may call dockyard, and whose resources are whose."""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dockyard.domain.policy import PolicyError, parse_policy
from dockyard.secretbox import SecretBox
from dockyard.services.errors import ConflictException, ResourceNotFound, ValidationException
from dockyard.store.tables import AccessKey, Account

DEVELOPMENT_ACCOUNT = "development"
_KEY_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


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
    connection: Connection | Session, box: SecretBox, access_key_id: str
) -> KeyRecord | None:
    keys = AccessKey.__table__
    row = connection.execute(
        select(keys.c.account_id, keys.c.secret_ciphertext, keys.c.policy).where(
            keys.c.access_key_id == access_key_id
        )
    ).first()
    if row is None:
        return None
    return KeyRecord(access_key_id, row.account_id, box.decrypt(row.secret_ciphertext), row.policy)
