"""The registry password GetAuthorizationToken hands out, and its check at the registry door.

`docker login`/`podman login` send the password back on every pull and push, so the
registry's front door must check it fast and on any server of the data dir: it is
self-contained - the account, the access key it was issued to and its expiry, with an
HMAC over them under a key derived from the data dir's master key (`SecretBox.derive_key`,
purpose REGISTRY_TOKEN_PURPOSE). No row is written or read to issue or check one. The
key id is in it so the door can also refuse a password whose key has since been disabled
or deleted (one cached key lookup, as SigV4 requests make), which the HMAC alone cannot
know.

The wire form is AWS's: `authorizationToken` is base64("AWS:" + password), user `AWS`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

REGISTRY_TOKEN_PURPOSE = "registry-tokens"
USERNAME = "AWS"
# AWS's tokens last 12 hours; so do these.
LIFETIME = timedelta(hours=12)
_VERSION = "dky1"
# Account ids are 12 digits, key ids upper-case letters and digits (services.accounts):
# neither holds the separator, so the fields read back unambiguously.
_PASSWORD = re.compile(
    r"dky1\.(?P<account>[0-9]{12})\.(?P<key>[A-Z0-9]{16,32})\.(?P<expires>[0-9]{1,12})"
    r"\.(?P<mac>[A-Za-z0-9_-]{43})"
)


@dataclass(frozen=True)
class RegistryGrant:
    """Who a valid password speaks for, and until when."""

    account_id: str
    access_key_id: str
    expires_at: datetime


def _mac(key: bytes, account_id: str, access_key_id: str, expires: int) -> str:
    message = f"{_VERSION}\n{account_id}\n{access_key_id}\n{expires}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def issue(key: bytes, account_id: str, access_key_id: str, now: datetime) -> tuple[str, datetime]:
    """The password for this account's key, valid for LIFETIME from `now`, and its expiry
    (whole seconds, as it is written in the password)."""
    expires = int((now + LIFETIME).timestamp())
    mac = _mac(key, account_id, access_key_id, expires)
    password = f"{_VERSION}.{account_id}.{access_key_id}.{expires}.{mac}"
    return password, datetime.fromtimestamp(expires, UTC)


def authorization_token(password: str) -> str:
    """GetAuthorizationToken's `authorizationToken`: base64 of `AWS:<password>`."""
    return base64.b64encode(f"{USERNAME}:{password}".encode()).decode()


def verify(key: bytes, username: str, password: str, now: datetime) -> RegistryGrant | None:
    """The grant a login (`username`, `password`) carries, if this data dir issued it and it
    has not expired at `now`; None otherwise. The HMAC is compared in constant time."""
    if username != USERNAME:
        return None
    found = _PASSWORD.fullmatch(password)
    if found is None:
        return None
    account_id, access_key_id = found["account"], found["key"]
    expires = int(found["expires"])
    expected = _mac(key, account_id, access_key_id, expires)
    if not hmac.compare_digest(expected, found["mac"]):
        return None
    expires_at = datetime.fromtimestamp(expires, UTC)
    if now >= expires_at:
        return None
    return RegistryGrant(account_id, access_key_id, expires_at)


def verify_basic(key: bytes, authorization: str, now: datetime) -> RegistryGrant | None:
    """`verify` for an HTTP `Authorization: Basic ...` header, as registry clients send it."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    username, sep, password = decoded.partition(":")
    return verify(key, username, password, now) if sep else None
