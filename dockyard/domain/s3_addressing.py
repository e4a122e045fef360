"""How an S3 request names its bucket and key: read once, the way the gateway reads it.

dockyard's front door (`dockyard.api.s3`) decides which account may use a bucket;
rclone's gateway (gofakes3 on Go's net/http) then serves the bucket *it* reads from
the same request. Where the two read a request differently, the bucket checked is not
the bucket served: `/own-bucket/../victim-bucket/key` was checked as `own-bucket`,
then httpx removed the dot segments on the way and the gateway served the victim's
object. So the request target and `x-amz-copy-source` are read here as the gateway
reads them - the path percent-decoded once (Go's `URL.Path`), trimmed of slashes and
split at the first one (gofakes3's `routeBase`); the copy source split at its first
slash undecoded, its key decoded (gofakes3's `copyObject`) - and whatever two readers
could take differently is refused: `.` and `..` segments (literal, percent-encoded,
or encoded twice), an empty first segment (`//`), malformed or non-UTF-8 escapes,
control characters, a fragment, a bucket that is not a name S3 allows. What passes
is forwarded exactly as it was received (`Address.target`), never rebuilt.

The node relay (`dockyard.compute.agent.s3_relay`) reads requests with the same
functions, and asks `signing_service` - what decides that the server serves a request
as S3 at all - the same question the server asks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, unquote_to_bytes

# A bucket name S3 allows (gofakes3 creates no other): lower-case letters, digits, dots
# and hyphens, never a path of its own (`.`, `..`, `_dockyard`, ...).
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# What ends the key id of an Authorization header's `Credential=` (`credential_scope`).
_KEY_END = re.compile(r"[,\s]")
# An Authorization header as SigV4 clients write it, read whole (the gateway reads one
# more leniently, so only a header read whole here is read the same way there).
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([A-Za-z0-9]+)/[0-9]{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request,"
    r" ?SignedHeaders=[a-z0-9;-]+, ?Signature=[0-9a-f]{64}"
)
_QUERY_CREDENTIAL = re.compile(r"([A-Za-z0-9]+)/[0-9]{8}/[a-z0-9-]+/([a-z0-9-]+)/aws4_request")
# A presigned URL's parameters (lower-cased), each named once.
_QUERY_AUTH = frozenset(
    {
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-expires",
        "x-amz-signedheaders",
        "x-amz-signature",
        "x-amz-security-token",
    }
)
# What a request target is made of (RFC 9112: visible ASCII); `#` never is part of one.
_TARGET_CHARS = re.compile(r"[\x21-\x22\x24-\x7e]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class AddressError(ValueError):
    """A request the front door refuses before anything reads it further: `code` is S3's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Address:
    """Where an S3 request goes: its target as received, and the bucket and key the
    gateway will read from it (`bucket` empty for `/`, `key` empty for the bucket's own
    operations)."""

    raw_path: str
    query: str
    bucket: str
    key: str

    @property
    def target(self) -> str:
        """What is sent on to the gateway, byte for byte what was checked."""
        return self.raw_path + (f"?{self.query}" if self.query else "")


def _decoded(text: str, what: str, code: str) -> str:
    """`text` percent-decoded once, as Go decodes a path; refused where a decoder could
    read it otherwise (a malformed escape, bytes that are not UTF-8, a control character)."""
    if _BAD_ESCAPE.search(text):
        raise AddressError(code, f"{what} has a '%' that is not a percent-escape (%XX)")
    try:
        decoded = unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        raise AddressError(code, f"{what} is not UTF-8 once percent-decoded") from None
    if _CONTROL.search(decoded):
        raise AddressError(code, f"{what} holds a control character (percent-encoded or not)")
    return decoded


def _dot_segment(decoded: str) -> str | None:
    """A `.` or `..` segment of a decoded path, also one encoded twice (`%252e`)."""
    for segment in decoded.split("/"):
        if segment in (".", "..") or unquote(segment) in (".", ".."):
            return segment
    return None


def parse(raw_path: str, query: str) -> Address:
    """The bucket and key of a request target (its path before the first `?`, and its
    query), or AddressError (InvalidURI, InvalidBucketName) saying why it is refused."""
    if not raw_path.startswith("/"):
        raise AddressError("InvalidURI", "The request target must be a path (starting with /)")
    if not _TARGET_CHARS.fullmatch(raw_path) or not _TARGET_CHARS.fullmatch(query):
        raise AddressError(
            "InvalidURI", "The request target holds characters a URL may not (or a #fragment)"
        )
    path = _decoded(raw_path, "The path", "InvalidURI")
    if path.startswith("//"):
        raise AddressError(
            "InvalidURI", "The path starts with an empty segment (//): it must name the bucket"
        )
    dots = _dot_segment(path)
    if dots is not None:
        raise AddressError(
            "InvalidURI",
            f"The path has a {dots!r} segment: dockyard refuses '.' and '..' segments in a "
            "path, percent-encoded or not (an object here is a file, and a '..' would name "
            "another bucket's)",
        )
    bucket, _, key = path.strip("/").partition("/")
    if raw_path[1:].partition("/")[0] != bucket:
        # `/my-data%2f`: a reader of the raw path would name another bucket than one of
        # the decoded path; clients write bucket names as they are.
        raise AddressError(
            "InvalidURI", "The bucket name must be written in the path unencoded (no %XX)"
        )
    if bucket and not BUCKET_NAME.fullmatch(bucket):
        raise AddressError(
            "InvalidBucketName",
            f"The specified bucket is not valid: {bucket[:80]!r} (3 to 63 lower-case letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit)",
        )
    return Address(raw_path, query, bucket, key)


