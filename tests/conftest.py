"""Shared fixtures: a live server, and databases of both kinds."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.harness import DockyardServer

POSTGRES_URL = os.environ.get("DOCKYARD_TEST_POSTGRES_URL")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    """One real-clock server on SQLite shared by the read-only end-to-end tests."""
    instance = DockyardServer(tmp_path_factory.mktemp("dockyard")).start()
    yield instance
    instance.stop()


@pytest.fixture
def manual_server(tmp_path: Path) -> Iterator[DockyardServer]:
    instance = DockyardServer(tmp_path / "data", clock="manual").start()
    yield instance
    instance.stop()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL not configured (DOCKYARD_TEST_POSTGRES_URL); .ci/run sets it")
    name = f"dockyard_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs on SQLite and, where configured, on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("postgres_url"))
