"""Training plans with boto3 against a live manual-clock server: search, buy, live, expire."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import create_engine, text

from tests.e2e.plan_helpers import plan_status, search, set_clock, settle, tomorrow_at
from tests.harness import DockyardServer

P5 = "ml.p5.48xlarge"


def at(day0, days: int, hour: int = 11, minute: int = 30):
    return day0.replace(hour=hour, minute=minute) + timedelta(days=days)


def test_two_block_plan_walks_through_its_whole_life(manual_server: DockyardServer) -> None:
    d0 = tomorrow_at(6)
    set_clock(manual_server, d0)
    client = manual_server.client()
    # Fill every AZ for day 1 (11:30 -> 11:30), so two days in a row cannot fit.
    blockers = search(
        client,
        InstanceType=P5,
        InstanceCount=8,
        DurationHours=24,
        StartTimeAfter=at(d0, 1),
        EndTimeBefore=at(d0, 2),
    )
    assert [o["ReservedCapacityOfferings"][0]["AvailabilityZone"] for o in blockers] == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
    ]
    for index, offering in enumerate(blockers):
        client.create_training_plan(
            TrainingPlanName=f"blocker-{index}",
            TrainingPlanOfferingId=offering["TrainingPlanOfferingId"],
        )

    offerings = search(
        client,
        InstanceType=P5,
        InstanceCount=8,
        DurationHours=48,
        StartTimeAfter=at(d0, 0),
        EndTimeBefore=at(d0, 3),
    )
    assert offerings, "a split must be offered when no contiguous block fits"
    assert all(len(o["ReservedCapacityOfferings"]) == 2 for o in offerings)
    first = offerings[0]
    blocks = first["ReservedCapacityOfferings"]
    assert [b["StartTime"] for b in blocks] == [at(d0, 0), at(d0, 2)]
    assert [b["EndTime"] for b in blocks] == [at(d0, 1), at(d0, 3)]
    assert all(b["EndTime"].astimezone(UTC).strftime("%H:%M") == "11:30" for b in blocks)
    assert (first["DurationHours"], first["DurationMinutes"]) == (48, 0)
    assert float(first["UpfrontFee"]) == pytest.approx(55.04 * 8 * 48)

    arn = client.create_training_plan(
        TrainingPlanName="two-blocks",
        TrainingPlanOfferingId=first["TrainingPlanOfferingId"],
        Tags=[{"Key": "team", "Value": "vision"}],
    )["TrainingPlanArn"]
    assert arn.endswith(":training-plan/two-blocks")
    settle(manual_server)
    assert plan_status(client, "two-blocks") == ("Scheduled", ["Scheduled", "Scheduled"])

    steps = [
        (at(d0, 0, 11, 29), ("Scheduled", ["Scheduled", "Scheduled"])),
        (at(d0, 0), ("Active", ["Active", "Scheduled"])),
        (at(d0, 1, 11, 29), ("Active", ["Active", "Scheduled"])),
        (at(d0, 1), ("Scheduled", ["Expired", "Scheduled"])),  # the gap
        (at(d0, 2, 11, 29), ("Scheduled", ["Expired", "Scheduled"])),
        (at(d0, 2), ("Active", ["Expired", "Active"])),
        (at(d0, 3, 11, 29), ("Active", ["Expired", "Active"])),
        (at(d0, 3), ("Expired", ["Expired", "Expired"])),
    ]
    for instant, expected in steps:
        set_clock(manual_server, instant)
        assert plan_status(client, "two-blocks") == expected, instant

    plan = client.describe_training_plan(TrainingPlanName="two-blocks")
    assert plan["TrainingPlanArn"] == arn
    assert client.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "team", "Value": "vision"}]
    client.add_tags(ResourceArn=arn, Tags=[{"Key": "cost-centre", "Value": "42"}])
    client.delete_tags(ResourceArn=arn, TagKeys=["team"])
    assert client.list_tags(ResourceArn=arn)["Tags"] == [{"Key": "cost-centre", "Value": "42"}]
    assert plan["StartTime"] == at(d0, 0) and plan["EndTime"] == at(d0, 3)
    assert plan["TotalInstanceCount"] == 8
    # Payment was recorded in the ledger, once.
    engine = create_engine(f"sqlite:///{manual_server.data_dir / 'dockyard.db'}")
    with engine.connect() as connection:
        fees = (
            connection.execute(
                text("SELECT amount FROM ledger_entries WHERE resource_arn = :arn"), {"arn": arn}
            )
            .scalars()
            .all()
        )
    engine.dispose()
    assert fees == [first["UpfrontFee"]]


def test_first_offering_is_contiguous_and_plans_are_listed(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    client = manual_server.client()
    offerings = search(client, InstanceType=P5, InstanceCount=4, DurationHours=72)
    assert 1 <= len(offerings) <= 3
    first = offerings[0]["ReservedCapacityOfferings"]
    assert len(first) == 1 and first[0]["InstanceCount"] == 4
    # The first block starts at the 30-minute lead: 06:30, and ends 11:30 three days on.
    assert first[0]["StartTime"] == tomorrow_at(6, 30)
    assert first[0]["EndTime"] == tomorrow_at(11, 30) + timedelta(days=3)
    assert (first[0]["DurationHours"], first[0]["DurationMinutes"]) == (77, 0)
    for name, offering in zip(["alpha", "beta"], offerings[:2], strict=False):
        client.create_training_plan(
            TrainingPlanName=name, TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )
    settle(manual_server)
    listed = client.list_training_plans(SortBy="TrainingPlanName", SortOrder="Descending")
    names = [p["TrainingPlanName"] for p in listed["TrainingPlanSummaries"]]
    assert names == sorted(names, reverse=True) and "alpha" in names
    scheduled = client.list_training_plans(Filters=[{"Name": "Status", "Value": "Scheduled"}])
    assert len(scheduled["TrainingPlanSummaries"]) == len(names)
    assert (
        client.list_training_plans(Filters=[{"Name": "Status", "Value": "Active"}])[
            "TrainingPlanSummaries"
        ]
        == []
    )
    block_arn = client.describe_training_plan(TrainingPlanName="alpha")[
        "ReservedCapacitySummaries"
    ][0]["ReservedCapacityArn"]
    capacity = client.describe_reserved_capacity(ReservedCapacityArn=block_arn)
    assert capacity["InstanceType"] == P5 and capacity["TotalInstanceCount"] == 4
    assert capacity["Status"] == "Scheduled"


def test_an_offering_is_bought_once_and_names_are_unique(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    client = manual_server.client()
    offering = search(client, InstanceType=P5, InstanceCount=1, DurationHours=24)[0]
    client.create_training_plan(
        TrainingPlanName="once", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
    )
    with pytest.raises(client.exceptions.ResourceInUse) as excinfo:
        client.create_training_plan(
            TrainingPlanName="twice", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )
    assert "already bought" in str(excinfo.value)
    other = search(client, InstanceType=P5, InstanceCount=1, DurationHours=24)[0]
    with pytest.raises(client.exceptions.ResourceInUse) as excinfo:
        client.create_training_plan(
            TrainingPlanName="once", TrainingPlanOfferingId=other["TrainingPlanOfferingId"]
        )
    assert "already exists" in str(excinfo.value)
    # Names are unique regardless of case, as job names are (issue 12).
    with pytest.raises(client.exceptions.ResourceInUse) as excinfo:
        client.create_training_plan(
            TrainingPlanName="ONCE", TrainingPlanOfferingId=other["TrainingPlanOfferingId"]
        )
    assert "already exists" in str(excinfo.value)
    with pytest.raises(client.exceptions.ResourceNotFound):
        client.create_training_plan(TrainingPlanName="ghost", TrainingPlanOfferingId="tpo-nope")
    with pytest.raises(client.exceptions.ResourceNotFound):
        client.describe_training_plan(TrainingPlanName="ghost")


def test_offerings_expire(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    client = manual_server.client()
    offering = search(
        client, InstanceType=P5, InstanceCount=1, DurationHours=24, StartTimeAfter=tomorrow_at(12)
    )[0]
    set_clock(manual_server, tomorrow_at(6, 11))
    with pytest.raises(ClientError) as excinfo:
        client.create_training_plan(
            TrainingPlanName="late", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"
    assert "expired" in excinfo.value.response["Error"]["Message"]


def test_accounts_cannot_see_or_buy_each_others(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    _, key = manual_server.new_account("other-team")
    mine, theirs = manual_server.client(), manual_server.client(key=key)
    offering = search(mine, InstanceType=P5, InstanceCount=2, DurationHours=24)[0]
    with pytest.raises(theirs.exceptions.ResourceNotFound):
        theirs.create_training_plan(
            TrainingPlanName="stolen", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )
    mine.create_training_plan(
        TrainingPlanName="mine", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
    )
    with pytest.raises(theirs.exceptions.ResourceNotFound):
        theirs.describe_training_plan(TrainingPlanName="mine")
    assert theirs.list_training_plans()["TrainingPlanSummaries"] == []
    block = mine.describe_training_plan(TrainingPlanName="mine")["ReservedCapacitySummaries"][0]
    with pytest.raises(theirs.exceptions.ResourceNotFound):
        theirs.describe_reserved_capacity(ReservedCapacityArn=block["ReservedCapacityArn"])
    plan_arn = mine.describe_training_plan(TrainingPlanName="mine")["TrainingPlanArn"]
    with pytest.raises(ClientError) as excinfo:
        theirs.list_tags(ResourceArn=plan_arn)
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"


def test_ultraservers_are_bought_whole(manual_server: DockyardServer) -> None:
    set_clock(manual_server, tomorrow_at(6))
    client = manual_server.client()
    offerings = search(
        client, UltraServerType="ml.u-p6e-gb200x72", UltraServerCount=1, DurationHours=24
    )
    block = offerings[0]["ReservedCapacityOfferings"][0]
    assert block["ReservedCapacityType"] == "UltraServer"
    assert (block["InstanceType"], block["InstanceCount"]) == ("ml.p6e-gb200.36xlarge", 18)
    assert block["AvailabilityZone"] == "us-east-1-dfw-2a"
    client.create_training_plan(
        TrainingPlanName="nvl72",
        TrainingPlanOfferingId=offerings[0]["TrainingPlanOfferingId"],
        SpareInstanceCountPerUltraServer=1,
    )
    settle(manual_server)
    plan = client.describe_training_plan(TrainingPlanName="nvl72")
    assert plan["TotalUltraServerCount"] == 1 and plan["TotalInstanceCount"] == 18
    assert plan["AvailableSpareInstanceCount"] == 1
    arn = plan["ReservedCapacitySummaries"][0]["ReservedCapacityArn"]
    summary = client.describe_reserved_capacity(ReservedCapacityArn=arn)["UltraServerSummary"]
    assert summary["UltraServerCount"] == 1 and summary["UnhealthyInstanceCount"] == 0
    servers = client.list_ultra_servers_by_reserved_capacity(ReservedCapacityArn=arn)[
        "UltraServers"
    ]
    assert len(servers) == 1
    assert servers[0]["TotalInstanceCount"] == 18 and servers[0]["HealthStatus"] == "OK"
    assert servers[0]["ConfiguredSpareInstanceCount"] == 1
    # Two UltraServers exist; with one reserved, asking for two the same day finds none whole.
    both = search(
        client,
        UltraServerType="ml.u-p6e-gb200x72",
        UltraServerCount=2,
        DurationHours=24,
        EndTimeBefore=tomorrow_at(11, 30) + timedelta(days=1),
    )
    assert both == []
    with pytest.raises(ClientError) as excinfo:
        search(client, InstanceType="ml.p6e-gb200.36xlarge", InstanceCount=8, DurationHours=24)
    assert "UltraServer" in excinfo.value.response["Error"]["Message"]


def _server_with_config(tmp_path: Path, config: str, account: str) -> DockyardServer:
    path = tmp_path / "dockyard.toml"
    path.write_text(config)
    server = DockyardServer(tmp_path / "data", clock="manual")
    server.extra_args = ["--config", str(path)]
    server.start()
    return server


@pytest.fixture
def limited_server(tmp_path: Path):
    config = (
        '[billing.budgets]\n"111122223333" = 1000\n'
        '[quotas.reserved_instances]\n"ml.p5.48xlarge" = 8\n'
    )
    server = _server_with_config(tmp_path, config, "111122223333")
    yield server
    server.stop()


def test_budget_and_quota(limited_server: DockyardServer) -> None:
    server = limited_server
    set_clock(server, tomorrow_at(6))
    from tests.harness import run_cli

    run_cli("accounts", "create", "small", "--id", "111122223333", data_dir=server.data_dir)
    small = server.client(key=server.new_key("111122223333"))

    offering = search(small, InstanceType=P5, InstanceCount=1, DurationHours=24)[0]
    assert float(offering["UpfrontFee"]) > 1000
    small.create_training_plan(
        TrainingPlanName="too-dear", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
    )
    settle(server)
    plan = small.describe_training_plan(TrainingPlanName="too-dear")
    assert plan["Status"] == "Failed"
    assert "budget" in plan["StatusMessage"] and "1000" in plan["StatusMessage"]
    assert [b["Status"] for b in plan["ReservedCapacitySummaries"]] == ["Failed"]

    # The quota: 8 p5 instances for the development account.
    dev = server.client()
    first = search(dev, InstanceType=P5, InstanceCount=8, DurationHours=24)[0]
    dev.create_training_plan(
        TrainingPlanName="eight", TrainingPlanOfferingId=first["TrainingPlanOfferingId"]
    )
    more = search(dev, InstanceType=P5, InstanceCount=1, DurationHours=24)[0]
    with pytest.raises(dev.exceptions.ResourceLimitExceeded) as excinfo:
        dev.create_training_plan(
            TrainingPlanName="nine", TrainingPlanOfferingId=more["TrainingPlanOfferingId"]
        )
    assert "quota is 8" in str(excinfo.value)
