"""Queued jobs cost a pass nothing until what they wait for changes (issue 13)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import event, select

from dockyard.clock import ManualClock
from dockyard.compute.backends.local import LocalBackend
from dockyard.config import load_settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.domain.job_runtime import JobRuntime
from dockyard.services import accounts, capacity, fleet
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob
from tests.fixtures import BASE_TIME, insert_training_jobs


def test_a_pass_skips_queued_jobs_until_their_capacity_changes(
    database_url: str, tmp_path: Path
) -> None:
    """With 10,000 queued jobs one pass took 46 s: each job was tried again behind the
    capacity lock with a calendar loaded for it, though nothing had changed."""
    db = Database(database_url)
    try:
        migrate.upgrade(db)
        settings = load_settings(None, data_dir=tmp_path / "data")
        plans = plan_settings(settings)
        clock = ManualClock(BASE_TIME)
        with db.session() as session:
            fleet.sync_fleet(session, plans.fleet, clock.now())
            account = accounts.create_account(session, clock.now(), "queued").id
        names = [f"queued-{i}" for i in range(20)]
        insert_training_jobs(database_url, account, names, status="InProgress")
        with db.session() as session:
            for index, job in enumerate(
                session.scalars(select(TrainingJob).order_by(TrainingJob.id))
            ):
                # More instances than the fleet has: they wait. One asks for fewer.
                count = 5_000 if index == 10 else 10_000
                job.spec = {
                    **job.spec,
                    "ResourceConfig": {**job.spec["ResourceConfig"], "InstanceCount": count},
                }
                job.instance_count = count
                job.runtime = JobRuntime()
                job.secondary_status = "Starting"
        reconciler = JobsReconciler(db, clock, LocalBackend(tmp_path / "data"), settings, plans)
        reconciler()
        with db.read_session() as session:
            stamps = session.scalars(select(TrainingJob.waiting_for)).all()
        assert len(stamps) == 20 and all(stamps)

        statements: list[str] = []
        event.listen(
            db.engine, "before_cursor_execute", lambda c, cur, sql, *rest: statements.append(sql)
        )
        reconciler.queue.recheck_all_at = float("inf")  # only stamps decide in these passes
        reconciler()
        assert len(statements) <= 3, statements  # the job list and the pool versions

        # Capacity of the type changes (a lease written): every such job is tried again.
        with db.read_session() as session:
            pool = next(
                p.pool
                for p in capacity.load_calendar(session, clock.now(), instance_type="ml.m5.xlarge")
            )
        with db.session() as session:
            capacity.lock(session)
            capacity.reserve(
                session,
                [(pool.key, 1)],
                clock.now() + timedelta(days=1),
                clock.now() + timedelta(days=2),
                kind="test",
                holder="someone",
                account_id=None,
            )
        statements.clear()
        reconciler()
        # The first job is tried, and fails; so is the one asking for fewer instances.
        # The others ask for as much as a job that just failed: they are not tried.
        tried = [sql for sql in statements if "claim_expires_at <" in sql]  # claims
        assert len(tried) == 2, statements
        # Both in one transaction, under one capacity lock.
        assert len([sql for sql in statements if "capacity_lock" in sql]) == 1, statements
        # Nor read again while nothing changes.
        statements.clear()
        reconciler()
        assert len(statements) <= 3, statements
        # And once time passes a lease's end, without any write at all.
        statements.clear()
        reconciler()
        quiet = len(statements)
        clock.advance(timedelta(days=3))
        statements.clear()
        reconciler()
        assert quiet <= 3 < len(statements)
    finally:
        db.dispose()
