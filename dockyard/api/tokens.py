"""Pagination tokens are sealed at the API's edge: a client gets back only what it was given.

A service's NextToken says where its next page starts (an offset, a log position) and
which query it belongs to; it is the service's own to read (`services.pagination`,
`services.logs`). Before it leaves the server the dispatcher seals it - an HMAC with a
key of the data dir's own (derived from its master key, so every server of a data dir
or of a shared `DOCKYARD_MASTER_KEY` accepts the others' tokens), bound to the account
and the operation - and opens it again when it comes back. A token the server did not
issue to that account for that operation (forged, edited, another operation's) is
refused here with the service's own error, before anything reads it: the services'
decoders see only tokens they made themselves.

The sealed form is standard base64 (`[A-Za-z0-9+/]*={0,2}`), which every model's token
pattern allows (Service Quotas' is exactly that), and a token seals to the same text
every time, which readers of GetLogEvents rely on (the same nextForwardToken back means
the end of the stream).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

# Members that carry a page token: what a request may send back, and what a response
# may hold (GetLogEvents answers a token for each direction). IAM's Marker is not one:
# it is a plain offset into the caller's own simulation, read as ASCII digits in range
# (handlers/identity.py), which a client may write itself.
REQUEST_TOKENS = ("NextToken", "nextToken")
RESPONSE_TOKENS = ("NextToken", "nextToken", "nextForwardToken", "nextBackwardToken")
_TAG_BYTES = 16

# A refused token, in each service's words: (error code, message), by signing name.
_REFUSALS = {
    "sagemaker": (
        "ValidationException",
        "The NextToken is not valid: it is not one this operation returned; "
        "start again without it",
    ),
    "logs": ("InvalidParameterException", "The specified nextToken is not valid."),
    "servicequotas": (
        "InvalidPaginationTokenException",
        "The NextToken is not valid: it is not one this operation returned; "
        "start again without it",
    ),
    "ecr": (
        "InvalidParameterException",
        "The nextToken is not valid: it is not one this operation returned; "
        "start again without it",
    ),
}
_DEFAULT_REFUSAL = ("ValidationException", "The pagination token is not valid")


class BadToken(Exception):
    """A token the server did not issue; `code` and `message` are the service's."""

    def __init__(self, signing_name: str) -> None:
        self.code, self.message = _REFUSALS.get(signing_name, _DEFAULT_REFUSAL)
        super().__init__(self.message)


class TokenSeal:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, account_id: str, operation: str, token: bytes) -> bytes:
        scope = f"{account_id}\n{operation}\n".encode()
        return hmac.new(self._key, scope + token, hashlib.sha256).digest()[:_TAG_BYTES]

    def seal(self, account_id: str, operation: str, token: str) -> str:
        raw = token.encode()
        return base64.b64encode(self._tag(account_id, operation, raw) + raw).decode()

    def open(self, account_id: str, operation: str, sealed: str) -> str | None:
        """The token sealed in `sealed` for this account and operation; None otherwise."""
        try:
            data = base64.b64decode(sealed.encode("ascii"), validate=True)
        except (UnicodeEncodeError, binascii.Error, ValueError):
            return None
        tag, raw = data[:_TAG_BYTES], data[_TAG_BYTES:]
        if not raw or not hmac.compare_digest(tag, self._tag(account_id, operation, raw)):
            return None
        return raw.decode()  # sealed by us, so the UTF-8 we wrote

    def open_request(
        self, signing_name: str, account_id: str, operation: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The request's parameters with each token it sends back opened; BadToken (in
        the service's words) for one this server did not seal."""
        opened = dict(params)
        for name in REQUEST_TOKENS:
            sealed = params.get(name)
            if isinstance(sealed, str) and sealed:
                token = self.open(account_id, operation, sealed)
                if token is None:
                    raise BadToken(signing_name)
                opened[name] = token
        return opened

    def seal_response(self, account_id: str, operation: str, result: Any) -> Any:
        """The handler's result with each page token it holds sealed."""
        if not isinstance(result, dict):
            return result
        sealed = dict(result)
        for name in RESPONSE_TOKENS:
            token = result.get(name)
            if isinstance(token, str) and token:
                sealed[name] = self.seal(account_id, operation, token)
        return sealed
