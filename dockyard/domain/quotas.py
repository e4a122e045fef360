"""The SageMaker quotas dockyard enforces, named and coded as Service Quotas shows them.

Four quotas per instance type, in AWS's words: instances of the type in running
training jobs ("… for training job usage"), instances kept in warm pools ("… for
training warm pool usage", default 0: spec §5.7), instances reserved in training
plans ("… for training plan usage") and instances in HyperPod clusters ("… for
cluster usage"). AWS's own quota codes ("L-0BEF44E8") are opaque
and there is no published table of them, so each code is derived from the quota's
name: the same name always gets the same code, on every server and after restarts.

A request to raise a quota (RequestServiceQuotaIncrease) waits PENDING until an
operator approves or denies it; nothing moves a decided request again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from dockyard.domain.transitions import Transitions

SERVICE_CODE = "sagemaker"
SERVICE_NAME = "Amazon SageMaker"
UNIT = "None"  # what AWS shows for SageMaker's instance-count quotas


class QuotaKind(StrEnum):
    TRAINING_JOB = "training job"
    WARM_POOL = "training warm pool"
    TRAINING_PLAN = "training plan"
    CLUSTER = "cluster"


class RequestStatus(StrEnum):
    """Service Quotas' RequestStatus enum, word for word (botocore's model)."""

    PENDING = "PENDING"
    CASE_OPENED = "CASE_OPENED"
    APPROVED = "APPROVED"
    DENIED = "DENIED"
    CASE_CLOSED = "CASE_CLOSED"
    NOT_APPROVED = "NOT_APPROVED"
    INVALID_REQUEST = "INVALID_REQUEST"


_R = RequestStatus
# Only an operator's decision moves a request, and only once.
REQUEST_TRANSITIONS = Transitions(
    "quota increase request",
    {
        _R.PENDING: frozenset({_R.APPROVED, _R.DENIED}),
        _R.CASE_OPENED: frozenset(),
        _R.APPROVED: frozenset(),
        _R.DENIED: frozenset(),
        _R.CASE_CLOSED: frozenset(),
        _R.NOT_APPROVED: frozenset(),
        _R.INVALID_REQUEST: frozenset(),
    },
)


@dataclass(frozen=True)
class QuotaDef:
    name: str
    code: str
    kind: QuotaKind
    instance_type: str
    unit: str = UNIT
    adjustable: bool = True
    global_quota: bool = False

    @property
    def description(self) -> str:
        where = {
            QuotaKind.TRAINING_JOB: "across all training jobs",
            QuotaKind.WARM_POOL: "retained in warm pools after their training jobs end",
            QuotaKind.TRAINING_PLAN: "reserved across all training plans",
            QuotaKind.CLUSTER: "across all HyperPod clusters",
        }[self.kind]
        return (
            f"The maximum number of {self.instance_type} instances {where} "
            "in this account in the current Region"
        )


def quota_name(kind: QuotaKind, instance_type: str) -> str:
    """'ml.m5.xlarge for training warm pool usage', as AWS names the quota."""
    return f"{instance_type} for {kind.value} usage"


def quota_code(name: str) -> str:
    """A stable AWS-style code: 'L-' and the first 8 upper-case hex digits of sha256(name)."""
    return "L-" + hashlib.sha256(name.encode()).hexdigest()[:8].upper()


def quota(kind: QuotaKind, instance_type: str) -> QuotaDef:
    name = quota_name(kind, instance_type)
    return QuotaDef(name=name, code=quota_code(name), kind=kind, instance_type=instance_type)


def catalog(instance_types: Iterable[str]) -> list[QuotaDef]:
    """Every quota of every given type, ordered by name (how the console lists them)."""
    types = sorted(set(instance_types))
    return sorted((quota(kind, t) for t in types for kind in QuotaKind), key=lambda q: q.name)


def by_code(quotas: Iterable[QuotaDef], code: str) -> QuotaDef | None:
    return next((q for q in quotas if q.code == code), None)


def quota_arn(region: str, account_id: str, code: str) -> str:
    return f"arn:aws:servicequotas:{region}:{account_id}:{SERVICE_CODE}/{code}"
