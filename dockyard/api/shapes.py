"""Validate request bodies and serialise responses with botocore's own service model.

dockyard never hand-copies a SageMaker shape: the wire schema is whatever botocore's
`ServiceModel` says, so a botocore upgrade is a schema upgrade. This module turns a model
shape into a tree of small closures once (cached per shape object; recursive shapes are
compiled once and linked through a forwarding cell) and then runs that tree per request:

* `parse_input` checks a decoded JSON 1.1 request body the way AWS does (required members,
  wire types, length/value ranges, enums, patterns, unions, unknown members) and reports
  every violation in AWS's wording, naming each value by its member path.
* `serialise_output` keeps only what the output shape allows and turns Python values
  (datetimes, bytes, enums) into what botocore's JSON parser expects.

Model patterns are Java regexes (translated by `dockyard.api.patterns`). They must match
the whole value, as SageMaker's own validation does (Java's `Pattern.matches`): AWS
rejects `TrainingJobName="my_job"` although `[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}` matches
a prefix of it.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import logging
import math
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.model import Shape, StructureShape

from dockyard.api.linear_patterns import compile_pattern
from dockyard.api.patterns import translate_pattern
from dockyard.api.shape_compiler import Compiler, bounds, cached
from dockyard.api.untrusted import is_unicode

__all__ = [
    "ValidationError",
    "compile_pattern",
    "parse_input",
    "translate_pattern",
]

log = logging.getLogger(__name__)

# How much of a violation list reaches people: the message shows the first few, the
# exception keeps more for logs and tests, and counting goes on to the end.
_MESSAGE_ERRORS = 10
_KEPT_ERRORS = 100
_VALUE_PREVIEW = 100
_REDACTED = "*** Sensitive Data Redacted ***"

_INT_RANGES = {
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- errors


class ValidationError(Exception):
    """Raised with .message: a person-readable, AWS-style message naming every violation.

    `errors` holds the formatted violations (at most the first 100); `total` counts all of
    them, so the message can say how many were left out.
    """

    def __init__(self, errors: list[str], total: int | None = None) -> None:
        self.errors = list(errors)
        self.total = max(total if total is not None else 0, len(self.errors))
        shown = "; ".join(self.errors[:_MESSAGE_ERRORS])
        noun = "error" if self.total == 1 else "errors"
        message = f"{self.total} validation {noun} detected: {shown}"
        if self.total > _MESSAGE_ERRORS:
            message += f"; and {self.total - _MESSAGE_ERRORS} more"
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[type[ValidationError], tuple[list[str], int]]:
        return (ValidationError, (self.errors, self.total))


# A path is a linked chain built only as far as validation walks, and formatted only when
# something fails: None is the body itself, (parent, segment) one step down. A segment is
# a member name (str), a list index (int), a map key wrapped in a 1-tuple, or _KEY for
# "the key of this map entry".
Path = tuple[Any, Any] | None
_KEY = object()
_ROOT = "<root>"

# A violation is recorded cheaply as (kind, value, path, rule) and formatted at the end.
_Record = tuple[str, Any, Path, str]
Errors = list[_Record]
_VALUE, _UNKNOWN, _RAW = "value", "unknown", "raw"
_NULL = object()  # "the value was null", rendered without quotes as AWS does


def clip_text(text: str, limit: int = _VALUE_PREVIEW) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _format_path(path: Path) -> str:
    segments: list[Any] = []
    while path is not None:
        path, segment = path
        segments.append(segment)
    parts: list[str] = []
    for segment in reversed(segments):
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif isinstance(segment, tuple):
            parts.append(f"['{clip_text(str(segment[0]))}']")
        else:
            parts.append(f".{clip_text(segment)}" if parts else clip_text(segment))
    return "".join(parts) or _ROOT


def _preview(value: Any, depth: int = 0) -> str:
    """A short JSON-ish rendering that never walks (or stringifies) a big value whole."""
    if isinstance(value, str):
        return value if depth == 0 else '"' + clip_text(value, 20) + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 300:  # str() of a huge int is slow (and capped at 4300 digits)
            digits = int(value.bit_length() * math.log10(2))
            return f"<{'negative ' if value < 0 else ''}integer of about {digits} digits>"
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return repr(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (list, tuple)):
        if depth >= 2:
            return "[...]"
        items = [_preview(item, depth + 1) for item in value[:5]]
        return "[" + ", ".join(items) + (", ..." if len(value) > 5 else "") + "]"
    if isinstance(value, Mapping):
        if depth >= 2:
            return "{...}"
        pairs = [
            f'"{clip_text(str(k), 20)}": {_preview(v, depth + 1)}'
            for k, v in itertools.islice(value.items(), 5)
        ]
        return "{" + ", ".join(pairs) + (", ..." if len(value) > 5 else "") + "}"
    return clip_text(repr(value))


def _render_value(value: Any) -> str:
    if value is _NULL:
        return "null"
    return "'" + clip_text(_preview(value)) + "'"


def _format_record(record: _Record) -> str:
    kind, value, path, rule = record
    if kind == _UNKNOWN:
        return f"Unknown member '{clip_text(str(value))}' at '{_format_path(path)}'"
    if kind == _RAW:
        return rule
    if path is not None and path[1] is _KEY:
        where = _format_path(path[0])
        return f"Map key {_render_value(value)} at '{where}' failed to satisfy constraint: {rule}"
    return (
        f"Value {_render_value(value)} at '{_format_path(path)}' "
        f"failed to satisfy constraint: {rule}"
    )


def _validation_error(records: Errors) -> ValidationError:
    kept = [_format_record(r) for r in records[:_KEPT_ERRORS]]
    return ValidationError(kept, total=len(records))


Validator = Callable[[Any, Path, Errors], Any]
_VALIDATORS: weakref.WeakKeyDictionary[Shape, Validator] = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------- validators


def _build_validator(shape: Shape, compiler: Compiler) -> Validator:
    if shape.metadata.get("document"):
        return _accept_any
    builder = _VALIDATOR_BUILDERS.get(shape.type_name)
    if builder is None:
        return _accept_any
    return builder(shape, compiler)


def _accept_any(value: Any, path: Path, errors: Errors) -> Any:
    return value


def _length_rules(lo: int | None, hi: int | None) -> Callable[[int, Any, Path, Errors], None]:
    def check(size: int, shown: Any, path: Path, errors: Errors) -> None:
        if lo is not None and size < lo:
            rule = f"Member must have length greater than or equal to {lo}"
            errors.append((_VALUE, shown, path, rule))
        if hi is not None and size > hi:
            rule = f"Member must have length less than or equal to {hi}"
            errors.append((_VALUE, shown, path, rule))

    return check


_NUL_RULE = "Member must not contain null characters"
_UNICODE_RULE = "Member must be valid Unicode (it holds a lone UTF-16 surrogate)"


def _string_validator(shape: Shape, compiler: Compiler) -> Validator:
    lo, hi = bounds(shape)
    enum_values: list[str] | None = shape.metadata.get("enum")
    allowed = frozenset(enum_values) if enum_values else None
    enum_rule = f"Member must satisfy enum value set: [{', '.join(enum_values or [])}]"
    raw_pattern: str | None = shape.metadata.get("pattern")
    pattern = compile_pattern(raw_pattern) if raw_pattern else None
    pattern_rule = f"Member must satisfy regular expression pattern: {raw_pattern}"
    sensitive = bool(shape.metadata.get("sensitive"))
    checked_length = lo is not None or hi is not None

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if not isinstance(value, str):
            errors.append((_VALUE, value, path, "Member must be a string"))
            return value
        if not is_unicode(value):
            # JSON can spell one ("\ud800"); no encoder writes it, so it would fail
            # wherever the value went next (the database, a file name, a process).
            readable = value.encode("utf-8", "backslashreplace").decode()
            errors.append((_VALUE, _REDACTED if sensitive else readable, path, _UNICODE_RULE))
            return value
        shown = _REDACTED if sensitive else value
        if allowed is not None and value not in allowed:
            errors.append((_VALUE, shown, path, enum_rule))
        if checked_length:
            size = len(value)
            if lo is not None and size < lo:
                rule = f"Member must have length greater than or equal to {lo}"
                errors.append((_VALUE, shown, path, rule))
            if hi is not None and size > hi:
                errors.append(
                    (_VALUE, shown, path, f"Member must have length less than or equal to {hi}")
                )
                return value  # an over-long value is not worth a (possibly slow) regex
        if "\x00" in value:
            # No NUL reaches a process's argv or environment, nor a file name: refused
            # here rather than failing later, deep in a job's launch.
            errors.append((_VALUE, shown, path, _NUL_RULE))
        elif pattern is not None and pattern.fullmatch(value) is None:
            errors.append((_VALUE, shown, path, pattern_rule))
        return value

    return check


def _range_rules(lo: Any, hi: Any) -> tuple[str, str]:
    return (
        f"Member must have value greater than or equal to {lo}",
        f"Member must have value less than or equal to {hi}",
    )


def _integer_validator(shape: Shape, compiler: Compiler) -> Validator:
    type_lo, type_hi = _INT_RANGES[shape.type_name]
    model_lo, model_hi = bounds(shape)
    # The model's range where it has one, never wider than the Java type's.
    lo = type_lo if model_lo is None else max(type_lo, model_lo)
    hi = type_hi if model_hi is None else min(type_hi, model_hi)
    lo_rule, hi_rule = _range_rules(lo, hi)

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
            errors.append((_VALUE, value, path, "Member must be an integer"))
            return value
        if value < lo:
            errors.append((_VALUE, value, path, lo_rule))
        elif value > hi:
            errors.append((_VALUE, value, path, hi_rule))
        return value

    return check


def _float_validator(shape: Shape, compiler: Compiler) -> Validator:
    lo, hi = bounds(shape)
    lo_rule, hi_rule = _range_rules(lo, hi)

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append((_VALUE, value, path, "Member must be a number"))
            return value
        try:
            number = float(value)
        except OverflowError:  # a JSON integer beyond a double's range
            number = math.inf
        if not math.isfinite(number):
            errors.append((_VALUE, value, path, "Member must be a finite number"))
            return value
        if lo is not None and value < lo:
            errors.append((_VALUE, value, path, lo_rule))
        if hi is not None and value > hi:
            errors.append((_VALUE, value, path, hi_rule))
        return number

    return check


def _boolean_validator(shape: Shape, compiler: Compiler) -> Validator:
    def check(value: Any, path: Path, errors: Errors) -> Any:
        if not isinstance(value, bool):
            errors.append((_VALUE, value, path, "Member must be a boolean"))
        return value

    return check


_TIMESTAMP_RULE = "Member must be a timestamp (epoch seconds or an ISO-8601 string)"


def parse_timestamp(value: Any) -> datetime | None:
    """Epoch seconds (what botocore's JSON protocol sends) or ISO-8601 -> aware UTC."""
    try:
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value.strip())
            if parsed.tzinfo is None:
                return parsed.replace(tzinfo=UTC)
            return parsed.astimezone(UTC)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                return None
            return _EPOCH + timedelta(seconds=value)
    except (ValueError, OverflowError, OSError, TypeError):
        return None
    return None


