"""Tags as the APIs carry them (`[{"Key", "Value"}]`): what adding and removing some
does, the same for every resource that has them (SageMaker's and ECR's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

# Both services' limit per resource.
MAX_TAGS = 50


def merged(
    current: Iterable[Mapping[str, str]], added: Iterable[Mapping[str, str]]
) -> list[dict[str, str]]:
    """The tags after `added`: a key given again takes its new value, in its old place."""
    tags = {t["Key"]: t["Value"] for t in current}
    tags.update({t["Key"]: t["Value"] for t in added})
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def without(current: Iterable[Mapping[str, str]], keys: Sequence[str]) -> list[dict[str, str]]:
    gone = set(keys)
    return [{"Key": t["Key"], "Value": t["Value"]} for t in current if t["Key"] not in gone]