def copy_source(value: str) -> tuple[str, str]:
    """(bucket, key) of an `x-amz-copy-source` header - `bucket/key`, URL-encoded, one
    leading slash allowed, `?versionId=` after it ignored - as gofakes3 reads it: the
    bucket is what precedes the first slash, undecoded; the key is decoded."""
    what = "x-amz-copy-source"
    if not _TARGET_CHARS.fullmatch(value):
        raise AddressError("InvalidArgument", f"{what} holds characters a URL may not")
    bucket, slash, rest = value.removeprefix("/").partition("/")
    key_text = rest.split("?", 1)[0]
    if not slash or not key_text:
        raise AddressError("InvalidArgument", f"{what} must be BUCKET/KEY (URL-encoded)")
    if not BUCKET_NAME.fullmatch(bucket):
        raise AddressError(
            "InvalidArgument",
            f"{what} does not start with a valid bucket name (got {bucket[:80]!r}; write the "
            "bucket unencoded, after at most one '/')",
        )
    key = _decoded(key_text, what, "InvalidArgument")
    dots = _dot_segment(key)
    if dots is not None:
        raise AddressError(
            "InvalidArgument",
            f"{what} has a {dots!r} segment: dockyard refuses '.' and '..' segments in a "
            "key, percent-encoded or not",
        )
    return bucket, key


def credential(authorizations: Sequence[str], query: str) -> tuple[str, str]:
    """(access key id, service) of the one credential a request is signed with: the one
    the gateway verifies the signature of, so the account the front door checks is the
    signer's. The gateway reads a credential leniently - the Authorization header if it
    is there (spaces anywhere removed first), else the query's first `X-Amz-Credential`
    - while the front door once read the first credential its pattern found, header or
    query, the query's last: a request naming the victim's key where the front door
    looked and the thief's where the gateway looked was served as the victim's. So a
    request must name one credential, in the form SigV4 clients write it, in one place;
    AddressError otherwise."""
    if len(authorizations) > 1:
        raise AddressError("InvalidArgument", "The request has more than one Authorization header")
    header = authorizations[0] if authorizations else ""
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    in_query = [name for name in names if name.lower() in _QUERY_AUTH]
    if header:
        if in_query:
            raise AddressError(
                "InvalidArgument",
                "Only one auth mechanism allowed: the Authorization header or the "
                f"X-Amz-* query parameters, not both (the query has {in_query[0]})",
            )
        match = _AUTHORIZATION.fullmatch(header)
        if match is None:
            raise AddressError(
                "AuthorizationHeaderMalformed",
                "The Authorization header must be 'AWS4-HMAC-SHA256 Credential=KEY/DATE/"
                "REGION/SERVICE/aws4_request, SignedHeaders=..., Signature=...', written "
                "without spaces inside its fields",
            )
        return match.group(1), match.group(2)
    lowered = [name.lower() for name in in_query]
    repeated = next((name for name in in_query if lowered.count(name.lower()) > 1), None)
    if repeated is not None:
        raise AddressError(
            "AuthorizationQueryParametersError", f"The query names {repeated} more than once"
        )
    values = [value for name, value in parse_qsl(query) if name == "X-Amz-Credential"]
    found = _QUERY_CREDENTIAL.fullmatch(values[0]) if values else None
    if found is None:
        raise AddressError(
            "AuthorizationQueryParametersError",
            "X-Amz-Credential must be KEY/DATE/REGION/SERVICE/aws4_request",
        )
    return found.group(1), found.group(2)


def credential_scope(authorization: str) -> tuple[str, str] | None:
    """(access key id, service) an Authorization header claims, unverified: its first
    `Credential=KEY/DATE/REGION/SERVICE/aws4_request` (KEY without commas or spaces,
    the others without slashes; what may follow `aws4_request` is not read).

    Read in one pass over the header's slash-separated pieces. It was a regex search,
    `Credential=([^/,\\s]+)/[^/]+/[^/]+/([^/]+)/aws4_request`, which gives the same
    answers but is quadratic where no slash follows: every request but `POST /` asks
    this before anything is verified (to tell S3 from the console and the rest), and an
    unsigned 220 KB header of repeated "Credential=" held the event loop 50 s.
    """
    pieces = authorization.split("/")
    for at in range(len(pieces) - 4):
        # The key id runs from `Credential=` to this piece's end, so it lies in the
        # piece's last stretch without a comma or space; the first one found there is
        # the leftmost match (a later one would leave a shorter key, or none).
        stretch = _KEY_END.split(pieces[at])[-1]
        start = stretch.find("Credential=")
        if start < 0 or start + len("Credential=") == len(stretch):
            continue
        date, region, service = pieces[at + 1 : at + 4]
        if date and region and service and pieces[at + 4].startswith("aws4_request"):
            return stretch[start + len("Credential=") :], service
    return None


def signing_service(authorization: str | None, query: str) -> tuple[str, str] | None:
    """(access key id, service) a request says it is signed with: its (first)
    Authorization header's, else its query's `X-Amz-Credential` (the last one, as
    Starlette reads a query). Whether the server serves a request as S3 - and not as
    its console, health or metrics page - is decided by this alone."""
    if authorization:
        found = credential_scope(authorization)
        if found:
            return found
    credential = ""
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "X-Amz-Credential":
            credential = value
    parts = credential.split("/")
    if len(parts) == 5 and parts[4] == "aws4_request":
        return parts[0], parts[3]
    return None
