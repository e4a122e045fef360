"""Migrations: upgrade, the models match what the migrations built, downgrade."""

from __future__ import annotations

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


def test_sqlite_runs_in_wal_mode(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'wal.db'}")
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.dispose()
