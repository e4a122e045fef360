"""Server-side AWS Signature Version 4 verification (header form).

Rebuilds the canonical request from what the client actually sent, using the
client's own SignedHeaders list, and compares HMACs in constant time. Derived
signing keys are cached per (secret, date, region, service): deriving one costs
four HMACs, and every request of the day reuses it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from urllib.parse import quote, unquote

ALGORITHM = "AWS4-HMAC-SHA256"
_AUTH_PART = re.compile(r"(Credential|SignedHeaders|Signature)=([^,\s]+)")
_SPACES = re.compile(r"\s+")
# Only the value: read before anything is verified, so from anyone, and a regex that
# split it too was quadratic on a header of repeated "Credential=" (60 KB: 8 s).
_CREDENTIAL = re.compile(r"Credential=([^,\s]*)")


class AuthError(Exception):
    """A request that did not prove who sent it. `code` and `status` follow AWS."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(frozen=True)
class SignedRequest:
    """What a request's Authorization header claims."""

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def credential_scope(authorization: str) -> tuple[str, str] | None:
    """(access key id, service) that an Authorization header claims, read before it is
    verified: to choose who verifies it (S3, the query or the JSON protocol)."""
    match = _CREDENTIAL.search(authorization)
    parts = match.group(1).split("/") if match else []
    if len(parts) != 5 or parts[4] != "aws4_request" or not parts[0] or not parts[3]:
        return None
    return parts[0], parts[3]


def parse_authorization(header: str | None) -> SignedRequest:
    if not header:
        raise AuthError("MissingAuthenticationTokenException", "Missing Authentication Token")
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError(
            "IncompleteSignatureException",
            f"Unsupported authorization algorithm {algorithm!r}; dockyard accepts {ALGORITHM}",
            400,
        )
    parts = dict(_AUTH_PART.findall(rest))
    for required in ("Credential", "SignedHeaders", "Signature"):
        if required not in parts:
            raise AuthError(
                "IncompleteSignatureException",
                f"Authorization header requires '{required}' parameter. "
                f"Authorization={header[:200]}",
                400,
            )
    credential = parts["Credential"].split("/")
    if len(credential) != 5 or credential[4] != "aws4_request":
        raise AuthError(
            "IncompleteSignatureException",
            "Credential must have the form "
            "<AccessKeyId>/<YYYYMMDD>/<region>/<service>/aws4_request "
            f"(got {parts['Credential']!r})",
            400,
        )
    access_key_id, date, region, service, _ = credential
    return SignedRequest(
        access_key_id=access_key_id,
        date=date,
        region=region,
        service=service,
        signed_headers=tuple(parts["SignedHeaders"].lower().split(";")),
        signature=parts["Signature"].lower(),
    )


def request_time(headers: Mapping[str, str]) -> tuple[str, datetime]:
    """The signing time: X-Amz-Date (basic ISO 8601), as a string and an instant."""
    amz_date = headers.get("x-amz-date")
    if not amz_date:
        raise AuthError(
            "IncompleteSignatureException",
            "Authorization requires the X-Amz-Date header.",
            400,
        )
    try:
        instant = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError as exc:
        raise AuthError(
            "IncompleteSignatureException",
            f"X-Amz-Date must look like 20240101T000000Z (got {amz_date!r})",
            400,
        ) from exc
    return amz_date, instant


