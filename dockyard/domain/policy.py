"""IAM-style identity policies on access keys (spec §5.8): parse, validate, evaluate.

An access key may carry a policy document in IAM's JSON grammar; the API asks
`evaluate` before every operation it serves for that key. Keeping the grammar
IAM's own means a policy written for AWS works here unchanged, and one that
dockyard cannot enforce faithfully is refused when the key is created instead of
being half-enforced later.

Semantics (IAM's, as documented in the IAM User Guide's "Condition operators" and
"Policy evaluation logic" pages):

- An explicit Deny wins; otherwise a matching Allow allows; otherwise the request
  is implicitly denied. A statement matches when its Action (or NotAction), its
  Resource (or NotResource) and every one of its conditions match.
- Action patterns match case-insensitively, Resource patterns and StringLike
  case-sensitively; `*` matches any run of characters, `?` exactly one.
- Within a Condition, operators are ANDed, keys under one operator are ANDed, and
  a list of values is any-of (none-of for the negated operators). Condition key
  names are case-insensitive.
- A key absent from the request context: the `...IfExists` forms hold; the plain
  forms do not, except the negated ones (StringNotEquals,
  StringNotEqualsIgnoreCase, StringNotLike, NumericNotEquals), which hold. That is
  AWS's documented rule: "If the policy condition requires that the key is *not*
  matched, such as StringNotLike, and the right key is not present, the condition
  is true." `Null` tests presence itself ("true" means the key is absent).
- `ForAnyValue:` / `ForAllValues:` qualifiers apply the operator to each value of
  a multi-valued key (such as sagemaker:InstanceTypes); ForAllValues holds when the
  key is absent, ForAnyValue does not. Without a qualifier, a multi-valued key
  matches a positive operator when any of its values does, and a negated one when
  none of its values matches a policy value.
- Numeric operators compare the context value and the policy value as decimal
  numbers. A policy value that is not a number is refused when the policy is
  parsed; a context value that is not a number makes the condition not match.

Policy variables (`${aws:username}`), Principal elements and the date, IP and
ARN operators are not supported; a policy that uses an operator dockyard does not
know is refused with the operator's name.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

VERSIONS = ("2012-10-17", "2008-10-17")

Scalar = str | int | float | bool
ContextValue = Scalar | Sequence[Scalar]

_QUALIFIERS = ("ForAnyValue", "ForAllValues")
_IF_EXISTS = "IfExists"
_SID = re.compile(r"[A-Za-z0-9]*")
_ACTION = re.compile(r"[A-Za-z0-9*?-]+:[A-Za-z0-9*?]+")
_STATEMENT_KEYS = {"Sid", "Effect", "Action", "NotAction", "Resource", "NotResource", "Condition"}
_ARN_EXAMPLE = "arn:aws:sagemaker:us-east-1:123456789012:training-job/*"


class PolicyError(ValueError):
    """A policy document dockyard refuses; the message says what to fix."""


def _glob(pattern: str, text: str) -> bool:
    """IAM wildcard match (`*` any run, `?` one character), in linear-ish time.

    Written out rather than translated to a regular expression: patterns such as
    `*a*a*a*b` make a backtracking regex engine take exponential time.
    """
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif p < len(pattern) and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


# --- condition operators -----------------------------------------------------------


def _as_number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(value.strip() if isinstance(value, str) else str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _as_string(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


@dataclass(frozen=True)
class _Operator:
    convert: Callable[[Any], Any]  # a value -> its comparable form, or None when it has none
    test: Callable[[Any, Any], bool]  # (context value, policy value) -> matches
    negated: bool = False
    kind: str = "a string"


def _string(test: Callable[[str, str], bool], negated: bool = False) -> _Operator:
    return _Operator(_as_string, test, negated)


def _number(test: Callable[[Decimal, Decimal], bool], negated: bool = False) -> _Operator:
    return _Operator(_as_number, test, negated, "a number")


def _ignore_case(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()


def _like(value: str, pattern: str) -> bool:
    return _glob(pattern, value)


OPERATORS: dict[str, _Operator] = {
    "StringEquals": _string(operator.eq),
    "StringNotEquals": _string(operator.eq, negated=True),
    "StringEqualsIgnoreCase": _string(_ignore_case),
    "StringNotEqualsIgnoreCase": _string(_ignore_case, negated=True),
    "StringLike": _string(_like),
    "StringNotLike": _string(_like, negated=True),
    "NumericEquals": _number(operator.eq),
    "NumericNotEquals": _number(operator.eq, negated=True),
    "NumericLessThan": _number(operator.lt),
    "NumericLessThanEquals": _number(operator.le),
    "NumericGreaterThan": _number(operator.gt),
    "NumericGreaterThanEquals": _number(operator.ge),
    "Bool": _Operator(_as_bool, operator.eq, kind="true or false"),
    # Null's test is done by _Condition.holds itself: it asks about presence, not value.
    "Null": _Operator(_as_bool, operator.eq, kind="true or false"),
}


@dataclass(frozen=True)
class _Condition:
    name: str  # as written, e.g. "ForAllValues:StringLikeIfExists"
    base: str  # e.g. "StringLike"
    qualifier: str | None
    if_exists: bool
    key: str  # lower-cased: condition keys are case-insensitive
    values: tuple[Any, ...]  # converted by the operator's `convert`

    def holds(self, context: Mapping[str, ContextValue]) -> bool:
        raw = context.get(self.key)
        present: list[Any] = (
            []
            if raw is None
            else list(raw)
            if isinstance(raw, Sequence) and not isinstance(raw, str)
            else [raw]
        )
        op = OPERATORS[self.base]
        if self.base == "Null":
            return (not present) in self.values
        if not present:
            if self.if_exists or self.qualifier == "ForAllValues":
                return True
            if self.qualifier == "ForAnyValue":
                return False
            return op.negated
        results = [self._matches_one(op, value) for value in present]
        if self.qualifier == "ForAllValues" or (self.qualifier is None and op.negated):
            return all(results)
        return any(results)

    def _matches_one(self, op: _Operator, value: Any) -> bool:
        converted = op.convert(value)
        if converted is None:
            return False
        hit = any(op.test(converted, wanted) for wanted in self.values)
        return not hit if op.negated else hit


# --- statements and policies -------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    label: str  # the Sid, or "#n" (1-based) for a statement without one
    allow: bool
    actions: tuple[str, ...]  # lower-cased: actions match case-insensitively
    not_action: bool
    resources: tuple[str, ...]
    not_resource: bool
    conditions: tuple[_Condition, ...]

    def matches(self, action: str, resource: str, context: Mapping[str, ContextValue]) -> bool:
        wanted = action.lower()
        action_hit = any(_glob(pattern, wanted) for pattern in self.actions)
        if action_hit == self.not_action:
            return False
        resource_hit = any(_glob(p, resource) for p in self.resources)
        if resource_hit == self.not_resource:
            return False
        return all(condition.holds(context) for condition in self.conditions)


@dataclass(frozen=True)
class Policy:
    version: str
    statements: tuple[Statement, ...]
    text: str  # the document as compact JSON, as it is stored


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    explicit_deny: bool = False
    statement: str | None = None


def evaluate(
    policy: Policy, action: str, resource: str, context: Mapping[str, ContextValue]
) -> Decision:
    """IAM's order: any matching Deny denies, else any matching Allow allows."""
    lowered = {key.lower(): value for key, value in context.items()}
    allowed_by: Statement | None = None
    for statement in policy.statements:
        if not statement.matches(action, resource, lowered):
            continue
        if not statement.allow:
            return Decision(
                False, f"explicitly denied by statement {statement.label}", True, statement.label
            )
        allowed_by = allowed_by or statement
    if allowed_by is not None:
        return Decision(True, f"allowed by statement {allowed_by.label}", False, allowed_by.label)
    return Decision(False, "no statement allows it")


