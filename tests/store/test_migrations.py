"""Migrations: upgrade, the models match what the migrations built, downgrade."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

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
