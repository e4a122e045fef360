"""A pass places its queued jobs in one transaction under one capacity lock (issue 13):
each placement sees the ones before it (no instance is given twice), and a job whose
placing fails undoes only its own work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, select

from dockyard.clock import ManualClock
from dockyard.compute.backends.local import LocalBackend, end_agents
from dockyard.config import load_settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.domain.job_runtime import JobRuntime
from dockyard.services import accounts, capacity, fleet
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, TrainingJob
from tests.fixtures import BASE_TIME, insert_training_jobs

SPEC: dict[str, Any] = {
    "AlgorithmSpecification": {
        "TrainingImage": "python:3.11",
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["sleep", "600"],
    },
    "RoleArn": "arn:aws:iam::123456789012:role/training",
    "OutputDataConfig": {"S3OutputPath": "s3://results/out"},
    "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
    "StoppingCondition": {"MaxRuntimeInSeconds": 600},
}


def test_one_pass_places_its_jobs_in_one_transaction(database_url: str, tmp_path: Path) -> None:
    db = Database(database_url)
    migrate.upgrade(db)
    settings = load_settings(None, data_dir=tmp_path / "data", sandbox="none")
    plans = plan_settings(settings)
    clock = ManualClock(BASE_TIME)
    try:
        with db.session() as session:
            fleet.sync_fleet(session, plans.fleet, clock.now())
            account = accounts.create_account(session, clock.now(), "batch").id
        with db.read_session() as session:
            calendar = capacity.load_calendar(
                session, clock.now(), region="us-east-1", instance_type="ml.m5.xlarge"
            )
        largest = max(pool.capacity for pool in calendar.pools())
        # Jobs that each take the whole of the largest pool, one more than there are
        # pools of the type, and one whose stored request is broken.
        names = [f"whole-{i}" for i in range(len(calendar.pools()) + 1)] + ["broken"]
        insert_training_jobs(database_url, account, names, status="InProgress")
        with db.session() as session:
            for job in session.scalars(select(TrainingJob)):
                spec = {**SPEC, "ResourceConfig": {**SPEC["ResourceConfig"]}}
                spec["ResourceConfig"]["InstanceCount"] = largest
                if job.name == "broken":
                    del spec["StoppingCondition"]
                job.spec, job.instance_count, job.runtime = spec, largest, JobRuntime()
                job.secondary_status = "Starting"
        reconciler = JobsReconciler(db, clock, LocalBackend(tmp_path / "data"), settings, plans)
        statements: list[str] = []
        event.listen(
            db.engine, "before_cursor_execute", lambda c, u, sql, *a: statements.append(sql)
        )
        reconciler()

        # One capacity lock for the whole pass.
        assert len([sql for sql in statements if "capacity_lock" in sql]) == 1
        with db.read_session() as session:
            jobs = {job.name: job for job in session.scalars(select(TrainingJob))}
            leases = session.scalars(select(LeaseRow)).all()
        fits = sum(1 for pool in calendar.pools() if pool.capacity == largest)
        placed = [name for name, job in jobs.items() if job.runtime.placement]
        assert len(placed) == fits  # each pool of that size given once, never twice
        assert len(leases) == fits and len({lease.pool_key for lease in leases}) == fits
        waiting = [name for name, job in jobs.items() if job.waiting_for]
        assert len(waiting) == len(names) - 1 - fits
        # The broken job's failure undid its own work only; it is backed off.
        assert jobs["broken"].claim_owner is None and jobs["broken"].runtime == JobRuntime()
        assert jobs["broken"].id in reconciler.queue._backoff
        assert all(job.claim_owner is None for job in jobs.values())
    finally:
        end_agents(tmp_path / "data")
        db.dispose()
