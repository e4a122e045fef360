"""The one ending path: a job given up on ends as any failed job does - its end
recorded, its capacity released, the time it trained billed (issue 26)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dockyard.clock import ManualClock
from dockyard.config import load_settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.domain.billing import Charge
from dockyard.domain.job_runtime import JobPhase
from dockyard.domain.placement import Placement
from dockyard.services import accounts, fleet, logs
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, LedgerEntry, TrainingJob
from tests.control.fake_backend import FakeInstances
from tests.control.test_step_errors import SPEC
from tests.fixtures import BASE_TIME, insert_training_jobs

TRAINED = timedelta(minutes=10, milliseconds=500)


def _running_job(database_url: str, tmp_path: Path, spec: dict[str, Any]) -> Any:
    """A job that has been training for TRAINED when the reconciler gives up on it."""
    db = Database(database_url)
    migrate.upgrade(db)
    settings = load_settings(None, data_dir=tmp_path / "data", sandbox="none")
    plans = plan_settings(settings)
    clock = ManualClock(BASE_TIME)
    with db.session() as session:
        fleet.sync_fleet(session, plans.fleet, clock.now())
        account = accounts.create_account(session, clock.now(), "ending").id
    insert_training_jobs(database_url, account, ["stuck"], status="InProgress")
    with db.session() as session:
        job = session.scalars(select(TrainingJob)).one()
        job.spec = spec
        job.secondary_status = "Training"
        job.transitions = {
            "items": [
                {"Status": "Training", "StartTime": BASE_TIME.isoformat(), "StatusMessage": "x"}
            ]
        }
        job.training_start_time = BASE_TIME
        placement = Placement("ml.m5.xlarge/us-east-1a", "us-east-1a")
        # Stored a phase at a time, as the reconciler moves it.
        job.runtime = job.runtime.placed(placement, home="k", placed_at=BASE_TIME)
        job.runtime = job.runtime.with_specs([{"host": "algo-1"}]).running()
        job_id = job.id
    clock.set(BASE_TIME + TRAINED)
    backend = FakeInstances(clock).backend  # no instance needed: it is given up on
    reconciler = JobsReconciler(db, clock, backend, settings, plans)
    return db, reconciler, job_id, plans


def test_a_job_given_up_on_is_billed_and_ended_like_any_failure(
    database_url: str, tmp_path: Path
) -> None:
    db, reconciler, job_id, plans = _running_job(database_url, tmp_path, SPEC)
    try:
        reconciler.give_up(job_id, "InternalServerError: dockyard could not run the job: boom")
        with db.read_session() as session:
            job = session.get(TrainingJob, job_id)
            assert job is not None
            entries = session.scalars(select(LedgerEntry)).all()
            assert not session.scalars(select(LeaseRow)).all()
            assert job.status == "Failed" and job.runtime.phase is JobPhase.ENDED
            assert job.failure_reason is not None and "boom" in job.failure_reason
            assert job.training_end_time == BASE_TIME + TRAINED
            assert job.transitions["items"][-1]["EndTime"] == (BASE_TIME + TRAINED).isoformat()
            # A started second counts; one instance at the type's price.
            assert job.billable_seconds == 601
            assert [(e.kind, e.resource_arn) for e in entries] == [
                (Charge.TRAINING.value, job.arn)
            ]
            price = plans.prices["ml.m5.xlarge"]
            assert Decimal(entries[0].amount) == (price * 601 / 3600).quantize(Decimal("0.0001"))
    finally:
        db.dispose()


def test_a_give_up_ends_the_job_even_when_its_metrics_cannot_be_read(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = {
        **SPEC,
        "AlgorithmSpecification": {
            **SPEC["AlgorithmSpecification"],
            "MetricDefinitions": [{"Name": "loss", "Regex": "loss=([0-9.]+)"}],
        },
    }
    db, reconciler, job_id, _ = _running_job(database_url, tmp_path, spec)

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the instances' files are gone")

    monkeypatch.setattr(logs, "job_metrics", unreadable)
    try:
        reconciler.give_up(job_id, "InternalServerError: dockyard could not run the job")
        with db.read_session() as session:
            job = session.get(TrainingJob, job_id)
            assert job is not None and job.status == "Failed"
            assert job.final_metrics is None and job.billable_seconds == 601
    finally:
        db.dispose()
