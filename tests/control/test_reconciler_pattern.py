"""The one reconciler pattern (control/pattern.py, issue 26): a row is stepped by one
server at a time, a step whose claim was taken over applies nothing, a passing error
is retried with backoff and one that will not pass is never retried."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from dockyard.clock import ManualClock, wall_now
from dockyard.config import load_settings, plan_settings
from dockyard.control.pattern import (
    BACKOFF,
    BackoffPolicy,
    PermanentError,
    Retries,
    Skipped,
    Steps,
    TemporaryError,
)
from dockyard.control.pools import PoolsReconciler
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import accounts
from dockyard.store import claims, migrate
from dockyard.store.db import Database
from dockyard.store.tables import WarmPool
from tests.fixtures import BASE_TIME

FAR = claims.Claimant(owner="elsewhere/boot/1/1")  # a server on another host


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    migrate.upgrade(database)
    try:
        yield database
    finally:
        database.dispose()


def _pool(db: Database, status: WarmPoolStatus = WarmPoolStatus.AVAILABLE) -> int:
    with db.session() as session:
        account = accounts.create_account(session, BASE_TIME, "pattern").id
        pool = WarmPool(
            account_id=account,
            region="us-east-1",
            status=status.value,
            instance_type="ml.m5.xlarge",
            instance_count=1,
            match_key="k",
            job_id=0,
            home="home-1",
            placement={"pool": "ml.m5.xlarge/us-east-1a", "az": "us-east-1a"},
            born_at=BASE_TIME,
            deadline=BASE_TIME + timedelta(hours=1),
        )
        session.add(pool)
        session.flush()
        return pool.id


def _read(db: Database, pool_id: int) -> WarmPool:
    with db.read_session() as session:
        pool = session.get(WarmPool, pool_id)
        assert pool is not None
        return pool


def test_a_claimed_row_is_refused_to_another_server_until_its_claim_expires(
    db: Database,
) -> None:
    pool_id = _pool(db)
    here, there = Steps(db, WarmPool, claims.Claimant()), Steps(db, WarmPool, FAR)
    token = there.claim(pool_id)
    assert token is not None
    ran: list[str] = []
    answer = here.decide_only(pool_id, lambda session, pool: ran.append("here"))
    assert answer is Skipped.REFUSED and not ran
    with db.session() as session:  # the other server died on another host: its claim runs out
        session.execute(
            update(WarmPool).values(claim_expires_at=wall_now() - timedelta(seconds=1))
        )
    assert here.decide_only(pool_id, lambda session, pool: ran.append("here")) is None
    assert ran == ["here"] and _read(db, pool_id).claim_owner is None  # given up at the end


def test_a_step_whose_claim_was_taken_over_records_nothing(db: Database) -> None:
    pool_id = _pool(db)
    here = Steps(db, WarmPool, claims.Claimant())

    def act(decision: str) -> str:
        # While the backend is being asked, the claim runs out and another server takes
        # the pool over.
        with db.session() as session:
            session.execute(
                update(WarmPool).values(claim_expires_at=wall_now() - timedelta(seconds=1))
            )
        assert Steps(db, WarmPool, FAR).claim(pool_id) is not None
        return decision

    def record(session: object, pool: WarmPool, decision: str, result: str) -> str:
        pool.termination_reason = "recorded"
        return result

    answer = here.step(pool_id, lambda session, pool: "decided", act, record)
    assert answer is Skipped.LOST
    pool = _read(db, pool_id)
    assert pool.termination_reason is None and pool.claim_owner == FAR.owner


def test_a_step_that_fails_gives_its_claim_up(db: Database) -> None:
    pool_id = _pool(db)
    here = Steps(db, WarmPool, claims.Claimant())

    def act(decision: str) -> str:
        raise TemporaryError("the backend is busy")

    with pytest.raises(TemporaryError):
        here.step(pool_id, lambda session, pool: "decided", act, lambda *args: None)
    # Not left for its expiry: the next pass of any server may step the pool at once.
    assert _read(db, pool_id).claim_owner is None


def test_the_backoff_doubles_up_to_its_cap() -> None:
    assert [BACKOFF.wait(n) for n in (1, 2, 3)] == [0.5, 1.0, 2.0]
    assert BACKOFF.wait(30) == BACKOFF.max_seconds == 60.0


def test_a_temporary_error_backs_off_and_a_permanent_one_gives_up_once() -> None:
    retries = Retries("thing", BackoffPolicy(first_seconds=3600))
    given_up: list[tuple[int, str]] = []

    def give_up(row_id: int, reason: str) -> None:
        given_up.append((row_id, reason))

    for _ in range(5):  # however often it happens: never given up
        assert not retries.failed(1, TemporaryError("busy"), give_up)
    assert not retries.ready(1) and retries.entries[1].failures == 5 and not given_up
    retries.succeeded(1)
    assert retries.ready(1)

    assert retries.failed(2, PermanentError("the request cannot be run"), give_up)
    assert given_up == [(2, "the request cannot be run")] and not retries.ready(2)

    # A fault (neither kind) is retried, then given up after the policy's tries.
    assert not retries.failed(3, KeyError("StoppingCondition"), give_up)
    assert not retries.failed(3, KeyError("StoppingCondition"), give_up)
    assert retries.failed(3, KeyError("StoppingCondition"), give_up)
    assert given_up[-1] == (3, "KeyError('StoppingCondition')")
    retries.keep([1])  # rows no longer listed are forgotten
    assert retries.ready(2) and not retries.entries


class FakePools:
    """The two backend calls the pools reconciler makes, failing as a test says."""

    def __init__(self) -> None:
        self.failures: list[Exception] = []
        self.asked = 0

    def _answer(self) -> bool:
        self.asked += 1
        if self.failures:
            raise self.failures.pop(0)
        return True

    def healthy(self, home: str, hosts: list[str]) -> bool:
        return self._answer()

    def release(self, home: str, hosts: list[str]) -> bool:
        return self._answer()


def _pools(db: Database, tmp_path: Path, backend: FakePools) -> PoolsReconciler:
    settings = load_settings(None, data_dir=tmp_path / "data", sandbox="none")
    return PoolsReconciler(db, ManualClock(BASE_TIME), backend, plan_settings(settings))  # type: ignore[arg-type]


def test_a_pool_whose_release_fails_for_a_while_is_retried_until_released(
    db: Database, tmp_path: Path
) -> None:
    pool_id = _pool(db, WarmPoolStatus.TERMINATED)
    backend = FakePools()
    backend.failures = [TemporaryError("busy"), OSError("no room")]
    reconciler = _pools(db, tmp_path, backend)
    reconciler()
    assert reconciler.retries.entries[pool_id].failures == 1
    reconciler()  # backing off: the backend is not asked
    assert backend.asked == 1
    # Its backoff is over, and the next ones are too short to wait for.
    reconciler.retries.entries[pool_id].retry_at = 0.0
    reconciler.retries.policy = BackoffPolicy(first_seconds=0)
    reconciler()
    assert reconciler.retries.entries[pool_id].failures == 2
    reconciler()
    assert backend.asked == 3 and _read(db, pool_id).released
    assert not reconciler.retries.entries and _read(db, pool_id).claim_owner is None


def test_a_pool_whose_health_check_cannot_work_is_terminated_once(
    db: Database, tmp_path: Path
) -> None:
    pool_id = _pool(db)
    backend = FakePools()
    backend.failures = [PermanentError("the pool's instances cannot be found")]
    reconciler = _pools(db, tmp_path, backend)
    reconciler()
    pool = _read(db, pool_id)
    assert pool.status == WarmPoolStatus.TERMINATED.value
    assert pool.termination_reason == "the pool's instances cannot be found"
    with db.read_session() as session:
        assert session.scalars(select(WarmPool.claim_owner)).one() is None