def _timestamp_validator(shape: Shape, compiler: Compiler) -> Validator:
    def check(value: Any, path: Path, errors: Errors) -> Any:
        parsed = parse_timestamp(value)
        if parsed is None:
            errors.append((_VALUE, value, path, _TIMESTAMP_RULE))
            return value
        return parsed

    return check


def _blob_validator(shape: Shape, compiler: Compiler) -> Validator:
    length = _length_rules(*bounds(shape))

    def check(value: Any, path: Path, errors: Errors) -> Any:
        data: bytes | None
        if isinstance(value, (bytes, bytearray)):
            data = bytes(value)
        else:
            try:
                data = base64.b64decode(value, validate=True) if isinstance(value, str) else None
            except (binascii.Error, ValueError):
                data = None
            if data is None:
                errors.append((_VALUE, value, path, "Member must be a base64-encoded string"))
                return value
        length(len(data), value, path, errors)
        return data

    return check


def _list_validator(shape: Shape, compiler: Compiler) -> Validator:
    length = _length_rules(*bounds(shape))
    member = compiler.node(shape.member)  # type: ignore[attr-defined]

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if not isinstance(value, list):
            errors.append((_VALUE, value, path, "Member must be a JSON array"))
            return value
        length(len(value), value, path, errors)
        out: list[Any] = []
        for index, item in enumerate(value):
            if item is None:
                errors.append((_VALUE, _NULL, (path, index), "Member must not be null"))
                out.append(None)
            else:
                out.append(member(item, (path, index), errors))
        return out

    return check


