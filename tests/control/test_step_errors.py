"""A step that raises (issue 13): backed off, retried while the error may pass, and the
job failed with a clear reason when it will not - never retried every pass forever."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from dockyard.clock import ManualClock
from dockyard.compute.backends.local import LocalBackend, end_agents
from dockyard.config import load_settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.domain.job_runtime import JobRuntime
from dockyard.services import accounts, fleet
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, TrainingJob
from tests.fixtures import BASE_TIME, insert_training_jobs


def _reconciler(database_url: str, tmp_path: Path, spec: dict[str, Any]) -> Any:
    db = Database(database_url)
    migrate.upgrade(db)
    settings = load_settings(None, data_dir=tmp_path / "data", sandbox="none")
    plans = plan_settings(settings)
    clock = ManualClock(BASE_TIME)
    with db.session() as session:
        fleet.sync_fleet(session, plans.fleet, clock.now())
        account = accounts.create_account(session, clock.now(), "errors").id
    insert_training_jobs(database_url, account, ["broken"], status="InProgress")
    with db.session() as session:
        job = session.scalars(select(TrainingJob)).one()
        job.spec = spec
        job.runtime = JobRuntime()
        job.secondary_status = "Starting"
    reconciler = JobsReconciler(db, clock, LocalBackend(tmp_path / "data"), settings, plans)
    reconciler.queue.backoff_first_seconds = 0.0  # tries follow each other in this test
    return db, reconciler


def _job(db: Database) -> TrainingJob:
    with db.read_session() as session:
        return session.scalars(select(TrainingJob)).one()


SPEC: dict[str, Any] = {
    "AlgorithmSpecification": {
        "TrainingImage": "python:3.11",
        "TrainingInputMode": "File",
        "ContainerEntrypoint": ["true"],
    },
    "RoleArn": "arn:aws:iam::123456789012:role/training",
    "OutputDataConfig": {"S3OutputPath": "s3://results/out"},
    "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
    "StoppingCondition": {"MaxRuntimeInSeconds": 600},
}


def test_a_job_whose_step_cannot_work_fails_with_the_reason(
    database_url: str, tmp_path: Path
) -> None:
    # A stored request this version cannot read (its StoppingCondition lost): a fault
    # that no retry mends.
    broken = {key: value for key, value in SPEC.items() if key != "StoppingCondition"}
    db, reconciler = _reconciler(database_url, tmp_path, broken)
    try:
        reconciler()
        reconciler()
        assert _job(db).status == "InProgress"  # two tries: backed off, not given up
        reconciler()
        job = _job(db)
        assert job.status == "Failed" and job.secondary_status == "Failed"
        assert job.failure_reason is not None
        assert job.failure_reason.startswith("InternalServerError: dockyard could not run")
        assert "StoppingCondition" in job.failure_reason
        assert job.claim_owner is None
        with db.read_session() as session:
            assert not session.scalars(select(LeaseRow)).all()  # nothing held for it
    finally:
        db.dispose()


def test_a_passing_error_is_retried_until_it_passes(database_url: str, tmp_path: Path) -> None:
    db, reconciler = _reconciler(database_url, tmp_path, SPEC)
    try:
        # The backend cannot lay out the instance (its directory is a file): an OSError,
        # as a full disk would give.
        instances = tmp_path / "data" / "instances"
        instances.parent.mkdir(parents=True, exist_ok=True)
        instances.write_text("in the way")
        for _ in range(5):
            reconciler()
        job = _job(db)
        assert job.status == "InProgress" and job.failure_reason is None
        assert reconciler.queue._backoff[job.id].failures == 5
        instances.unlink()
        reconciler()
        assert not reconciler.queue._backoff
        assert (next(instances.iterdir()) / "algo-1" / "job.json").exists()  # launched
    finally:
        end_agents(tmp_path / "data")
        db.dispose()
