"""Hypothesis strategies that build request bodies from a botocore shape.

`valid_values(shape)` draws values the model accepts (required members, lengths, ranges,
enums, patterns, unions); `random_body(shape)` draws shape-guided junk meant to reach deep
into a validator with wrong types, nulls, unknown members and out-of-range numbers.
Both are built once per shape object and depth-capped, so recursive shapes terminate.
"""

from __future__ import annotations

import base64
import functools
import math
import re
from datetime import UTC, datetime
from typing import Any

from botocore.model import Shape
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from dockyard.api.linear_patterns import compile_pattern
from dockyard.api.patterns import translate_pattern
from dockyard.api.untrusted import is_unicode

# Below this depth only required members are drawn: it keeps bodies small and ends
# recursion through optional members (SageMaker's SearchExpression nests itself).
OPTIONAL_DEPTH = 3
# Past this depth a shape is treated as unsatisfiable (a required member cycle).
HARD_DEPTH = 12
EXTRA_ITEMS = 2  # how far past their minimum lists, maps and strings may grow
GENERATED_MAX_CODEPOINT = 0x3FF  # Latin and Greek: enough to exercise non-ASCII text

_INT_RANGES = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}

JSON_SCALARS: SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),  # NaN and infinities included: json.loads accepts them
    st.text(max_size=12),
)
JSON_VALUES: SearchStrategy[Any] = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
_TIMESTAMPS: SearchStrategy[Any] = st.one_of(
    st.integers(min_value=0, max_value=4_000_000_000),
    st.floats(min_value=0, max_value=4e9, allow_nan=False),
    st.datetimes(
        min_value=datetime(1971, 1, 1),
        max_value=datetime(2100, 1, 1),
        timezones=st.sampled_from([UTC, None]),
    ).map(lambda moment: moment.isoformat()),
)


# --------------------------------------------------------------------------- valid values


def valid_values(shape: Shape) -> SearchStrategy[Any] | None:
    """Values of `shape` that parse_input must accept, or None if we can't draw any."""
    return _ValidBuilder().build(shape, 0)


@functools.cache
def valid_body(shape: Shape) -> SearchStrategy[Any] | None:
    """A valid request body for an operation's input shape (cached per shape object)."""
    return valid_values(shape)


class _ValidBuilder:
    def __init__(self) -> None:
        self._memo: dict[tuple[str, int], SearchStrategy[Any] | None] = {}

    def build(self, shape: Shape, depth: int) -> SearchStrategy[Any] | None:
        if depth > HARD_DEPTH:
            return None
        key = (shape.name, min(depth, OPTIONAL_DEPTH))
        if key not in self._memo:
            self._memo[key] = self._build(shape, depth)
        return self._memo[key]

    def _build(self, shape: Shape, depth: int) -> SearchStrategy[Any] | None:
        if shape.metadata.get("document"):
            return JSON_VALUES
        kind = shape.type_name
        lo, hi = shape.metadata.get("min"), shape.metadata.get("max")
        if kind == "string":
            return _valid_string(shape)
        if kind in _INT_RANGES:
            type_lo, type_hi = _INT_RANGES[kind]
            return st.integers(
                min_value=type_lo if lo is None else max(lo, type_lo),
                max_value=type_hi if hi is None else min(hi, type_hi),
            )
        if kind in ("float", "double"):
            return st.floats(min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False)
        if kind == "boolean":
            return st.booleans()
        if kind == "timestamp":
            return _TIMESTAMPS
        if kind == "blob":
            size = _sizes(lo, hi)
            return st.binary(min_size=size[0], max_size=size[1]).map(
                lambda data: base64.b64encode(data).decode()
            )
        if kind == "list":
            return self._collection(shape, depth, lo, hi)
        if kind == "map":
            return self._collection(shape, depth, lo, hi)
        if kind == "structure":
            return self._structure(shape, depth)
        return JSON_VALUES

    def _collection(
        self, shape: Shape, depth: int, lo: int | None, hi: int | None
    ) -> SearchStrategy[Any] | None:
        least, most = _sizes(lo, hi)
        if depth >= OPTIONAL_DEPTH:
            most = least
        if shape.type_name == "list":
            member = self.build(shape.member, depth + 1)  # type: ignore[attr-defined]
            if member is None:
                return st.just([]) if least == 0 else None
            return st.lists(member, min_size=least, max_size=most)
        keys = self.build(shape.key, depth + 1)  # type: ignore[attr-defined]
        values = self.build(shape.value, depth + 1)  # type: ignore[attr-defined]
        if keys is None or values is None:
            return st.just({}) if least == 0 else None
        return st.dictionaries(keys, values, min_size=least, max_size=most)

    def _structure(self, shape: Shape, depth: int) -> SearchStrategy[Any] | None:
        members: dict[str, Shape] = shape.members  # type: ignore[attr-defined]
        required = set(shape.required_members)  # type: ignore[attr-defined]
        if shape.metadata.get("union"):
            choices = []
            for name, member in members.items():
                strategy = self.build(member, depth + 1)
                if strategy is not None:
                    choices.append(st.fixed_dictionaries({name: strategy}))
            return st.one_of(choices) if choices else None
        needed: dict[str, SearchStrategy[Any]] = {}
        optional: dict[str, SearchStrategy[Any]] = {}
        for name, member in members.items():
            if name not in required and depth >= OPTIONAL_DEPTH:
                continue
            strategy = self.build(member, depth + 1)
            if strategy is None:
                if name in required:
                    return None
                continue
            (needed if name in required else optional)[name] = strategy
        return st.fixed_dictionaries(needed, optional=optional)


