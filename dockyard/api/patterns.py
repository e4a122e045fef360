"""Java/ECMAScript regexes from botocore's models, translated, and run in linear time.

The models' `pattern` traits are Java regexes; Python's `re` lacks Unicode property
classes (`\\p{L}`, `\\p{Alnum}`), surrogate-pair ranges, `\\x{...}` and tolerates no
stray quantifier after an anchor. `translate_pattern` spells those in `re` terms (the
test generators draw values from that spelling). Java's `\\w`, `\\d`, `\\s` and `\\b`
are ASCII-only and `.` stops at every line terminator; the translation keeps both
behaviours. A request's values are checked by `compile_pattern`
(`dockyard.api.linear_patterns`), which respells the translation for RE2 (a
backtracking engine is exponential on some of the models' own patterns).
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class _Untranslatable(ValueError):
    """A Java regex construct with no faithful Python `re` spelling."""


_MAX_CP = 0x10FFFF
Ranges = list[tuple[int, int]]


@functools.cache
def _category_ranges() -> dict[str, Ranges]:
    """Code point ranges per two-letter Unicode general category (one pass, ~0.15 s)."""
    table: dict[str, Ranges] = {}
    category = unicodedata.category
    previous, start = category("\0"), 0
    for cp in range(1, _MAX_CP + 1):
        current = category(chr(cp))
        if current != previous:
            table.setdefault(previous, []).append((start, cp - 1))
            previous, start = current, cp
    table.setdefault(previous, []).append((start, _MAX_CP))
    return table


def _merge(ranges: Iterable[tuple[int, int]]) -> Ranges:
    merged: Ranges = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _complement(ranges: Ranges) -> Ranges:
    result: Ranges = []
    next_lo = 0
    for lo, hi in _merge(ranges):
        if lo > next_lo:
            result.append((next_lo, lo - 1))
        next_lo = hi + 1
    if next_lo <= _MAX_CP:
        result.append((next_lo, _MAX_CP))
    return result


def _categories(*prefixes: str) -> Ranges:
    table = _category_ranges()
    return _merge(r for name, rs in table.items() if name.startswith(prefixes) for r in rs)


def _chars(text: str) -> Ranges:
    return _merge((ord(c), ord(c)) for c in text)


_ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# Java's POSIX classes are ASCII-only unless UNICODE_CHARACTER_CLASS is set.
_POSIX: dict[str, Callable[[], Ranges]] = {
    "LOWER": lambda: [(0x61, 0x7A)],
    "UPPER": lambda: [(0x41, 0x5A)],
    "ASCII": lambda: [(0x00, 0x7F)],
    "ALPHA": lambda: [(0x41, 0x5A), (0x61, 0x7A)],
    "DIGIT": lambda: [(0x30, 0x39)],
    "ALNUM": lambda: [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)],
    "PUNCT": lambda: _chars(_ASCII_PUNCT),
    "GRAPH": lambda: _merge([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), *_chars(_ASCII_PUNCT)]),
    "PRINT": lambda: _merge(
        [(0x20, 0x20), (0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), *_chars(_ASCII_PUNCT)]
    ),
    "BLANK": lambda: [(0x09, 0x09), (0x20, 0x20)],
    "CNTRL": lambda: [(0x00, 0x1F), (0x7F, 0x7F)],
    "XDIGIT": lambda: [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
    "SPACE": lambda: [(0x09, 0x0D), (0x20, 0x20)],
    "ALL": lambda: [(0, _MAX_CP)],
    "LD": lambda: _merge([*_categories("L"), *_categories("Nd")]),
}
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# Java's `\p{IsXxx}` binary properties, approximated from general categories where
# Python has no property data (Alphabetic over-approximates with all marks).
_BINARY: dict[str, Callable[[], Ranges]] = {
    "ALPHABETIC": lambda: _categories("L", "Nl", "M"),
    "LETTER": lambda: _categories("L"),
    "LOWERCASE": lambda: _categories("Ll"),
    "UPPERCASE": lambda: _categories("Lu"),
    "TITLECASE": lambda: _categories("Lt"),
    "PUNCTUATION": lambda: _categories("P"),
    "CONTROL": lambda: _categories("Cc"),
    "DIGIT": lambda: _categories("Nd"),
    "WHITESPACE": lambda: _chars(_WHITE_SPACE),
    "HEXDIGIT": lambda: [(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
    "ASSIGNED": lambda: _complement(_categories("Cn")),
}
_GENERAL_CATEGORY = re.compile(r"(?:Is)?([CLMNPSZ][a-z]?)")


@functools.cache
def _property_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """Code point ranges for Java's `\\p{name}`."""
    key = name.replace("_", "").replace(" ", "").upper()
    if key in _POSIX:
        return tuple(_POSIX[key]())
    if key.startswith("IS") and key[2:] in _BINARY:
        return tuple(_BINARY[key[2:]]())
    match = _GENERAL_CATEGORY.fullmatch(name)
    if match:
        wanted = match.group(1)
        ranges = _categories(wanted)
        if ranges or wanted in ("Cn", "Co", "Cs"):
            return tuple(ranges)
    raise _Untranslatable(f"unsupported property \\p{{{name}}}")


