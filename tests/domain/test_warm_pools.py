"""Warm pool rules: the matching key, who may keep instances, deadlines, refusals."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dockyard.domain import warm_pools as rules
from dockyard.domain.transitions import IllegalTransition
from dockyard.domain.warm_pools import JOB_VIEW_TRANSITIONS, POOL_TRANSITIONS, WarmPoolStatus

BASE: dict[str, Any] = {
    "RoleArn": "arn:aws:iam::123456789012:role/r",
    "ResourceConfig": {
        "InstanceType": "ml.m5.xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 10,
        "KeepAlivePeriodInSeconds": 600,
    },
    "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
    "StoppingCondition": {"MaxRuntimeInSeconds": 60},
}


def changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    target = spec
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return spec


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("RoleArn",), "arn:aws:iam::123456789012:role/other"),
        (("ResourceConfig", "InstanceCount"), 2),
        (("ResourceConfig", "InstanceType"), "ml.g5.xlarge"),
        (("ResourceConfig", "VolumeKmsKeyId"), "key"),
        (("ResourceConfig", "VolumeSizeInGB"), 11),
        (("VpcConfig", "SecurityGroupIds"), ["sg-2"]),
        (("VpcConfig", "Subnets"), ["subnet-2"]),
        (("EnableInterContainerTrafficEncryption",), True),
        (("EnableNetworkIsolation",), True),
        (("SessionChainingConfig", "EnableSessionTagChaining"), True),
    ],
)
def test_every_matching_field_changes_the_key(path: tuple[str, ...], value: Any) -> None:
    assert rules.match_key(changed(path, value)) != rules.match_key(BASE)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("ResourceConfig", "KeepAlivePeriodInSeconds"), 60),
        (("StoppingCondition", "MaxRuntimeInSeconds"), 600),
        (("HyperParameters",), {"lr": "0.1"}),
        (("EnableNetworkIsolation",), False),  # the default, said out loud
        (("SessionChainingConfig", "EnableSessionTagChaining"), False),
    ],
)
def test_other_fields_do_not_change_the_key(path: tuple[str, ...], value: Any) -> None:
    assert rules.match_key(changed(path, value)) == rules.match_key(BASE)


def test_which_endings_may_keep_instances() -> None:
    assert rules.may_retain("completed", None, launched=True) is None
    assert rules.may_retain("stopped", None, launched=True) is None
    assert rules.may_retain("failed", "AlgorithmError: ExitCode 1", launched=True) is None
    assert rules.may_retain("failed", "ClientError: no such file", launched=True) is None
    assert rules.may_retain("failed", "my own failure text", launched=True) is None
    assert rules.may_retain("stopped", None, launched=False) == rules.STOPPED_EARLY
    assert (
        rules.may_retain("failed", "InternalServerError: agent died", launched=True)
        == rules.INFRASTRUCTURE
    )


def test_deadline_is_the_keep_alive_or_the_28_day_cap() -> None:
    born = datetime(2026, 1, 1, tzinfo=UTC)
    assert rules.deadline(born + timedelta(hours=1), 600, born) == born + timedelta(
        hours=1, minutes=10
    )
    late = born + timedelta(days=28) - timedelta(minutes=5)
    assert rules.deadline(late, 3600, born) == born + timedelta(days=28)


def test_refusals() -> None:
    assert rules.refusal(BASE) is None
    assert rules.refusal(changed(("ResourceConfig", "KeepAlivePeriodInSeconds"), 0)) is None
    assert "3600" in (
        rules.refusal(changed(("ResourceConfig", "KeepAlivePeriodInSeconds"), 3601)) or ""
    )
    assert "spot" in (rules.refusal(changed(("EnableManagedSpotTraining",), True)) or "")
    groups = changed(("ResourceConfig", "InstanceGroups"), [{"InstanceType": "ml.m5.xlarge"}])
    assert "heterogeneous" in (rules.refusal(groups) or "")
    # Without a keep-alive, neither is a warm pool question.
    spot = changed(("EnableManagedSpotTraining",), True)
    spot["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 0
    assert rules.refusal(spot) is None


def test_status_tables() -> None:
    W = WarmPoolStatus
    POOL_TRANSITIONS.check(W.AVAILABLE, W.IN_USE)
    POOL_TRANSITIONS.check(W.IN_USE, W.AVAILABLE)
    JOB_VIEW_TRANSITIONS.check(W.AVAILABLE, W.REUSED)
    JOB_VIEW_TRANSITIONS.check(W.IN_USE, W.AVAILABLE)
    for table, old, new in (
        (POOL_TRANSITIONS, W.TERMINATED, W.AVAILABLE),
        (JOB_VIEW_TRANSITIONS, W.REUSED, W.AVAILABLE),
        (JOB_VIEW_TRANSITIONS, W.TERMINATED, W.IN_USE),
    ):
        with pytest.raises(IllegalTransition):
            table.check(old, new)
