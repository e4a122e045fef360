"""Claiming a warm pool on both databases: concurrent claimers, exactly one winner."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from dockyard.config import load_settings, plan_settings
from dockyard.domain.job_runtime import JobRuntime, Outcome
from dockyard.domain.placement import Placement
from dockyard.services import accounts, capacity, fleet, job_requests, warm_pools
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import CapacityPool, LeaseRow, LedgerEntry, TrainingJob, WarmPool

NOW = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
CLAIMERS = 8


@pytest.fixture
def db(database_url: str):
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def request(name: str) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python", "-c", "pass"],
        },
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://b/out"},
        "ResourceConfig": {
            "InstanceType": "ml.m5.xlarge",
            "InstanceCount": 2,
            "VolumeSizeInGB": 10,
            "KeepAlivePeriodInSeconds": 600,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }


def test_concurrent_claimers_of_one_pool(db: Database) -> None:
    settings = dataclasses.replace(plan_settings(load_settings(None)), warm_pool_instance_quota=4)
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
        account = accounts.create_account(session, NOW, "claimers").id
        pool_key = session.scalar(
            select(CapacityPool.key).where(CapacityPool.instance_type == "ml.m5.xlarge")
        )
        for name in ["first", *(f"next-{i}" for i in range(CLAIMERS))]:
            job_requests.create(session, NOW, account, "us-east-1", request(name), settings)
    with db.session() as session:
        first = session.scalar(select(TrainingJob).where(TrainingJob.name == "first"))
        assert first is not None
        # As if the first job ran on two instances of pool_key and completed.
        first.runtime = JobRuntime().placed(Placement(pool_key, "x"), home="first-home")
        first.status = "Completed"
        pool = warm_pools.settle(
            session,
            first,
            NOW,
            outcome=Outcome.COMPLETED,
            failure_reason=None,
            launched=True,
            plans=settings,
        )
        assert pool is not None and pool.status == "Available"
    later = NOW + timedelta(minutes=1)
    winners: list[str] = []
    barrier = threading.Barrier(CLAIMERS)

    def claim(index: int) -> None:
        barrier.wait()
        with db.session() as session:
            capacity.lock(session)
            job = session.scalar(select(TrainingJob).where(TrainingJob.name == f"next-{index}"))
            assert job is not None
            if warm_pools.claim(session, job, later, settings) is not None:
                winners.append(job.name)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(CLAIMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(winners) == 1
    with db.session() as session:
        pool = session.scalars(select(WarmPool)).one()
        winner = session.scalar(select(TrainingJob).where(TrainingJob.name == winners[0]))
        assert winner is not None
        assert (pool.status, pool.job_id) == ("InUse", winner.id)
        assert winner.warm_pool_status == "InUse"
        first = session.scalar(select(TrainingJob).where(TrainingJob.name == "first"))
        assert first is not None
        assert (first.warm_pool_status, first.warm_pool_reused_by) == ("Reused", winners[0])
        assert first.warm_pool_retained_seconds == 60
        leases = session.scalars(select(LeaseRow)).all()
        assert [(lease.kind, lease.holder, lease.count) for lease in leases] == [
            ("training-job", winner.arn, 2)
        ]


@pytest.mark.parametrize("on_plan", [False, True])
def test_retained_time_is_charged_except_inside_a_plans_block(db: Database, on_plan: bool) -> None:
    """A pool kept in a plan's block counts its retained seconds but charges none: the
    plan's upfront fee paid for the capacity (domain.billing's plan rule)."""
    settings = dataclasses.replace(plan_settings(load_settings(None)), warm_pool_instance_quota=4)
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
        account = accounts.create_account(session, NOW, "retained").id
        pool_key = session.scalar(
            select(CapacityPool.key).where(CapacityPool.instance_type == "ml.m5.xlarge")
        )
        assert pool_key is not None
        job_requests.create(session, NOW, account, "us-east-1", request("kept"), settings)
    with db.session() as session:
        job = session.scalars(select(TrainingJob)).one()
        block = {"block": "rc-1", "work_ends": NOW + timedelta(hours=2)} if on_plan else {}
        job.runtime = job.runtime.placed(Placement(pool_key, "x", **block), home="kept-home")
        pool = warm_pools.settle(
            session,
            job,
            NOW,
            outcome=Outcome.COMPLETED,
            failure_reason=None,
            launched=True,
            plans=settings,
        )
        assert pool is not None and pool.status == "Available"
        warm_pools.terminate(session, pool, NOW + timedelta(seconds=90), "done", settings)
    with db.read_session() as session:
        job = session.scalars(select(TrainingJob)).one()
        entries = session.scalars(select(LedgerEntry)).all()
        assert job.warm_pool_retained_seconds == 90
        if on_plan:
            assert entries == []
        else:
            assert [(e.kind, e.resource_arn) for e in entries] == [
                ("warm-pool-instance-seconds", job.arn)
            ]
            assert Decimal(entries[0].amount) > 0
