"""Migrations: upgrade, the models match what the migrations built, downgrade."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import Base


def test_upgrade_autogenerate_check_downgrade(database_url: str) -> None:
    db = Database(database_url)
    try:
        migrate.upgrade(db)
        assert migrate.current_revision(db) == migrate.head_revision()
        with db.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
        migrate.upgrade(db)  # applying again is harmless
        migrate.downgrade(db, "base")
        assert set(inspect(db.engine).get_table_names()) <= {"alembic_version"}
        migrate.upgrade(db)
        assert "training_jobs" in inspect(db.engine).get_table_names()
    finally:
        db.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'wal.db'}")
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.dispose()


def test_the_migration_files_name_alembics_head() -> None:
    assert migrate.file_heads() == {migrate.head_revision()}


def test_a_start_at_the_newest_revision_does_not_load_alembic(tmp_path: Path) -> None:
    """Issue 12 (8): Alembic is a fifth of a second of every restart when nothing is
    to be done; it is loaded only to migrate."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    db = Database(url)
    migrate.upgrade(db)
    db.dispose()
    probe = (
        "import sys; from dockyard.store import migrate; from dockyard.store.db import Database; "
        f"db = Database({url!r}); migrate.upgrade(db); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_jobs_from_before_0007_get_their_instance_type_and_count(database_url: str) -> None:
    db = Database(database_url)
    try:
        migrate.upgrade(db, "0006")
        spec = {"ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 3}}
        with db.engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO accounts (id, name, created_at) VALUES ('111122223333', 'a', "
                    ":now)"
                ),
                {"now": "2026-01-01 00:00:00"},
            )
            connection.execute(
                text(
                    "INSERT INTO training_jobs (account_id, region, name, arn, status, "
                    "secondary_status, creation_time, last_modified_time, spec, transitions, "
                    "runtime, stop_requested) VALUES ('111122223333', 'us-east-1', 'old', "
                    "'arn:old', 'InProgress', 'Pending', :now, :now, :spec, '{}', '{}', false)"
                ),
                {"now": "2026-01-01 00:00:00", "spec": json.dumps(spec)},
            )
        migrate.upgrade(db)
        with db.engine.connect() as connection:
            row = connection.execute(
                text("SELECT instance_type, instance_count FROM training_jobs")
            ).one()
        assert tuple(row) == ("ml.p4d.24xlarge", 3)
    finally:
        db.dispose()
