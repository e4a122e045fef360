"""Console sessions on both databases: ended by sign-out and by disabling the key, and
never more than a few per key."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dockyard.secretbox import SecretBox
from dockyard.services import accounts, console_sessions
from dockyard.services.accounts import KeyStatus
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import ConsoleSession

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=12)


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def test_a_session_lives_until_it_ends_or_expires(db: Database, tmp_path: Path) -> None:
    box = SecretBox.for_data_dir(tmp_path)
    with db.session() as session:
        accounts.create_account(session, NOW, "team")
        key = accounts.create_access_key(session, NOW, box, "team").access_key_id
        first = console_sessions.begin(session, NOW, key, LATER)
        second = console_sessions.begin(session, NOW, key, LATER)
        operator = console_sessions.begin(session, NOW, "operator", LATER)
    with db.read() as connection:
        assert console_sessions.live(connection, first, key, NOW)
        assert not console_sessions.live(connection, first, "operator", NOW)  # not its
        assert not console_sessions.live(connection, first, key, LATER)  # expired
    with db.session() as session:
        console_sessions.end(session, first)
    with db.read() as connection:
        assert not console_sessions.live(connection, first, key, NOW)
        assert console_sessions.live(connection, second, key, NOW)
    with db.session() as session:
        accounts.set_key_status(session, key, KeyStatus.INACTIVE)
        accounts.set_key_status(session, key, KeyStatus.ACTIVE)
    with db.read() as connection:
        assert not console_sessions.live(connection, second, key, NOW)  # for good
        assert console_sessions.live(connection, operator, "operator", NOW)
    with db.session() as session:
        third = console_sessions.begin(session, NOW, key, LATER)
        accounts.delete_access_key(session, key)
    with db.read() as connection:
        assert not console_sessions.live(connection, third, key, NOW)


def test_a_principal_keeps_a_bounded_number_of_sessions(db: Database) -> None:
    made = []
    with db.session() as session:
        for n in range(console_sessions.MAX_PER_PRINCIPAL + 5):
            made.append(
                console_sessions.begin(session, NOW + timedelta(seconds=n), "operator", LATER)
            )
    with db.read() as connection:
        alive = [s for s in made if console_sessions.live(connection, s, "operator", NOW)]
    assert alive == made[-console_sessions.MAX_PER_PRINCIPAL :]  # the oldest ended
    # Expired sessions go at the next sign-in, whoever's.
    with db.session() as session:
        console_sessions.begin(
            session, LATER + timedelta(seconds=1), "AKIAOTHER", LATER + timedelta(hours=1)
        )
    with db.read() as connection:
        assert connection.execute(select(func.count()).select_from(ConsoleSession)).scalar() == 1
