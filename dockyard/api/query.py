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
import binascii
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape

# The most fields a form may have, and members a list of it (ActionNames and
# ResourceArns of SimulatePrincipalPolicy are the big ones; IAM documents no limit).
MAX_FIELDS = 50_000
MAX_LIST_MEMBERS = 10_000
# No member path of the IAM and STS shapes is this deep (ContextEntries.member.N.
# ContextKeyValues.member.M is five dots): a deeper field is no member's, and ignored.
_MAX_DEPTH = 16
_VALUE = ""  # where a node of the form's tree keeps its own value (no name is empty)


class QueryError(ValueError):
    """A form that cannot be read as the operation's input."""


def form(body: bytes) -> dict[str, str]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QueryError("The request body is not UTF-8") from exc
    try:
        return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except ValueError as exc:  # more fields than max_num_fields
        raise QueryError(f"The request has more than {MAX_FIELDS} parameters") from exc


def _scalar(shape: Shape, value: str, where: str) -> Any:
    kind = shape.type_name
    if kind in ("integer", "long"):
        try:
            return int(value)
        except ValueError as exc:  # not a number, or over int()'s 4,300 digits
            raise QueryError(f"{where} must be a whole number (got {value[:100]!r})") from exc
    if kind in ("float", "double"):
        try:
            return float(value)
        except ValueError as exc:
            raise QueryError(f"{where} must be a number (got {value[:100]!r})") from exc
    if kind == "boolean":
        if value.lower() not in ("true", "false"):
            raise QueryError(f"{where} must be true or false (got {value[:100]!r})")
        return value.lower() == "true"
    if kind == "blob":
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise QueryError(f"{where} must be base64") from exc
    return value


def _name(shape: Shape, default: str) -> str:
    return str(shape.serialization.get("name", default))


# The form as a tree of its dotted names, built once: `Names.member.2=x` is
# tree["Names"]["member"]["2"][_VALUE] == "x". Looking a member up is then a dict lookup;
# searching every field for each list member's name was O(N^2) (8,000 members: 25 s).
Node = dict[str, Any]


def _tree(fields: dict[str, str]) -> Node:
    root: Node = {}
    for key, value in fields.items():
        parts = key.split(".", _MAX_DEPTH)
        if len(parts) > _MAX_DEPTH or _VALUE in parts:
            continue  # no member's name
        node = root
        for part in parts:
            node = node.setdefault(part, {})
        node[_VALUE] = value
    return root


def _decode(shape: Shape, node: Node | None, where: str) -> Any:
    if node is None:
        return None
    if isinstance(shape, StructureShape):
        found: dict[str, Any] = {}
        for member_name, member in shape.members.items():
            name = _name(member, member_name)
            value = _decode(member, node.get(name), f"{where}.{name}")
            if value is not None:
                found[member_name] = value
        return found or None
    if isinstance(shape, ListShape):
        flattened = shape.serialization.get("flattened", False)
        name = _name(shape.member, "member")
        members = node if flattened else node.get(name)
        prefix = where if flattened else f"{where}.{name}"
        items = []
        index = 1
        while members is not None and str(index) in members:
            if index > MAX_LIST_MEMBERS:
                raise QueryError(f"{where} has more than {MAX_LIST_MEMBERS} members")
            items.append(_decode(shape.member, members[str(index)], f"{prefix}.{index}"))
            index += 1
        if not items and node.get(_VALUE) == "":
            return []  # an empty list is sent as the bare name
        return items or None
    if isinstance(shape, MapShape):
        flattened = shape.serialization.get("flattened", False)
        entries = node if flattened else node.get("entry")
        prefix = where if flattened else f"{where}.entry"
        key_name, value_name = _name(shape.key, "key"), _name(shape.value, "value")
        result: dict[str, Any] = {}
        index = 1
        while entries is not None:
            entry = entries.get(str(index)) or {}
            key = (entry.get(key_name) or {}).get(_VALUE)
            if key is None:
                break
            if index > MAX_LIST_MEMBERS:
                raise QueryError(f"{where} has more than {MAX_LIST_MEMBERS} entries")
            result[key] = _decode(
                shape.value, entry.get(value_name), f"{prefix}.{index}.{value_name}"
            )
            index += 1
        return result or None
    if _VALUE not in node:
        return None
    return _scalar(shape, node[_VALUE], where)


def decode(operation: OperationModel, fields: dict[str, str]) -> dict[str, Any]:
    """The operation's parameters from its form (Action and Version set aside): in time
    linear in the form, with at most MAX_LIST_MEMBERS members to a list."""
    shape = operation.input_shape
    if shape is None:
        return {}
    tree = _tree({k: v for k, v in fields.items() if k not in ("Action", "Version")})
    structure: dict[str, Any] = {}
    for member_name, member in shape.members.items():
        name = _name(member, member_name)
        value = _decode(member, tree.get(name), name)
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
