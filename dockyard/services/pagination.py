"""Opaque NextToken values for List* operations.

A token records where the previous page ended and a fingerprint of the query it
belongs to, so a token replayed against different filters is refused instead of
silently skipping or repeating rows.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from dockyard.services.errors import ValidationException

# Offsets a token may carry: what SQL's OFFSET (a 64-bit integer) and a list's index
# take with room to spare, and far beyond any real listing.
MAX_OFFSET = 2**31


def _fingerprint(query: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        {k: v for k, v in query.items() if k not in ("NextToken", "MaxResults")},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def encode_token(offset: int, query: Mapping[str, Any]) -> str:
    raw = json.dumps({"o": offset, "q": _fingerprint(query)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str | None, query: Mapping[str, Any]) -> int:
    """The offset a token points at; 0 when there is no token. Every field of a decoded
    token is checked, type and range: the API seals the tokens it hands out
    (`api.tokens`), and this is the second line, not the only one."""
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # binascii.Error is a ValueError
        raise _not_ours() from exc
    if not isinstance(data, dict) or set(data) != {"o", "q"}:
        raise _not_ours()
    offset, fingerprint = data["o"], data["q"]
    # An int, not a bool or a float (1e300, Infinity): an offset the database can take.
    if type(offset) is not int or not 0 <= offset < MAX_OFFSET or not isinstance(fingerprint, str):
        raise _not_ours()
    if fingerprint != _fingerprint(query):
        raise ValidationException(
            "NextToken belongs to a different query (filters or sort changed); "
            "start again without it"
        )
    return offset


def _not_ours() -> ValidationException:
    return ValidationException(
        "NextToken is not a token this operation returned; start again without it"
    )


def page(
    rows: Sequence[Any], offset: int, max_results: int, query: Mapping[str, Any]
) -> tuple[Sequence[Any], str | None]:
    """Cut one page from rows fetched as [offset, offset + max_results + 1)."""
    if len(rows) > max_results:
        return rows[:max_results], encode_token(offset + max_results, query)
    return rows, None
