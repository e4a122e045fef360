"""Every §3.1 rule, broken over the wire, is a ValidationException naming the rule; and
of many concurrent buyers of the same offering exactly one wins."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.plan_helpers import search
from tests.harness import DockyardServer

P5 = "ml.p5.48xlarge"
NOW = datetime.now(UTC)

RULES: list[tuple[str, dict[str, Any], str]] = [
    ("count-3", {"InstanceType": P5, "InstanceCount": 3, "DurationHours": 24}, "InstanceCount"),
    (
        "count-128",
        {"InstanceType": P5, "InstanceCount": 128, "DurationHours": 24},
        "InstanceCount",
    ),
    ("hours-30", {"InstanceType": P5, "InstanceCount": 1, "DurationHours": 30}, "DurationHours"),
    (
        "days-183",
        {"InstanceType": P5, "InstanceCount": 1, "DurationHours": 24 * 183},
        "DurationHours",
    ),
    (
        "start-57-days-out",
        {
            "InstanceType": P5,
            "InstanceCount": 1,
            "DurationHours": 24,
            "StartTimeAfter": NOW + timedelta(days=57),
        },
        "56 days",
    ),
    (
        "end-before-start",
        {
            "InstanceType": P5,
            "InstanceCount": 1,
            "DurationHours": 24,
            "StartTimeAfter": NOW + timedelta(days=3),
            "EndTimeBefore": NOW + timedelta(days=2),
        },
        "EndTimeBefore",
    ),
    (
        "window-too-short",
        {
            "InstanceType": P5,
            "InstanceCount": 1,
            "DurationHours": 72,
            "EndTimeBefore": NOW + timedelta(days=1),
        },
        "EndTimeBefore",
    ),
    ("no-instances", {"DurationHours": 24}, "InstanceType"),
    (
        "both-kinds",
        {
            "InstanceType": P5,
            "InstanceCount": 1,
            "UltraServerType": "ml.u-p6e-gb200x72",
            "UltraServerCount": 1,
            "DurationHours": 24,
        },
        "UltraServer",
    ),
    ("no-duration", {"InstanceType": P5, "InstanceCount": 1}, "DurationHours"),
]


@pytest.mark.parametrize(("case", "request_", "named"), RULES, ids=[r[0] for r in RULES])
def test_rule_is_enforced(server: DockyardServer, case: str, request_: dict, named: str) -> None:
    client = server.client()
    with pytest.raises(ClientError) as excinfo:
        search(client, **request_)
    error = excinfo.value.response["Error"]
    assert error["Code"] == "ValidationException", error
    assert named in error["Message"], error["Message"]


def test_target_resources_names_one_target(server: DockyardServer) -> None:
    client = server.client()
    with pytest.raises(ClientError) as excinfo:
        client.search_training_plan_offerings(
            InstanceType=P5,
            InstanceCount=1,
            DurationHours=24,
            TargetResources=["training-job", "hyperpod-cluster"],
        )
    assert "TargetResources" in excinfo.value.response["Error"]["Message"]


def test_fifty_concurrent_buyers_one_winner(server: DockyardServer) -> None:
    client = server.client()
    offering = search(client, InstanceType="ml.trn2.48xlarge", InstanceCount=8, DurationHours=24)[
        0
    ]
    offering_id = offering["TrainingPlanOfferingId"]
    clients = [server.client(max_pool_connections=2) for _ in range(50)]

    def buy(index: int) -> str:
        try:
            clients[index].create_training_plan(
                TrainingPlanName=f"race-{index}", TrainingPlanOfferingId=offering_id
            )
            return "won"
        except ClientError as exc:
            return exc.response["Error"]["Code"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        outcomes = list(pool.map(buy, range(50)))
    assert outcomes.count("won") == 1, outcomes
    assert set(outcomes) == {"won", "ResourceInUse"}
    plans = client.list_training_plans(MaxResults=100)["TrainingPlanSummaries"]
    assert len([p for p in plans if p["TrainingPlanName"].startswith("race-")]) == 1


def test_fifty_buyers_of_overlapping_offerings_never_overbook(server: DockyardServer) -> None:
    """Different offerings for the same capacity: the calendar still never over-books."""
    _, key = server.new_account("racers")
    client = server.client(key=key)
    offerings = []
    for _ in range(10):
        offerings += search(
            client,
            InstanceType="ml.trn1.32xlarge",
            InstanceCount=8,
            DurationHours=24,
            EndTimeBefore=NOW + timedelta(days=2, hours=12),
        )
    ids = [o["TrainingPlanOfferingId"] for o in offerings]

    def buy(index: int) -> bool:
        try:
            server.client(key=key).create_training_plan(
                TrainingPlanName=f"over-{index}", TrainingPlanOfferingId=ids[index]
            )
            return True
        except ClientError:
            return False

    with ThreadPoolExecutor(max_workers=len(ids)) as pool:
        won = sum(pool.map(buy, range(len(ids))))
    assert won >= 1
    blocks = [
        block
        for plan in client.list_training_plans(MaxResults=100)["TrainingPlanSummaries"]
        for block in plan["ReservedCapacitySummaries"]
    ]
    assert len(blocks) >= won
    for block in blocks:  # at every block's start, the AZ's 8 instances are never exceeded
        overlapping = [
            other["TotalInstanceCount"]
            for other in blocks
            if other["AvailabilityZone"] == block["AvailabilityZone"]
            and other["StartTime"] <= block["StartTime"] < other["EndTime"]
        ]
        assert sum(overlapping) <= 8, (block, overlapping)