def _map_validator(shape: Shape, compiler: Compiler) -> Validator:
    length = _length_rules(*bounds(shape))
    key_check = compiler.node(shape.key)  # type: ignore[attr-defined]
    value_check = compiler.node(shape.value)  # type: ignore[attr-defined]

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if not isinstance(value, dict):
            errors.append((_VALUE, value, path, "Member must be a JSON object"))
            return value
        length(len(value), value, path, errors)
        key_path = (path, _KEY)
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append((_VALUE, key, key_path, "Member must be a string"))
                continue
            key_check(key, key_path, errors)
            if item is None:
                errors.append((_VALUE, _NULL, (path, (key,)), "Member must not be null"))
                continue
            out[key] = value_check(item, (path, (key,)), errors)
        return out

    return check


def _structure_validator(shape: Shape, compiler: Compiler) -> Validator:
    assert isinstance(shape, StructureShape)
    members: dict[str, Validator] = {}
    for name, member_shape in shape.members.items():
        members[name] = compiler.node(member_shape)
    required = tuple(shape.required_members)
    is_union = bool(shape.metadata.get("union") or getattr(shape, "is_tagged_union", False))

    def check(value: Any, path: Path, errors: Errors) -> Any:
        if not isinstance(value, dict):
            errors.append((_VALUE, value, path, "Member must be a JSON object"))
            return value
        return _check_members(value, path, errors, members, required, is_union)

    return check


