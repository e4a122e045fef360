"""Shape a handler's result for the wire with botocore's output shapes.

Only members the output shape allows leave the server; datetimes become epoch seconds,
bytes base64 and Enum members their values, as botocore's JSON parser expects.
"""

from __future__ import annotations

import base64
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from botocore.model import Shape, StructureShape

from dockyard.api.shape_compiler import Compiler, cached
from dockyard.api.shapes import clip_text, parse_timestamp

Serialiser = Callable[[Any], Any]
_SERIALISERS: weakref.WeakKeyDictionary[Shape, Serialiser] = weakref.WeakKeyDictionary()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _build_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    if shape.metadata.get("document"):
        return _jsonable
    builder = _SERIALISER_BUILDERS.get(shape.type_name)
    if builder is None:
        return _jsonable
    return builder(shape, compiler)


def _epoch(value: Any) -> int | float:
    if type(value) is datetime and value.tzinfo is not None:  # the common case, fast
        stamp = value.timestamp()
        return int(stamp) if stamp.is_integer() else stamp
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day, tzinfo=UTC)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    elif isinstance(value, str):
        parsed = parse_timestamp(value)
        if parsed is None:
            raise TypeError(f"not a timestamp: {clip_text(value)!r}")
        moment = parsed
    else:
        raise TypeError(f"not a timestamp: {type(value).__name__}")
    # Exact arithmetic on the timedelta, so whole seconds stay ints.
    delta = moment - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    return seconds if not delta.microseconds else seconds + delta.microseconds / 1e6


def _base64(value: Any) -> str:
    if isinstance(value, str):
        value = value.encode()
    return base64.b64encode(bytes(value)).decode("ascii")


def _jsonable(value: Any) -> Any:
    """Best-effort JSON for values with no (or a free-form) shape."""
    if isinstance(value, Enum):
        value = value.value
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (datetime, date)):
        return _epoch(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _base64(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, Iterable):
        return [_jsonable(item) for item in value]
    return str(value)


def _scalar_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    return _jsonable


def _string_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    def serialise(value: Any) -> Any:
        if type(value) is str:
            return value
        if isinstance(value, Enum):
            value = value.value
        return value if isinstance(value, str) else str(value)

    return serialise


def _timestamp_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    return _epoch


def _blob_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    return _base64


def _items(value: Any) -> Iterable[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _list_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    member = compiler.node(shape.member)  # type: ignore[attr-defined]

    def serialise(value: Any) -> Any:
        return [member(item) for item in _items(value) if item is not None]

    return serialise


def _map_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    key = compiler.node(shape.key)  # type: ignore[attr-defined]
    item = compiler.node(shape.value)  # type: ignore[attr-defined]

    def serialise(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping for {shape.name}, got {type(value).__name__}")
        return {key(k): item(v) for k, v in value.items() if v is not None}

    return serialise


def _structure_serialiser(shape: Shape, compiler: Compiler) -> Serialiser:
    assert isinstance(shape, StructureShape)
    members = {name: compiler.node(member) for name, member in shape.members.items()}

    def serialise(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping for {shape.name}, got {type(value).__name__}")
        out = {}
        for name, item in value.items():
            member = members.get(name)
            if member is not None and item is not None:
                out[name] = member(item)
        return out

    return serialise


_SERIALISER_BUILDERS: dict[str, Callable[[Shape, Compiler], Serialiser]] = {
    "string": _string_serialiser,
    "integer": _scalar_serialiser,
    "long": _scalar_serialiser,
    "float": _scalar_serialiser,
    "double": _scalar_serialiser,
    "boolean": _scalar_serialiser,
    "timestamp": _timestamp_serialiser,
    "blob": _blob_serialiser,
    "list": _list_serialiser,
    "map": _map_serialiser,
    "structure": _structure_serialiser,
}


def serialise_output(shape: StructureShape | None, data: Mapping[str, Any]) -> dict[str, Any]:
    """Shape a handler's result for the wire.

    Keeps only members the output shape allows (recursively through structures, lists and
    maps), drops None values, and turns datetimes into epoch seconds, bytes into base64 and
    Enum members into their values. The result is json.dumps-able.
    """
    if shape is None or data is None:
        return {}
    serialiser = cached(_SERIALISERS, shape, _build_serialiser)
    result = serialiser(data)
    assert isinstance(result, dict)
    return result