def _sizes(lo: int | None, hi: int | None) -> tuple[int, int]:
    least = lo or 0
    most = least + EXTRA_ITEMS if hi is None else min(hi, least + EXTRA_ITEMS)
    return least, max(least, most)


def _valid_string(shape: Shape) -> SearchStrategy[str] | None:
    enum = shape.metadata.get("enum")
    if enum:
        return st.sampled_from(enum)
    lo, hi = shape.metadata.get("min"), shape.metadata.get("max")
    least = lo or 0
    most = hi if hi is not None else least + 40
    raw = shape.metadata.get("pattern")
    # dockyard refuses NUL in every string (issue 12), and a lone surrogate (issue 25),
    # whatever the model's pattern.
    if raw is None:
        return st.text(
            st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
            min_size=least,
            max_size=min(most, least + 20),
        )
    pattern = _generation_pattern(raw)
    if pattern is None:
        return None  # unknown constraint: let the caller skip the member if it may
    return st.from_regex(pattern, fullmatch=True).filter(
        lambda s: least <= len(s) <= most and "\x00" not in s and is_unicode(s)
    )


@functools.cache
def _generation_pattern(raw: str) -> re.Pattern[str] | None:
    """The model pattern as dockyard reads it, narrowed to code points hypothesis draws fast.

    hypothesis walks every character of a class when building a strategy; `\\p{L}` or the
    astral plane would take seconds each, so classes are clipped (a subset stays valid).
    """
    if compile_pattern(raw) is None:
        return None
    try:
        return re.compile(*translate_pattern(raw, max_codepoint=GENERATED_MAX_CODEPOINT))
    except (ValueError, re.error):
        return None


# --------------------------------------------------------------------------- junk


@functools.cache
def random_body(shape: Shape) -> SearchStrategy[Any]:
    """Shape-guided junk for an operation's input shape (cached per shape object)."""
    return _mostly(_RandomBuilder().build(shape, 0), JSON_VALUES)


@st.composite
def _mostly(draw: st.DrawFn, usual: SearchStrategy[Any], rare: SearchStrategy[Any]) -> Any:
    """Draw from `usual` nine times in ten, so junk bodies still reach deep members."""
    return draw(rare) if draw(st.integers(0, 9)) == 0 else draw(usual)


class _RandomBuilder:
    MAX_DEPTH = 4

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int], SearchStrategy[Any]] = {}

    def build(self, shape: Shape, depth: int) -> SearchStrategy[Any]:
        if depth >= self.MAX_DEPTH:
            return JSON_SCALARS
        key = (shape.name, depth)
        if key not in self._memo:
            self._memo[key] = _mostly(self._guided(shape, depth), JSON_SCALARS)
        return self._memo[key]

    def _guided(self, shape: Shape, depth: int) -> SearchStrategy[Any]:
        kind = shape.type_name
        if kind == "structure":
            members = {
                name: self.build(member, depth + 1)
                for name, member in shape.members.items()  # type: ignore[attr-defined]
            }
            unknown = st.dictionaries(st.text(max_size=8), JSON_SCALARS, max_size=1)
            return st.tuples(st.fixed_dictionaries({}, optional=members), unknown).map(
                lambda pair: {**pair[1], **pair[0]}
            )
        if kind == "list":
            member = self.build(shape.member, depth + 1)  # type: ignore[attr-defined]
            return st.lists(member, max_size=4)
        if kind == "map":
            value = self.build(shape.value, depth + 1)  # type: ignore[attr-defined]
            return st.dictionaries(st.text(max_size=300), value, max_size=3)
        if kind == "string":
            enum = shape.metadata.get("enum")
            text = st.text(max_size=80)
            return st.sampled_from(enum) | text if enum else text
        if kind in ("integer", "long"):
            return st.integers(min_value=-(2**65), max_value=2**65)
        if kind in ("float", "double"):
            return st.floats() | st.integers(min_value=-(10**400), max_value=10**400)
        if kind == "timestamp":
            return _TIMESTAMPS | st.text(max_size=30) | st.sampled_from([math.inf, -1e300])
        if kind == "blob":
            return st.binary(max_size=10).map(lambda d: base64.b64encode(d).decode()) | st.text()
        return JSON_VALUES