def _cp_escape(cp: int) -> str:
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _class_body(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(
        _cp_escape(lo) if lo == hi else f"{_cp_escape(lo)}-{_cp_escape(hi)}" for lo, hi in ranges
    )


def _clip_ranges(ranges: Ranges, limit: int) -> Ranges:
    return [(lo, min(hi, limit)) for lo, hi in ranges if lo <= limit]


# Java's \w, \d, \s and \b are ASCII-only by default. Spelled out rather than compiled
# with re.ASCII, which would also stop hypothesis drawing non-ASCII text from a pattern.
_ASCII_CLASSES: dict[str, Ranges] = {
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "d": [(0x30, 0x39)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_WORD = "[0-9A-Z_a-z]"
_WORD_BOUNDARY = f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))"
_NOT_WORD_BOUNDARY = f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))"
_H_SPACE = _merge([*_chars(" \t\xa0\u1680\u180e\u202f\u205f\u3000"), (0x2000, 0x200A)])
_V_SPACE = _chars("\n\x0b\x0c\r\x85\u2028\u2029")
_JAVA_DOT = "[^\\n\\r\\x85\\u2028\\u2029]"  # Java's `.` stops at every line terminator
_JAVA_END_Z = "(?=(?:\\r\\n|[\\n\\r\\x85\\u2028\\u2029])?\\Z)"
_HEX = re.compile(r"[0-9a-fA-F]+")
_QUANTIFIER = re.compile(r"(?:([*+?])|\{(\d+)(?:,(\d*))?\})[?+]?")
_GROUP_FLAGS = re.compile(r"\(\?([idmsuxU]*)(?:-([idmsuxU]*))?([:)])")
_NAMED_GROUP = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")
_BACKREF_NAME = re.compile(r"<([A-Za-z][A-Za-z0-9]*)>")
_PYTHON_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
_DOT = object()  # placeholder for `.`, decided once every global flag is known
_CONTROL_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "a": 7, "e": 27}


def _hex_at(pattern: str, start: int, width: int) -> int:
    digits = pattern[start : start + width]
    if len(digits) != width or not _HEX.fullmatch(digits):
        raise _Untranslatable("bad hexadecimal escape")
    return int(digits, 16)


