"""Apply Alembic migrations programmatically; `dockyard serve` does this on every start.

A start finds the database at the newest revision nearly always, so that is checked
first with one query, against the revisions read from the migration files themselves;
Alembic (a fifth of a second to import) is loaded only when there is something to do.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from dockyard.store.db import Database

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
_REVISION = re.compile(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def alembic_config(connection: Any = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@cache
def file_heads() -> frozenset[str]:
    """The newest revisions, read from the migration files (what Alembic calls heads)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        source = path.read_text()
        revisions.update(_REVISION.findall(source))
        parents.update(_DOWN_REVISION.findall(source))
    return frozenset(revisions - parents)


def at_head(db: Database) -> bool:
    try:
        with db.engine.connect() as connection:
            stamped = connection.execute(text("SELECT version_num FROM alembic_version"))
            return frozenset(row[0] for row in stamped) == file_heads()
    except DBAPIError:  # no alembic_version table: a new database
        return False


def upgrade(db: Database, revision: str = "head") -> None:
    if revision == "head" and at_head(db):
        return
    from alembic import command

    with db.engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def downgrade(db: Database, revision: str) -> None:
    from alembic import command

    with db.engine.begin() as connection:
        command.downgrade(alembic_config(connection), revision)


def current_revision(db: Database) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