def _check_members(
    value: dict[Any, Any],
    path: Path,
    errors: Errors,
    members: Mapping[str, Validator],
    required: tuple[str, ...],
    is_union: bool,
) -> dict[str, Any]:
    out = {}
    for name, item in value.items():
        member = members.get(name)
        if member is None:
            errors.append((_UNKNOWN, name, path, ""))
        elif item is not None:  # JSON null means "not set" in AWS's JSON protocols
            out[name] = member(item, (path, name), errors)
    for name in required:
        if name not in out:
            errors.append((_VALUE, _NULL, (path, name), "Member must not be null"))
    if is_union and len(out) != 1:
        given = ", ".join(out) if out else "none"
        rule = f"Member must have exactly one member set, but {len(out)} were set ({given})"
        errors.append((_VALUE, value, path, rule))
    return out


_VALIDATOR_BUILDERS: dict[str, Callable[[Shape, Compiler], Validator]] = {
    "string": _string_validator,
    "integer": _integer_validator,
    "long": _integer_validator,
    "float": _float_validator,
    "double": _float_validator,
    "boolean": _boolean_validator,
    "timestamp": _timestamp_validator,
    "blob": _blob_validator,
    "list": _list_validator,
    "map": _map_validator,
    "structure": _structure_validator,
}


def parse_input(shape: StructureShape | None, body: object) -> dict[str, Any]:
    """Validate a decoded JSON request body against an operation's input shape.

    Returns a new dict with the same members, timestamps converted to timezone-aware UTC
    datetimes and blobs base64-decoded to bytes. Raises ValidationError listing every
    violation (the message shows the first ten and says how many more there were).
    """
    if not isinstance(body, dict):
        rule = "Request body must be a JSON object"
        raise _validation_error([(_VALUE, body, None, rule)])
    if shape is None:
        if body:
            raise _validation_error([(_UNKNOWN, name, None, "") for name in body])
        return {}
    validator = cached(_VALIDATORS, shape, _build_validator)
    errors: Errors = []
    try:
        result = validator(body, None, errors)
    except RecursionError:
        errors = [(_RAW, None, None, "The request body is nested too deeply")]
    if errors:
        raise _validation_error(errors)
    assert isinstance(result, dict)
    return result
