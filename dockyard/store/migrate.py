"""Apply Alembic migrations programmatically; `dockyard serve` does this on every start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from dockyard.store.db import Database

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(connection=None) -> Config:  # type: ignore[no-untyped-def]
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(db: Database, revision: str = "head") -> None:
    with db.engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def downgrade(db: Database, revision: str) -> None:
    with db.engine.begin() as connection:
        command.downgrade(alembic_config(connection), revision)


def current_revision(db: Database) -> str | None:
    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
