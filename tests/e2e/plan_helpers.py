"""Helpers for training-plan tests against a manual-clock server."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from tests.harness import DockyardServer, run_cli


def set_clock(server: DockyardServer, instant: datetime) -> None:
    run_cli(
        "clock",
        "set",
        instant.isoformat(),
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    )


def settle(server: DockyardServer) -> None:
    """Wait for one reconciler pass (advancing the clock by nothing)."""
    run_cli("clock", "advance", "0s", "--endpoint-url", server.endpoint, data_dir=server.data_dir)


def tomorrow_at(hour: int, minute: int = 0) -> datetime:
    """A start instant safely after the manual clock's real-time start."""
    day = datetime.now(UTC).date() + timedelta(days=2)
    return datetime.combine(day, time(hour, minute), UTC)


def search(client: Any, **kwargs: Any) -> list[dict[str, Any]]:
    request = {"TargetResources": ["training-job"], **kwargs}
    return client.search_training_plan_offerings(**request)["TrainingPlanOfferings"]


def plan_status(client: Any, name: str) -> tuple[str, list[str]]:
    plan = client.describe_training_plan(TrainingPlanName=name)
    return plan["Status"], [b["Status"] for b in plan["ReservedCapacitySummaries"]]


ULTRASERVER_TYPE = "ml.u-p6e-gb200x72"
GB200 = "ml.p6e-gb200.36xlarge"  # the instances of one


def ultraserver_plan(
    server: DockyardServer, name: str, spares: int = 0, target: str = "training-job"
) -> tuple[str, datetime]:
    """A plan of one UltraServer for a day from tomorrow 11:30 UTC, bought with the clock
    set to 06:00 before it: its ARN and its block's start."""
    client = server.client()
    day0 = tomorrow_at(6)
    set_clock(server, day0)
    offering = search(
        client,
        TargetResources=[target],
        UltraServerType=ULTRASERVER_TYPE,
        UltraServerCount=1,
        DurationHours=24,
        StartTimeAfter=day0.replace(hour=11, minute=30),
    )[0]
    request: dict[str, Any] = {
        "TrainingPlanName": name,
        "TrainingPlanOfferingId": offering["TrainingPlanOfferingId"],
    }
    if spares:
        request["SpareInstanceCountPerUltraServer"] = spares
    arn = client.create_training_plan(**request)["TrainingPlanArn"]
    return str(arn), offering["ReservedCapacityOfferings"][0]["StartTime"]
