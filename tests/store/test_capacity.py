"""Buying on both databases: concurrent buyers of one offering, and the lease invariant."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from dockyard.config import load_settings, plan_settings
from dockyard.services import accounts, capacity, fleet, offerings
from dockyard.services.errors import ServiceError
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.store.tables import LeaseRow, TrainingPlan

NOW = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)


@pytest.fixture
def db(database_url: str):
    database = Database(database_url)
    migrate.upgrade(database)
    yield database
    database.dispose()


def test_concurrent_buyers_of_one_offering(db: Database) -> None:
    settings = plan_settings(load_settings(None))
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
        account = accounts.create_account(session, NOW, "buyers").id
    with db.session() as session:
        found = offerings.search(
            session,
            NOW,
            account,
            "us-east-1",
            {
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": 8,
                "DurationHours": 48,
                "TargetResources": ["training-job"],
            },
            settings,
        )["TrainingPlanOfferings"]
    offering_id = found[0]["TrainingPlanOfferingId"]
    outcomes: list[str] = []
    barrier = threading.Barrier(12)

    def buy(index: int) -> None:
        barrier.wait()
        try:
            with db.session() as session:
                offerings.create(
                    session,
                    NOW,
                    account,
                    "us-east-1",
                    {"TrainingPlanName": f"p{index}", "TrainingPlanOfferingId": offering_id},
                    settings,
                )
            outcomes.append("won")
        except ServiceError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=buy, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes) == ["ResourceInUse"] * 11 + ["won"]
    with db.session() as session:
        assert len(session.scalars(select(TrainingPlan)).all()) == 1
        leases = session.scalars(select(LeaseRow)).all()
        assert [lease.count for lease in leases] == [8]
        assert leases[0].end_time - leases[0].start_time == timedelta(hours=53)


def _shape(calendar: object) -> dict[str, object]:
    return {
        pool.pool.key: (pool.pool.capacity, pool.step_function())
        for pool in calendar  # type: ignore[attr-defined]
    }


def test_the_calendar_cache_follows_every_lease_write(db: Database) -> None:
    """Issue 13: each search loaded the whole calendar from the database (142 of its
    154 ms with 47 k leases). The cache reloads only pools whose version moved, and a
    second server's cache sees the first one's writes (the versions are in the database)."""
    from sqlalchemy import event

    settings = plan_settings(load_settings(None))
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
    one, two = capacity.CalendarCache(), capacity.CalendarCache()

    def agree() -> None:
        with db.read_session() as session:
            fresh = _shape(capacity.load_calendar(session, NOW, region="us-east-1"))
            assert _shape(one.calendar(session, NOW, region="us-east-1")) == fresh
            assert _shape(two.calendar(session, NOW, region="us-east-1")) == fresh

    agree()
    with db.read_session() as session:
        pool = next(iter(capacity.load_calendar(session, NOW, region="us-east-1"))).pool
    hour = timedelta(hours=1)
    with db.session() as session:
        capacity.lock(session)
        capacity.reserve(
            session,
            [(pool.key, 1)],
            NOW + hour,
            NOW + 3 * hour,
            kind="t",
            holder="a",
            account_id=None,
        )
    agree()
    with db.session() as session:
        capacity.release(session, "a")
    agree()

    statements: list[str] = []
    event.listen(
        db.engine,
        "before_cursor_execute",
        lambda c, cur, statement, *rest: statements.append(statement),
    )
    with db.read_session() as session:
        first = one.calendar(session, NOW, region="us-east-1")
        second = one.calendar(session, NOW, region="us-east-1")
    assert first is second  # its derived tables are kept too
    assert statements and not any("leases" in statement for statement in statements)


def test_reserve_refuses_to_over_book(db: Database) -> None:
    """Issue 13: the one writer of leases checks the invariant itself - even a caller
    that did not check first cannot over-book an instant of a pool."""
    settings = plan_settings(load_settings(None))
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
    with db.read_session() as session:
        pool = next(iter(capacity.load_calendar(session, NOW, region="us-east-1"))).pool
    hour = timedelta(hours=1)
    with db.session() as session:  # all of the pool for two hours
        capacity.reserve(
            session, [(pool.key, pool.capacity)], NOW, NOW + 2 * hour,
            kind="t", holder="all", account_id=None,
        )  # fmt: skip
    for start, end in ((NOW + hour, NOW + 3 * hour), (NOW - hour, NOW + hour)):
        with pytest.raises(capacity.CalendarConflict), db.session() as session:
            capacity.reserve(
                session, [(pool.key, 1)], start, end, kind="t", holder="more", account_id=None
            )
    with db.session() as session:  # after it, the pool is free again
        capacity.reserve(
            session, [(pool.key, pool.capacity)], NOW + 2 * hour, NOW + 4 * hour,
            kind="t", holder="next", account_id=None,
        )  # fmt: skip
    with db.read_session() as session:
        holders = sorted(session.scalars(select(LeaseRow.holder)))
    assert holders == ["all", "next"]


def test_a_transaction_sees_its_own_leases_and_the_cache_never_keeps_them(db: Database) -> None:
    """Issue 13: a pass places several jobs in one transaction, reading the calendar
    after each placement. It must see its own uncommitted leases (or it over-books),
    and the shared cache must not keep them: the transaction may yet roll back."""
    settings = plan_settings(load_settings(None))
    with db.session() as session:
        fleet.sync_fleet(session, settings.fleet, NOW)
    cache = capacity.CalendarCache()
    with db.read_session() as session:
        pool = next(iter(cache.calendar(session, NOW, region="us-east-1"))).pool
    hour = timedelta(hours=1)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), db.session() as session:
        capacity.reserve(
            session, [(pool.key, pool.capacity)], NOW, NOW + hour,
            kind="t", holder="undone", account_id=None,
        )  # fmt: skip
        inside = cache.calendar(session, NOW, region="us-east-1")
        assert not inside[pool.key].fits(NOW, NOW + hour, 1)  # its own lease, seen
        raise Undo
    # Another transaction commits a lease of its own on the pool: the pool's version is
    # now what the undone transaction's was. The cache must not answer the undone lease.
    with db.session() as session:
        capacity.reserve(
            session, [(pool.key, 1)], NOW + 5 * hour, NOW + 6 * hour,
            kind="t", holder="kept", account_id=None,
        )  # fmt: skip
    with db.read_session() as session:
        after = cache.calendar(session, NOW, region="us-east-1")
        assert after[pool.key].fits(NOW, NOW + hour, pool.capacity)  # never committed
        assert _shape(after) == _shape(capacity.load_calendar(session, NOW, region="us-east-1"))
