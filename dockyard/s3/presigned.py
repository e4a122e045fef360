"""How long a presigned S3 URL may work, checked by the front door as S3 checks it.

The gateway (rclone) verifies a presigned URL's signature and refuses it once its
`X-Amz-Date + X-Amz-Expires` is past, but takes any lifetime and any signing date: a URL
signed for ten years, or dated a year ahead (which then works from now until a year and a
week from now), outlived every key rotation an operator could plan for. S3 caps
`X-Amz-Expires` at 604,800 seconds (a week: the SigV4 signing key of a date is valid
that long) and refuses a URL whose `X-Amz-Date` is still in the future. So does dockyard,
with S3's codes and words, before anything reaches the gateway; a date in the future is
allowed within the server's clock skew (`max_clock_skew_seconds`), as a header-signed
request's is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

MAX_EXPIRES_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class Refusal:
    """Why S3 would refuse the URL: its error code, message and HTTP status."""

    code: str
    message: str
    status: int


def _query_error(message: str) -> Refusal:
    return Refusal("AuthorizationQueryParametersError", message, 400)


def check(query: str, now: datetime, max_skew: timedelta) -> Refusal | None:
    """None if a presigned query's date and lifetime are ones S3 would take at `now`."""
    fields = dict(parse_qsl(query, keep_blank_values=True))
    if "X-Amz-Credential" not in fields:
        return None  # not a SigV4 presigned URL; the gateway refuses what it is not
    expires_text = fields.get("X-Amz-Expires")
    if expires_text is None:
        return _query_error(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, "
            "X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and "
            "X-Amz-Expires parameters."
        )
    if not expires_text.lstrip("-").isdigit() or len(expires_text) > 20:
        return _query_error("X-Amz-Expires should be a number")
    expires = int(expires_text)
    if expires < 0:
        return _query_error("X-Amz-Expires must be non-negative")
    if expires > MAX_EXPIRES_SECONDS:
        return _query_error(
            "X-Amz-Expires must be less than a week (in seconds); that is, the given "
            f"X-Amz-Expires must be less than {MAX_EXPIRES_SECONDS} seconds"
        )
    try:
        signed_at = datetime.strptime(fields.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ")
    except ValueError:
        return _query_error(
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    signed_at = signed_at.replace(tzinfo=UTC)
    if signed_at > now + max_skew:
        return Refusal("AccessDenied", "Request is not yet valid", 403)
    if now > signed_at + timedelta(seconds=expires):
        return Refusal("AccessDenied", "Request has expired", 403)
    return None
