"""ListTags / AddTags / DeleteTags on the resources that carry tags.

A resource is found by its ARN within the caller's account and region; an ARN of
another account is simply not found (SageMaker answers ValidationException here,
ListTags models no ResourceNotFound).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from dockyard.domain import tags as tag_rules
from dockyard.services.errors import ValidationException
from dockyard.store.scoped import owned
from dockyard.store.tables import Cluster, TrainingJob, TrainingPlan

Tagged = TrainingPlan | TrainingJob | Cluster


def _holder(session: Session, account_id: str, region: str, arn: str) -> Tagged:
    parts = arn.split(":", 5)
    resource = parts[5] if len(parts) == 6 else ""
    kind = resource.split("/", 1)[0]
    model: Any = {
        "training-plan": TrainingPlan,
        "training-job": TrainingJob,
        "cluster": Cluster,
    }.get(kind)
    row = None
    if model is not None:
        row = session.scalar(owned(model, account_id, region).where(model.arn == arn))
    if row is None:
        raise ValidationException(f"Resource {arn} not found (or it carries no tags in dockyard)")
    return row


def _get(row: Tagged) -> list[dict[str, str]]:
    holder = row.spec if isinstance(row, TrainingJob) else row.tags
    return list(holder.get("Tags", []))


def _set(row: Tagged, tags: list[dict[str, str]]) -> None:
    # JSON columns are replaced whole so the ORM sees the change.
    if isinstance(row, TrainingJob):
        row.spec = {**row.spec, "Tags": tags}
    else:
        row.tags = {**row.tags, "Tags": tags}


def list_tags(session: Session, account_id: str, region: str, arn: str) -> dict[str, Any]:
    return {"Tags": _get(_holder(session, account_id, region, arn))}


def add_tags(
    session: Session, account_id: str, region: str, arn: str, tags: list[dict[str, str]]
) -> dict[str, Any]:
    row = _holder(session, account_id, region, arn)
    result = tag_rules.merged(_get(row), tags)
    if len(result) > tag_rules.MAX_TAGS:
        raise ValidationException(f"A resource may carry at most {tag_rules.MAX_TAGS} tags")
    _set(row, result)
    return {"Tags": result}


def delete_tags(
    session: Session, account_id: str, region: str, arn: str, keys: list[str]
) -> dict[str, Any]:
    row = _holder(session, account_id, region, arn)
    _set(row, tag_rules.without(_get(row), keys))
    return {}