def _read_escape(pattern: str, i: int) -> tuple[str, Any, int]:
    """Read the escape at pattern[i] (a backslash) -> (kind, value, next index).

    kind/value: "char"/code point, "set"/Ranges, "quote"/the \\Q...\\E text, or
    "anchor"/"atom" with their Python spelling (never valid inside a class).
    """
    if i + 1 >= len(pattern):
        raise _Untranslatable("trailing backslash")
    c, j = pattern[i + 1], i + 2
    if c in "pP":
        if pattern.startswith("{", j):
            end = pattern.find("}", j)
            if end < 0:
                raise _Untranslatable("unterminated \\p{")
            name, j = pattern[j + 1 : end], end + 1
        elif j < len(pattern):
            name, j = pattern[j], j + 1
        else:
            raise _Untranslatable("bare \\p")
        ranges: Ranges = list(_property_ranges(name))
        return "set", _complement(ranges) if c == "P" else ranges, j
    if c in "wWdDsS":
        ranges = _ASCII_CLASSES[c.lower()]
        return "set", _complement(ranges) if c.isupper() else ranges, j
    if c in "hv":
        return "set", _H_SPACE if c == "h" else _V_SPACE, j
    if c == "u":
        cp = _hex_at(pattern, j, 4)
        j += 4
        # Java reads a high+low surrogate escape pair as one supplementary code point.
        if 0xD800 <= cp < 0xDC00 and pattern.startswith("\\u", j):
            try:
                low = _hex_at(pattern, j + 2, 4)
            except _Untranslatable:
                low = -1
            if 0xDC00 <= low < 0xE000:
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                j += 6
        return "char", cp, j
    if c == "x":
        if pattern.startswith("{", j):
            end = pattern.find("}", j)
            digits = pattern[j + 1 : end] if end > 0 else ""
            if not _HEX.fullmatch(digits) or int(digits, 16) > _MAX_CP:
                raise _Untranslatable("bad \\x{...} escape")
            return "char", int(digits, 16), end + 1
        return "char", _hex_at(pattern, j, 2), j + 2
    if c == "0":
        octal = re.match(r"[0-3]?[0-7]{1,2}", pattern[j : j + 3])
        if not octal:
            raise _Untranslatable("bad octal escape")
        return "char", int(octal.group(), 8), j + len(octal.group())
    if c == "c":
        if j >= len(pattern):
            raise _Untranslatable("bare \\c")
        return "char", ord(pattern[j]) ^ 64, j + 1
    if c in _CONTROL_ESCAPES:
        return "char", _CONTROL_ESCAPES[c], j
    if c == "Q":
        end = pattern.find("\\E", j)
        if end < 0:
            return "quote", pattern[j:], len(pattern)
        return "quote", pattern[j:end], end + 2
    if c in "bB":
        return "anchor", _WORD_BOUNDARY if c == "b" else _NOT_WORD_BOUNDARY, j
    if c == "A":
        return "anchor", "\\A", j
    if c == "z":
        return "anchor", "\\Z", j
    if c == "Z":
        return "anchor", _JAVA_END_Z, j
    if c == "k":
        match = _BACKREF_NAME.match(pattern, j)
        if not match:
            raise _Untranslatable("bad \\k<name>")
        return "atom", f"(?P={match.group(1)})", match.end()
    if c.isdigit():
        match = re.match(r"\d+", pattern[i + 1 :])
        assert match is not None
        return "atom", "\\" + match.group(), i + 1 + len(match.group())
    if c.isalnum():
        raise _Untranslatable(f"unsupported escape \\{c}")
    return "char", ord(c), j


def _read_class(pattern: str, i: int, limit: int) -> tuple[str, int]:
    """Translate the character class at pattern[i] ('[') -> (text, next index).

    The class is rebuilt as sorted code point ranges, which sidesteps every difference in
    set syntax (`[\\w-_]`: Java reads a `-` next to a class escape as a literal). A positive
    class is clipped to `limit`; a negated one never is (clipping would widen it).
    """
    j = i + 1
    negate = pattern.startswith("^", j)
    if negate:
        j += 1
    items: list[tuple[str, Any]] = []
    while True:
        if j >= len(pattern):
            raise _Untranslatable("unterminated character class")
        c = pattern[j]
        if c == "]" and items:
            j += 1
            break
        if c == "[":
            raise _Untranslatable("nested character class (Java union)")
        if pattern.startswith("&&", j):
            raise _Untranslatable("character class intersection")
        if c == "\\":
            kind, value, j = _read_escape(pattern, j)
            if kind == "quote":
                items.extend(("char", ord(q)) for q in value)
            elif kind in ("char", "set"):
                items.append((kind, value))
            else:
                raise _Untranslatable("anchor or back reference inside a character class")
            continue
        items.append(("dash", ord("-")) if c == "-" else ("char", ord(c)))
        j += 1
    ranges: Ranges = []
    k = 0
    while k < len(items):
        kind, value = items[k]
        if kind == "set":
            ranges.extend(value)
        elif (
            kind == "char"
            and k + 2 < len(items)
            and items[k + 1][0] == "dash"
            and (items[k + 2][0] == "char")
        ):
            if value > items[k + 2][1]:
                raise _Untranslatable("reversed character range")
            ranges.append((value, items[k + 2][1]))
            k += 2
        else:
            ranges.append((value, value))
        k += 1
    ranges = _merge(ranges)
    if not negate:
        ranges = _clip_ranges(ranges, limit)
        if not ranges:
            raise _Untranslatable("nothing in the class at or below the code point limit")
    return ("[^" if negate else "[") + _class_body(ranges) + "]", j


def _flag_bits(letters: str) -> int:
    if "x" in letters:
        raise _Untranslatable("comments mode (?x)")
    bits = 0
    for letter in letters:
        bits |= _PYTHON_FLAGS.get(letter, 0)  # d, u, U: no Python counterpart; ignored
    return bits


def _flag_letters(letters: str) -> str:
    return "".join(c for c in letters if c in "ims")


