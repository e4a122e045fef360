"""A control plane without a server or processes, for the fast control-plane tests.

`World` holds a migrated database, a manual clock, the reconcilers as a server builds
them (`server.py`) and a `FakeInstances` behind their backend. Rows are made the way
the API makes them (`services.job_requests`, `services.offerings`, ...); `pass_()`
runs one pass of the reconcilers in the control loop's order, after handing the jobs
reconciler the wake-ups the fake's agents sent (each report wakes it, as an agent's
does). What the tests assert is what the rows say afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from dockyard.clock import ManualClock
from dockyard.config import PlanSettings, Settings, load_settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.control.plans import PlansReconciler
from dockyard.control.pools import PoolsReconciler
from dockyard.control.purges import PurgesReconciler
from dockyard.domain import jobs as job_rules
from dockyard.services import (
    accounts,
    capacity,
    fleet,
    job_requests,
    offerings,
    training_plans,
    warm_pools,
)
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, LedgerEntry, TrainingJob, WarmPool
from tests.control.fake_backend import FakeInstances

REGION = "us-east-1"
# 06:00 UTC: a plan bought now may start at 11:30 today (blocks end at 11:30 UTC). After
# the wall clock's now, as a manual-clock server's time is: the control plane reads the
# wall clock for what agents report on theirs (`running.run_seconds` of an agent that
# died without reporting its end), and the fake's agents report the manual clock's time.
START = datetime.combine(date.today() + timedelta(days=2), time(6, 0), UTC)
M5 = "ml.m5.xlarge"
P5 = "ml.p5.48xlarge"
# Two on-demand instances in each of two AZs; one reservable instance in each.
FLEET: list[dict[str, Any]] = [
    {"instance_type": M5, "availability_zone": "us-east-1a", "count": 2},
    {"instance_type": M5, "availability_zone": "us-east-1b", "count": 2},
    {"instance_type": P5, "availability_zone": "us-east-1a", "count": 1},
    {"instance_type": P5, "availability_zone": "us-east-1b", "count": 1},
]


def request(name: str, **changes: Any) -> dict[str, Any]:
    """A CreateTrainingJob request; `changes` replace its members, and ResourceConfig /
    StoppingCondition members are given by their own names (InstanceCount=2, ...)."""
    resources = {"InstanceType": M5, "InstanceCount": 1, "VolumeSizeInGB": 10}
    stopping = {"MaxRuntimeInSeconds": 3600}
    for member in list(changes):
        if member in ("InstanceType", "InstanceCount", "KeepAlivePeriodInSeconds"):
            resources[member] = changes.pop(member)
        elif member == "TrainingPlanArn":
            resources[member] = changes.pop(member)
        elif member == "MaxRuntimeInSeconds":
            stopping[member] = changes.pop(member)
    return {
        "TrainingJobName": name,
        "AlgorithmSpecification": {
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python", "train.py"],
        },
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {"S3OutputPath": "s3://results/out"},
        "ResourceConfig": resources,
        "StoppingCondition": stopping,
        **changes,
    }


@dataclasses.dataclass
class World:
    db: Database
    clock: ManualClock
    settings: Settings
    plans: PlanSettings
    instances: FakeInstances
    jobs: JobsReconciler
    pools: PoolsReconciler
    plan_reconciler: PlansReconciler
    purges: PurgesReconciler
    account: str

    # ------------------------------------------------------------------ the API's side

    def create_job(self, name: str, **changes: Any) -> None:
        with self.db.session() as session:
            job_requests.create(
                session,
                self.clock.now(),
                self.account,
                REGION,
                request(name, **changes),
                self.plans,
            )

    def stop_job(self, name: str) -> None:
        with self.db.session() as session:
            job_requests.stop(session, self.clock.now(), self.account, REGION, name)

    def update_keep_alive(self, name: str, seconds: int) -> None:
        with self.db.session() as session:
            warm_pools.update_keep_alive(
                session, self.clock.now(), self.account, REGION, name, seconds, self.plans
            )

    def buy_plan(self, name: str, instance_type: str, count: int, **search: Any) -> str:
        """Search and buy the first offering whose blocks `pick` accepts (default: the
        first); the plan's ARN. The plans reconciler pays for it on the next pass."""
        pick = search.pop("pick", lambda blocks: True)
        with self.db.session() as session:
            found = offerings.search(
                session,
                self.clock.now(),
                self.account,
                REGION,
                {
                    "TargetResources": ["training-job"],
                    "InstanceType": instance_type,
                    "InstanceCount": count,
                    **search,
                },
                self.plans,
            )["TrainingPlanOfferings"]
        offering = next(o for o in found if pick(o["ReservedCapacityOfferings"]))
        with self.db.session() as session:
            created = offerings.create(
                session,
                self.clock.now(),
                self.account,
                REGION,
                {
                    "TrainingPlanName": name,
                    "TrainingPlanOfferingId": offering["TrainingPlanOfferingId"],
                },
                self.plans,
            )
        return str(created["TrainingPlanArn"])

    def plan(self, name: str) -> dict[str, Any]:
        with self.db.read_session() as session:
            return training_plans.describe(session, self.account, REGION, name)

    # ------------------------------------------------------------------ the server's side

    def pass_(self) -> None:
        """One pass of the reconcilers, in the control loop's order; the jobs reconciler
        first hears the wake-ups the agents sent since the last."""
        self.plan_reconciler()
        self.jobs.woken(self.instances.take_wakes())
        self.jobs()
        self.pools()
        self.purges()

    def passes(self, count: int = 3) -> None:
        for _ in range(count):
            self.pass_()

    def look(self, name: str) -> None:
        """The jobs reconciler's look at a job's instances, as its periodic look (or a
        lost wake-up arriving late) makes it: the job is stepped on the next pass."""
        self.jobs.woken({self.key(name)})

    def advance(self, **delta: float) -> None:
        self.clock.advance(timedelta(**delta))

    # ------------------------------------------------------------------ reading rows

    def job(self, name: str) -> TrainingJob:
        with self.db.read_session() as session:
            job = session.scalar(select(TrainingJob).where(TrainingJob.name == name))
            assert job is not None, f"no training job {name}"
            return job

    def key(self, name: str) -> str:
        job = self.job(name)
        return job_rules.instance_key(job.account_id, job.region, job.name, job.uid)

    def messages(self, name: str) -> list[tuple[str, str]]:
        items = self.job(name).transitions["items"]
        return [(item["Status"], item.get("StatusMessage", "")) for item in items]

    def warm_pools(self) -> list[WarmPool]:
        with self.db.read_session() as session:
            return list(session.scalars(select(WarmPool).order_by(WarmPool.id)))

    def ledger(self, kind: str | None = None) -> list[LedgerEntry]:
        with self.db.read_session() as session:
            query = select(LedgerEntry).order_by(LedgerEntry.id)
            if kind is not None:
                query = query.where(LedgerEntry.kind == kind)
            return list(session.scalars(query))

    def leases(self, kind: str | None = None) -> list[LeaseRow]:
        with self.db.read_session() as session:
            query = select(LeaseRow).order_by(LeaseRow.id)
            if kind is not None:
                query = query.where(LeaseRow.kind == kind)
            return list(session.scalars(query))

    def free(self, instance_type: str, az: str) -> int:
        """Instances of a type free now in an AZ (the calendar's view)."""
        now = self.clock.now()
        with self.db.read_session() as session:
            calendar = capacity.load_calendar(
                session, now, region=REGION, instance_type=instance_type
            )
        return sum(
            pool.capacity - calendar[pool.key].usage_at(now)
            for pool in calendar.pools()
            if pool.availability_zone == az
        )


def make_world(
    database_url: str, tmp_path: Path, *, migrated: bool = False, **config: Any
) -> Iterator[World]:
    """A World on the database (`migrated`: already at the latest schema); `config` adds
    sections to the config ([quotas] ...)."""
    db = Database(database_url)
    if not migrated:
        migrate.upgrade(db)
    settings = load_settings(None, data_dir=tmp_path / "data", sandbox="none")
    settings = dataclasses.replace(settings, extra={"fleet": FLEET, **config})
    plans = plan_settings(settings)
    clock = ManualClock(START)
    instances = FakeInstances(clock)
    with db.session() as session:
        fleet.sync_fleet(session, plans.fleet, clock.now())
        account = accounts.create_account(session, clock.now(), "fast").id
    jobs = JobsReconciler(db, clock, instances.backend, settings, plans)
    world = World(
        db=db,
        clock=clock,
        settings=settings,
        plans=plans,
        instances=instances,
        jobs=jobs,
        pools=PoolsReconciler(db, clock, instances.backend, plans),
        plan_reconciler=PlansReconciler(db, clock, plans),
        purges=PurgesReconciler(db, instances.backend),
        account=account,
    )
    try:
        yield world
        assert instances.misuse == [], instances.misuse
    finally:
        db.dispose()
