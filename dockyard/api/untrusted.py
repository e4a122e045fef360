"""Reading what a client sends without ever failing on it: JSON bodies, strings, numbers
and secrets from anyone, answered with an error a person can read instead of a 500.

Every entry point (the API, the exec endpoint, the operator endpoints, the console) reads
its request through these, because the standard library's readers each fail on hostile
input in a way that is not the ValueError a handler expects: `json.loads` raises
RecursionError on deep nesting and returns strings no encoder accepts (a lone UTF-16
surrogate, `"\\ud800"`); `hmac.compare_digest` raises TypeError on a non-ASCII str;
`int()` takes Unicode digits (`"²".isdigit()` is true, `int("²")` fails) and refuses
more than 4,300 of them.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Any

# Text decoded as strict UTF-8 holds no surrogate, so a document can hold one only from a
# \uD800-\uDFFF escape; it is searched only when its text has one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DIGITS = re.compile(r"[0-9]+")


class BodyError(ValueError):
    """A request body that cannot be read as what it should be; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


NOT_UNICODE = "holds a string that is not valid Unicode (a lone UTF-16 surrogate, \\ud800-\\udfff)"


def read_json(body: bytes, *, check_strings: bool = True) -> Any:
    """The JSON document a request body holds ({} for an empty body); BodyError, never
    anything else, for a body that is not one: not JSON, not UTF-8, nested too deeply
    for the decoder, or (unless `check_strings` is False, where every string is checked
    later, as `api.shapes` does) holding a string that is not valid Unicode."""
    if not body.strip():
        return {}
    try:
        # Strict UTF-8, as AWS's JSON protocols are: json.loads(bytes) would also take
        # UTF-16 and UTF-32, and encoded surrogates ("surrogatepass").
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"The request body is not UTF-8: {exc}") from exc
    try:
        document = json.loads(text)
    except RecursionError as exc:
        raise BodyError("The request body is nested too deeply to be read") from exc
    except ValueError as exc:  # a JSONDecodeError
        raise BodyError(f"The request body is not valid JSON: {exc}") from exc
    if check_strings and _SURROGATE_ESCAPE.search(text):
        try:  # every string of it, keys too, written as UTF-8
            json.dumps(document, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BodyError(f"The request body {NOT_UNICODE}") from exc
        except RecursionError as exc:  # as deep as the decoder allowed, a few frames on
            raise BodyError("The request body is nested too deeply to be read") from exc
    return document


def is_unicode(text: str) -> bool:
    """Whether a string is valid Unicode: no lone surrogate, so it can be encoded."""
    return text.isascii() or _SURROGATE.search(text) is None


def same_secret(presented: str, secret: str) -> bool:
    """Constant-time comparison of a presented secret with the real one, as bytes:
    `hmac.compare_digest` refuses a str with non-ASCII characters (TypeError)."""
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogatepass"), secret.encode("utf-8", "surrogatepass")
    )


def ascii_int(text: str, lo: int, hi: int) -> int | None:
    """The whole number a string spells in ASCII digits, if it is within [lo, hi]; None
    otherwise (Unicode digits, signs, spaces, or more digits than `hi` has)."""
    if len(text) > len(str(hi)) or not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None