def translate_pattern(pattern: str, max_codepoint: int = _MAX_CP) -> tuple[str, int]:
    """Translate a Java regex to (Python pattern, flags); raise _Untranslatable if we can't.

    A lower `max_codepoint` drops characters above it from (non-negated) classes, giving a
    pattern that accepts a subset: test generators (hypothesis) walk every character of a
    class, and `\\p{L}` or the astral plane would make them crawl.
    """
    out: list[Any] = []
    flags = 0
    groups: list[int] = []  # where in `out` each open group starts
    atom: int | None = None  # where in `out` the last quantifiable thing starts
    last = "none"  # what `atom` is: "atom", "anchor" or "quantified"
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            kind, value, i = _read_escape(pattern, i)
            if kind == "quote":
                for q in value:
                    atom, last = len(out), "atom"
                    out.append(re.escape(q))
                continue
            atom, last = len(out), ("anchor" if kind == "anchor" else "atom")
            if kind == "char":
                out.append(_cp_escape(value))
            elif kind == "set":
                clipped = _clip_ranges(value, max_codepoint)
                if not clipped:
                    raise _Untranslatable("nothing in the class at or below the code point limit")
                out.append(f"[{_class_body(clipped)}]")
            else:
                out.append(value)
        elif c == "[":
            text, i = _read_class(pattern, i, max_codepoint)
            atom, last = len(out), "atom"
            out.append(text)
        elif c == "(":
            group_text, i, global_bits = _read_group_open(pattern, i)
            if group_text is None:  # a global inline flag: Python wants it at the start, so hoist
                flags |= global_bits
                continue
            groups.append(len(out))
            out.append(group_text)
            atom, last = None, "none"
        elif c == ")":
            if not groups:
                raise _Untranslatable("unbalanced parenthesis")
            atom, last = groups.pop(), "atom"
            out.append(")")
            i += 1
        elif c in "*+?{":
            match = _QUANTIFIER.match(pattern, i)
            if match is None:  # a `{` that starts no quantifier is a literal in Java
                atom, last = len(out), "atom"
                out.append("\\{")
                i += 1
                continue
            i = match.end()
            least = 1 if match.group(1) == "+" else int(match.group(2) or 0)
            if last == "anchor" and atom is not None:
                # `${1,128}`: Java repeats the (zero-width) anchor; Python refuses.
                if least == 0:
                    del out[atom:]
                atom, last = None, "none"
                continue
            if last == "quantified" and atom is not None:
                # `x{11}{0,1011}`: Java repeats the repetition; Python needs a group.
                out.insert(atom, "(?:")
                out.append(")")
            out.append(match.group())
            last = "quantified"
        elif c in "^$":
            atom, last = len(out), "anchor"
            out.append(c)
            i += 1
        elif c == "|":
            atom, last = None, "none"
            out.append(c)
            i += 1
        elif c == ".":
            atom, last = len(out), "atom"
            out.append(_DOT)
            i += 1
        else:
            atom, last = len(out), "atom"
            out.append(re.escape(c) if c in "}" else c)
            i += 1
    if groups:
        raise _Untranslatable("unbalanced parenthesis")
    dot = "." if flags & re.DOTALL else _JAVA_DOT
    return "".join(dot if part is _DOT else part for part in out), flags


def _read_group_open(pattern: str, i: int) -> tuple[str | None, int, int]:
    """Translate a group opening at pattern[i] -> (text or None for global flags, next, bits)."""
    if not pattern.startswith("(?", i):
        return "(", i + 1, 0
    match = _GROUP_FLAGS.match(pattern, i)
    if match and (match.group(1) or match.group(2) or match.group(3) == ":"):
        on, off, end = match.group(1), match.group(2) or "", match.group(3)
        if end == ")":
            if off:
                raise _Untranslatable("global inline flag switched off")
            return None, match.end(), _flag_bits(on)
        _flag_bits(on + off)  # rejects (?x:...)
        on, off = _flag_letters(on), _flag_letters(off)
        text = f"(?{on}-{off}:" if off else (f"(?{on}:" if on else "(?:")
        return text, match.end(), 0
    match = _NAMED_GROUP.match(pattern, i)
    if match:
        return f"(?P<{match.group(1)}>", match.end(), 0
    for opening in ("(?<=", "(?<!", "(?=", "(?!", "(?>"):
        if pattern.startswith(opening, i):
            return opening, i + len(opening), 0
    raise _Untranslatable("unsupported group syntax")