def parse_policy(text: str) -> Policy:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PolicyError(
            f"the policy is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise PolicyError(f"the policy is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise PolicyError(
            f"the policy must be a JSON object with Version and Statement (got {_kind(document)})"
        )
    unknown = sorted(set(document) - {"Version", "Id", "Statement"})
    if unknown:
        raise PolicyError(
            f"unknown top-level element {unknown[0]!r}; a policy has Version, Statement and Id"
        )
    version = document.get("Version")
    if version is None:
        raise PolicyError('the policy has no Version; use "Version": "2012-10-17"')
    if version not in VERSIONS:
        raise PolicyError(
            f"Version must be {' or '.join(map(json.dumps, VERSIONS))} (got {json.dumps(version)})"
        )
    if "Id" in document and not isinstance(document["Id"], str):
        raise PolicyError(f"Id must be a string (got {_kind(document['Id'])})")
    raw = document.get("Statement")
    if raw is None:
        raise PolicyError("the policy has no Statement")
    items = [raw] if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise PolicyError(f"Statement must be an object or a list of them (got {_kind(raw)})")
    if not items:
        raise PolicyError("Statement is empty: a policy needs at least one statement")
    statements = tuple(_statement(item, index) for index, item in enumerate(items, 1))
    sids = [s.label for s in statements if not s.label.startswith("#")]
    duplicates = sorted({sid for sid in sids if sids.count(sid) > 1})
    if duplicates:
        raise PolicyError(f"statement ids (Sid) must be unique; {duplicates[0]!r} is repeated")
    normalised = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return Policy(version, statements, normalised)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else "a number"


def _statement(item: Any, index: int) -> Statement:
    where = f"statement {index}"
    if not isinstance(item, dict):
        raise PolicyError(f"{where} must be an object (got {_kind(item)})")
    sid = item.get("Sid")
    if sid is not None:
        if not isinstance(sid, str) or not _SID.fullmatch(sid):
            raise PolicyError(f"{where}: Sid must contain only letters and digits (got {sid!r})")
        where = f"statement {index} ({sid})"
    for principal in ("Principal", "NotPrincipal"):
        if principal in item:
            raise PolicyError(
                f"{where}: {principal} is not allowed in an identity-based policy; "
                "a key's policy always applies to the key itself"
            )
    unknown = sorted(set(item) - _STATEMENT_KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown element {unknown[0]!r}")
    effect = item.get("Effect")
    if effect not in ("Allow", "Deny"):
        shown = "missing" if effect is None else json.dumps(effect)
        raise PolicyError(f'{where}: Effect must be "Allow" or "Deny" (got {shown})')
    actions, not_action = _either(item, where, "Action", "NotAction")
    for action in actions:
        if action != "*" and not _ACTION.fullmatch(action):
            raise PolicyError(
                f"{where}: action {action!r} is not of the form service:Operation "
                '(for example "sagemaker:CreateTrainingJob", "sagemaker:*" or "*")'
            )
    resources, not_resource = _either(item, where, "Resource", "NotResource")
    for resource in resources:
        if resource != "*" and not (resource.startswith("arn:") and resource.count(":") >= 5):
            raise PolicyError(
                f'{where}: resource {resource!r} must be "*" or an ARN (for example '
                f'"{_ARN_EXAMPLE}")'
            )
    return Statement(
        label=sid or f"#{index}",
        allow=effect == "Allow",
        actions=tuple(action.lower() for action in actions),
        not_action=not_action,
        resources=resources,
        not_resource=not_resource,
        conditions=_conditions(item.get("Condition"), where),
    )


def _either(
    item: dict[str, Any], where: str, name: str, negated: str
) -> tuple[tuple[str, ...], bool]:
    if (name in item) == (negated in item):
        detail = "has both" if name in item else "has neither"
        raise PolicyError(
            f"{where}: a statement needs exactly one of {name} or {negated}; it {detail}"
        )
    key = name if name in item else negated
    value = item[key]
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values:
        raise PolicyError(f"{where}: {key} must be a string or a non-empty list of strings")
    for entry in values:
        if not isinstance(entry, str) or not entry:
            raise PolicyError(
                f"{where}: every {key} entry must be a non-empty string (got {json.dumps(entry)})"
            )
    return tuple(values), key == negated


def _conditions(block: Any, where: str) -> tuple[_Condition, ...]:
    if block is None:
        return ()
    if not isinstance(block, dict):
        raise PolicyError(f"{where}: Condition must be an object (got {_kind(block)})")
    conditions: list[_Condition] = []
    for name, keys in block.items():
        qualifier, base, if_exists = _operator_name(name, where)
        if not isinstance(keys, dict) or not keys:
            raise PolicyError(
                f"{where}: {name} must map condition keys to values, as in "
                f'{{"{name}": {{"aws:RequestedRegion": "us-east-1"}}}}'
            )
        op = OPERATORS[base]
        for key, raw in keys.items():
            if not key:
                raise PolicyError(f"{where}: {name} has an empty condition key")
            values = raw if isinstance(raw, list) else [raw]
            if not values:
                raise PolicyError(f"{where}: {name} needs at least one value for {key}")
            converted = []
            for value in values:
                parsed = op.convert(value) if not isinstance(value, dict | list) else None
                if parsed is None or value is None:
                    raise PolicyError(
                        f"{where}: {name} values for {key} must be {op.kind} "
                        f"(got {json.dumps(value)})"
                    )
                converted.append(parsed)
            conditions.append(
                _Condition(name, base, qualifier, if_exists, key.lower(), tuple(converted))
            )
    return tuple(conditions)


def _operator_name(name: str, where: str) -> tuple[str | None, str, bool]:
    qualifier: str | None = None
    base = name
    if ":" in name:
        qualifier, _, base = name.partition(":")
        if qualifier not in _QUALIFIERS:
            raise PolicyError(
                f"{where}: unknown condition qualifier {qualifier!r} in {name!r}; "
                "use ForAnyValue or ForAllValues"
            )
    if_exists = base.endswith(_IF_EXISTS) and base != _IF_EXISTS
    if if_exists:
        base = base[: -len(_IF_EXISTS)]
    if base not in OPERATORS:
        known = ", ".join(OPERATORS)
        raise PolicyError(
            f"{where}: unknown condition operator {name!r}; dockyard supports {known} "
            "(each but Null also with an IfExists suffix)"
        )
    if base == "Null" and (if_exists or qualifier):
        raise PolicyError(f"{where}: Null takes neither an IfExists suffix nor a qualifier")
    return qualifier, base, if_exists