def check_skew(amz_date: str, signed_at: datetime, now: datetime, max_skew: timedelta) -> None:
    # Same wording as AWS JSON services, which botocore recognises as a clock-skew error.
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    minutes = int(max_skew.total_seconds() // 60)
    if signed_at < now - max_skew:
        earliest = (now - max_skew).strftime("%Y%m%dT%H%M%SZ")
        raise AuthError(
            "InvalidSignatureException",
            f"Signature expired: {amz_date} is now earlier than {earliest} "
            f"({stamp} - {minutes} min.)",
        )
    if signed_at > now + max_skew:
        latest = (now + max_skew).strftime("%Y%m%dT%H%M%SZ")
        raise AuthError(
            "InvalidSignatureException",
            f"Signature not yet current: {amz_date} is still later than {latest} "
            f"({stamp} + {minutes} min.)",
        )


def _canonical_query(query_string: str) -> str:
    if not query_string:
        return ""
    pairs = []
    for item in query_string.split("&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        pairs.append(
            (
                quote(unquote(key), safe="-_.~"),
                quote(unquote(value.replace("+", " ")), safe="-_.~"),
            )
        )
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def canonical_request(
    method: str,
    raw_path: str,
    query_string: str,
    headers: Sequence[tuple[str, str]],
    signed_headers: Sequence[str],
    payload_hash: str,
) -> str:
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(_SPACES.sub(" ", value.strip()))
    lines = []
    for name in signed_headers:
        if name not in values:
            raise AuthError(
                "IncompleteSignatureException",
                f"Header {name!r} is listed in SignedHeaders but was not sent.",
                400,
            )
        lines.append(f"{name}:{','.join(values[name])}")
    # Non-S3 services encode the already-encoded path once more, as botocore does.
    path = quote(raw_path or "/", safe="/~") or "/"
    return "\n".join(
        [
            method.upper(),
            path,
            _canonical_query(query_string),
            "\n".join(lines) + "\n",
            ";".join(signed_headers),
            payload_hash,
        ]
    )


@lru_cache(maxsize=1024)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def verify(
    *,
    method: str,
    raw_path: str,
    query_string: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    secret_for: Callable[[str], str | None],
    now: datetime,
    max_skew: timedelta = timedelta(minutes=15),
) -> SignedRequest:
    """Verify a request; return what it was signed as, or raise AuthError.

    `headers` are (name, value) pairs as received; `secret_for(access_key_id)` answers
    the secret or None when the key is unknown.
    """
    lowered = {name.lower(): value for name, value in headers}
    signed = parse_authorization(lowered.get("authorization"))
    if "x-amz-security-token" in lowered:
        # dockyard issues no session credentials; a token means credentials from elsewhere.
        raise AuthError(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if "host" not in signed.signed_headers:
        raise AuthError(
            "IncompleteSignatureException", "SignedHeaders must include the 'host' header.", 400
        )
    # Headers that choose what the request does must be under the signature, or a
    # captured request could be replayed as another operation (X-Amz-Target) or read
    # as another protocol (Content-Type). botocore signs them all, as AWS requires.
    unsigned = sorted(
        name
        for name in lowered
        if (name.startswith("x-amz-") or name == "content-type")
        and name not in signed.signed_headers
    )
    if unsigned:
        raise AuthError(
            "IncompleteSignatureException",
            f"SignedHeaders must include every x-amz-* header and content-type sent; "
            f"not signed: {', '.join(unsigned)}.",
            400,
        )
    amz_date, signed_at = request_time(lowered)
    if amz_date[:8] != signed.date:
        raise AuthError(
            "InvalidSignatureException",
            f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date "
            f"from HTTP: '{signed.date}' != '{amz_date[:8]}'",
        )
    secret = secret_for(signed.access_key_id)
    if secret is None:
        raise AuthError(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    check_skew(amz_date, signed_at, now, max_skew)
    payload_hash = hashlib.sha256(body).hexdigest()
    claimed = lowered.get("x-amz-content-sha256")
    if claimed is not None and claimed != payload_hash:
        raise AuthError(
            "InvalidSignatureException",
            "The provided x-amz-content-sha256 header does not match what was computed.",
        )
    canonical = canonical_request(
        method, raw_path, query_string, headers, signed.signed_headers, payload_hash
    )
    string_to_sign = "\n".join(
        [ALGORITHM, amz_date, signed.scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = signing_key(secret, signed.date, signed.region, signed.service)
    expected = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    # As bytes: compare_digest refuses a str with non-ASCII characters (TypeError), and
    # the signature is whatever the client wrote.
    if not hmac.compare_digest(expected.encode(), signed.signature.encode("utf-8", "replace")):
        raise AuthError(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. "
            "Consult the service documentation for details.",
        )
    return signed
