"""The fast control-plane tests' world: reconcilers over a fake backend (`world`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.store import migrate
from dockyard.store.db import Database
from tests.control.world import World, make_world


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite database at the latest schema, copied for each test: migrating takes
    longer than most of these tests."""
    path = tmp_path_factory.mktemp("control") / "template.db"
    db = Database(f"sqlite:///{path}")
    try:
        migrate.upgrade(db)
    finally:
        db.dispose()
    return path


@pytest.fixture
def world(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    """Warm pools allowed (4 instances a type), on SQLite and, where configured, PostgreSQL."""
    migrated = False
    if database_url.startswith("sqlite:///"):
        template = request.getfixturevalue("migrated_sqlite")
        shutil.copyfile(template, database_url.removeprefix("sqlite:///"))
        migrated = True
    yield from make_world(
        database_url, tmp_path, migrated=migrated, quotas={"warm_pool_instances_per_type": 4}
    )
