"""Buying on both databases: concurrent buyers of one offering, and the lease invariant."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from dockyard.config import load_settings, plan_settings
from dockyard.services import accounts, fleet, offerings
from dockyard.services.errors import ServiceError
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, TrainingPlan

NOW = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def db(database_url: str):
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def test_concurrent_buyers_of_one_offering(db: Database) -> None:
    settings = plan_settings(load_settings(None))
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
        account = accounts.create_account(session, NOW, "buyers").id
    with db.session() as session:
        found = offerings.search(
            session,
            NOW,
            account,
            "us-east-1",
            {
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": 8,
                "DurationHours": 48,
                "TargetResources": ["training-job"],
            },
            settings,
        )["TrainingPlanOfferings"]
    offering_id = found[0]["TrainingPlanOfferingId"]
    outcomes: list[str] = []
    barrier = threading.Barrier(12)

    def buy(index: int) -> None:
        barrier.wait()
        try:
            with db.session() as session:
                offerings.create(
                    session,
                    NOW,
                    account,
                    "us-east-1",
                    {"TrainingPlanName": f"p{index}", "TrainingPlanOfferingId": offering_id},
                    settings,
                )
            outcomes.append("won")
        except ServiceError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=buy, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes) == ["ResourceInUse"] * 11 + ["won"]
    with db.session() as session:
        assert len(session.scalars(select(TrainingPlan)).all()) == 1
        leases = session.scalars(select(LeaseRow)).all()
        assert [lease.count for lease in leases] == [8]
        assert leases[0].end_time - leases[0].start_time == timedelta(hours=53)
