"""Engines and sessions.

SQLite is the embedded default (WAL mode, so readers never wait on the writer and a
SIGKILL loses nothing committed); PostgreSQL is used when the URL says so. Nothing
connects at import time: callers build a Database from settings and pass it down.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL is durable across process crashes in WAL mode (only power loss can lose the tail).
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()
    # Transactions are begun by _sqlite_begin, not by the driver.
    dbapi_connection.isolation_level = None


def _sqlite_begin(connection: Connection) -> None:
    # A write transaction takes SQLite's write lock at BEGIN: a deferred transaction that
    # reads and then writes would fail with SQLITE_BUSY_SNAPSHOT (which busy_timeout does
    # not wait out) whenever another writer committed in between.
    write = connection.get_execution_options().get("dockyard_write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 10},
            pool_size=8,
            max_overflow=16,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=16)


class Database:
    """An engine plus a session factory; one per process, passed explicitly."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._sessions = sessionmaker(
            self.engine.execution_options(dockyard_write=True), expire_on_commit=False
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        with self._sessions.begin() as session:
            yield session

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """An ORM session for reads only: it never takes SQLite's write lock."""
        with self._read_sessions() as session:
            yield session

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A plain connection for reads on the hot path: no ORM session to set up."""
        with self.engine.connect() as connection:
            yield connection

    def dispose(self) -> None:
        self.engine.dispose()
