"""The quota check's usage count: a sum over indexed columns, never the jobs loaded."""

from __future__ import annotations

from sqlalchemy import event

from dockyard.services.accounts import create_account
from dockyard.services.job_requests import instances_in_jobs
from dockyard.store import migrate
from dockyard.store.db import Database
from tests.fixtures import BASE_TIME, insert_training_jobs


def test_usage_is_summed_without_loading_a_job(database_url: str) -> None:
    """Issue 13: each CreateTrainingJob loaded and decoded every running job of the
    account (O(N²) to submit N jobs); it now reads the count from indexed columns."""
    db = Database(database_url)
    try:
        migrate.upgrade(db)
        with db.session() as session:
            mine = create_account(session, BASE_TIME, "quota-mine").id
            theirs = create_account(session, BASE_TIME, "quota-theirs").id
        names = [f"run-{i}" for i in range(30)]
        insert_training_jobs(database_url, mine, names, status="InProgress")
        insert_training_jobs(database_url, mine, ["stopping"], status="Stopping")
        insert_training_jobs(database_url, mine, ["done"], status="Completed")
        insert_training_jobs(database_url, theirs, ["other"], status="InProgress")
        statements: list[str] = []
        event.listen(
            db.engine,
            "before_cursor_execute",
            lambda conn, cursor, statement, *rest: statements.append(statement),
        )
        with db.read_session() as session:
            assert instances_in_jobs(session, mine, "us-east-1", "ml.m5.xlarge") == 31
            assert instances_in_jobs(session, mine, "us-east-1", "ml.p5.48xlarge") == 0
            assert instances_in_jobs(session, mine, "us-west-2", "ml.m5.xlarge") == 0
        assert statements and not any("spec" in statement for statement in statements)
    finally:
        db.dispose()
