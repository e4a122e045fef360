"""AWS's query protocol (STS, IAM), read and written from botocore's model.

A query request is a form: `Action=GetRole&Version=2010-05-08&RoleName=x`, lists as
`Names.member.1=...`, maps as `Tags.entry.1.key=...`, structures as `Parent.Child=...`.
`decode` turns it into the nested parameters the operation's input shape describes
(numbers and booleans typed as the shape says), which `shapes.parse_input` then
validates as it does a JSON request. `encode` writes a result as the XML document
botocore's query parser reads: `<OpResponse><OpResult>...</OpResult>
<ResponseMetadata><RequestId>` with lists as `<member>` elements.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape


class QueryError(ValueError):
    """A form that cannot be read as the operation's input."""


def form(body: bytes) -> dict[str, str]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QueryError("The request body is not UTF-8") from exc
    return dict(parse_qsl(text, keep_blank_values=True))


def _scalar(shape: Shape, value: str, where: str) -> Any:
    kind = shape.type_name
    if kind in ("integer", "long"):
        try:
            return int(value)
        except ValueError as exc:
            raise QueryError(f"{where} must be a whole number (got {value!r})") from exc
    if kind in ("float", "double"):
        try:
            return float(value)
        except ValueError as exc:
            raise QueryError(f"{where} must be a number (got {value!r})") from exc
    if kind == "boolean":
        if value.lower() not in ("true", "false"):
            raise QueryError(f"{where} must be true or false (got {value!r})")
        return value.lower() == "true"
    if kind == "blob":
        return base64.b64decode(value)
    return value


def _name(shape: Shape, default: str) -> str:
    return str(shape.serialization.get("name", default))


def _decode(shape: Shape, fields: dict[str, str], prefix: str) -> Any:
    if isinstance(shape, StructureShape):
        found: dict[str, Any] = {}
        for member_name, member in shape.members.items():
            key = f"{prefix}{_name(member, member_name)}"
            value = _decode(member, fields, key)
            if value is not None:
                found[member_name] = value
        return found or None
    if isinstance(shape, ListShape):
        flattened = shape.serialization.get("flattened", False)
        item = prefix if flattened else f"{prefix}.{_name(shape.member, 'member')}"
        items = []
        index = 1
        while any(k == f"{item}.{index}" or k.startswith(f"{item}.{index}.") for k in fields):
            items.append(_decode(shape.member, fields, f"{item}.{index}"))
            index += 1
        if not items and prefix in fields and fields[prefix] == "":
            return []  # an empty list is sent as the bare name
        return items or None
    if isinstance(shape, MapShape):
        entry = prefix if shape.serialization.get("flattened") else f"{prefix}.entry"
        result: dict[str, Any] = {}
        index = 1
        while f"{entry}.{index}.{_name(shape.key, 'key')}" in fields:
            key = fields[f"{entry}.{index}.{_name(shape.key, 'key')}"]
            result[key] = _decode(
                shape.value, fields, f"{entry}.{index}.{_name(shape.value, 'value')}"
            )
            index += 1
        return result or None
    if prefix not in fields:
        return None
    return _scalar(shape, fields[prefix], prefix)


def decode(operation: OperationModel, fields: dict[str, str]) -> dict[str, Any]:
    """The operation's parameters from its form (Action and Version set aside)."""
    shape = operation.input_shape
    if shape is None:
        return {}
    members = {k: v for k, v in fields.items() if k not in ("Action", "Version")}
    structure: dict[str, Any] = {}
    for member_name, member in shape.members.items():
        value = _decode(member, members, _name(member, member_name))
        if value is not None:
            structure[member_name] = value
    return structure


def _encode(shape: Shape, value: Any) -> str:
    if isinstance(shape, StructureShape):
        parts = []
        for member_name, member in shape.members.items():
            if isinstance(value, dict) and value.get(member_name) is not None:
                tag = _name(member, member_name)
                parts.append(_element(member, tag, value[member_name]))
        return "".join(parts)
    if isinstance(shape, ListShape):
        tag = _name(shape.member, "member")
        return "".join(_element(shape.member, tag, item) for item in value)
    if isinstance(shape, MapShape):
        return "".join(
            f"<entry><key>{escape(str(k))}</key>{_element(shape.value, 'value', v)}</entry>"
            for k, v in value.items()
        )
    if shape.type_name == "timestamp":
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%dT%H:%M:%SZ")
        return escape(str(value))
    if shape.type_name == "boolean":
        return "true" if value else "false"
    if shape.type_name == "blob":
        return base64.b64encode(value).decode()
    return escape(str(value))


def _element(shape: Shape, tag: str, value: Any) -> str:
    if isinstance(shape, ListShape) and shape.serialization.get("flattened"):
        inner = _name(shape.member, tag)
        return "".join(_element(shape.member, inner, item) for item in value)
    return f"<{tag}>{_encode(shape, value)}</{tag}>"


def encode(
    operation: OperationModel, namespace: str, result: dict[str, Any], request_id: str
) -> bytes:
    name = operation.name
    output = operation.output_shape
    body = ""
    if output is not None:
        wrapper = output.serialization.get("resultWrapper", f"{name}Result")
        body = f"<{wrapper}>{_encode(output, result)}</{wrapper}>"
    return (
        f'<{name}Response xmlns="{namespace}">{body}'
        f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
        f"</{name}Response>"
    ).encode()


def error(code: str, message: str, request_id: str, sender: bool = True) -> bytes:
    kind = "Sender" if sender else "Receiver"
    return (
        "<ErrorResponse><Error>"
        f"<Type>{kind}</Type><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"</Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    ).encode()
