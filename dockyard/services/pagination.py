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
    """The offset a token points at; 0 when there is no token."""
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        offset = int(data["o"])
        fingerprint = str(data["q"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValidationException(
            "NextToken is not a token this operation returned; start again without it"
        ) from exc
    if offset < 0 or fingerprint != _fingerprint(query):
        raise ValidationException(
            "NextToken belongs to a different query (filters or sort changed); "
            "start again without it"
        )
    return offset


def page(
    rows: Sequence[Any], offset: int, max_results: int, query: Mapping[str, Any]
) -> tuple[Sequence[Any], str | None]:
    """Cut one page from rows fetched as [offset, offset + max_results + 1)."""
    if len(rows) > max_results:
        return rows[:max_results], encode_token(offset + max_results, query)
    return rows, None
