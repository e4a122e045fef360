"""The models' patterns, run in linear time: `translate_pattern`'s regex respelt for RE2.

A model's pattern is matched against what a tenant sends, so it must take time linear
in the value: several of the models' patterns make a backtracking engine exponential
(`.*(?:[ \\r\\n\\t].*)*` of PipelineDefinition on forty spaces and a U+2028: one request
held the server for good). `translate_pattern`'s Python regex is respelt for RE2 here;
what RE2 lacks is widened (a lookaround always holds, an atomic group or a possessive
quantifier backtracks, a count over 1,000 is unbounded), so the check accepts at least
what the model's pattern accepts - a few values more for those patterns, never fewer.
`compile_pattern` caches each pattern, answering None (logged once at debug) for the rare
construct with no faithful translation (Java's `&&` class intersection).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

import re2

from dockyard.api.patterns import _NOT_WORD_BOUNDARY, _WORD_BOUNDARY, translate_pattern

log = logging.getLogger(__name__)

_RE2_MAX_REPEAT = 1000
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = 256 * 1024  # per pattern, its program and DFA cache: ~75 MiB for all
_RE2_OPTIONS.never_capture = True  # a check needs no groups (and is faster without)
_COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")


def _class_end(text: str, i: int) -> int:
    """Past the `]` closing the class at text[i] (the translation's classes hold only
    escapes, `^` and `-` besides characters: the first unescaped `]` closes one)."""
    j = i + 1
    while text[j] != "]":
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _group_end(text: str, i: int) -> int:
    """Past the `)` closing the group opened at text[i]."""
    depth, j = 0, i
    while True:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _class_end(text, j)
            continue
        depth += {"(": 1, ")": -1}.get(c, 0)
        j += 1
        if depth == 0:
            return j


def _widened(text: str) -> str:
    """`text` without what RE2 cannot run, accepting at least what it accepts."""
    out: list[str] = []
    quantified = False  # the last thing was a quantifier: a `+` after it is possessive
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            out.append(text[i : i + 2])
            i, quantified = i + 2, False
        elif c == "[":
            end = _class_end(text, i)
            out.append(text[i:end])
            i, quantified = end, False
        elif text.startswith(_LOOKAROUNDS, i):
            i, quantified = _group_end(text, i), False
        elif text.startswith("(?>", i):
            out.append("(?:")
            i, quantified = i + 3, False
        elif c == "{" and (count := _COUNT.match(text, i)):
            least, most = int(count.group(1)), count.group(2)
            if (
                (most or "").isdigit()
                and int(most or 0) > _RE2_MAX_REPEAT
                or (least > _RE2_MAX_REPEAT)
            ):
                out.append(f"{{{min(least, _RE2_MAX_REPEAT)},}}")
            else:
                out.append(count.group())
            i, quantified = count.end(), True
        elif c == "+" and quantified:
            i, quantified = i + 1, False  # possessive: backtracking allowed is wider
        else:
            out.append(c)
            i, quantified = i + 1, c in "*+?"
    return "".join(out)


def _re2_syntax(text: str, flags: int) -> str:
    """A Python regex from `translate_pattern` spelt as RE2 reads it: code points as
    `\\x{...}`, Python's `\\Z` (the very end) as `\\z`, the flags inline, and the
    translation's spelling of Java's ASCII word boundaries as RE2's own (ASCII too)."""
    text = text.replace(_WORD_BOUNDARY, "\\b").replace(_NOT_WORD_BOUNDARY, "\\B")
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "\\":
            out.append(text[i])
            i += 1
            continue
        kind = text[i + 1]
        width = {"u": 4, "U": 8}.get(kind)
        if width:
            out.append(f"\\x{{{text[i + 2 : i + 2 + width]}}}")
            i += 2 + width
        else:
            out.append("\\z" if kind == "Z" else text[i : i + 2])
            i += 2
    inline = "".join(f for f, bit in (("i", re.I), ("m", re.M), ("s", re.S)) if flags & bit)
    return (f"(?{inline})" if inline else "") + "".join(out)


class LinearPattern:
    """A model pattern as RE2 runs it (`fullmatch`, `search`: truthy or None)."""

    __slots__ = ("_regex", "widened")

    def __init__(self, regex: Any, widened: bool) -> None:
        self._regex = regex
        self.widened = widened  # some of the model's constructs were dropped (see above)

    @staticmethod
    def _bytes(value: str) -> bytes:
        # A lone surrogate (JSON allows one) cannot be UTF-8: its bytes match what the
        # translation's `re` matches it with (a negated class, not a positive one).
        return value.encode("utf-8", "surrogatepass")

    def fullmatch(self, value: str) -> Any:
        return self._regex.fullmatch(self._bytes(value))

    def search(self, value: str) -> Any:
        return self._regex.search(self._bytes(value))


@functools.cache
def compile_pattern(pattern: str) -> LinearPattern | None:
    """The model's Java pattern as RE2 runs it, or None if it can't be had."""
    try:
        text, flags = translate_pattern(pattern)
        exact = _re2_syntax(text, flags)
        try:
            return LinearPattern(re2.compile(exact, _RE2_OPTIONS), widened=False)
        except re2.error:
            return LinearPattern(
                re2.compile(_re2_syntax(_widened(text), flags), _RE2_OPTIONS), True
            )
    except Exception as exc:  # never let one odd model pattern break a request
        log.debug("not checking model pattern %r: %s", pattern, exc)
        return None
