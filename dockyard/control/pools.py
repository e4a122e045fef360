"""The warm pools reconciler: expire pools, notice dead ones, release their instances.

Each pass: Available pools past their deadline (or the 28-day cap) are terminated;
Available pools whose instances no longer run are terminated as unhealthy; and every
terminated pool's instances are told to go until none runs (their persistent caches
deleted), which is marked on the pool so it is not asked again.

Each pool is a step of its own under a claim (`control.pattern`), so two servers never
ask the backend about one pool at once and one pool's fault holds up no other. The
capacity lock is taken only by a step that terminates a pool (its lease goes, and the
jobs placer claims Available pools under that lock), before the pool's row is locked.
Every step is safe to repeat, so a restart anywhere in between only repeats a step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.clock import Clock, monotonic
from dockyard.compute.backends.protocol import Backend
from dockyard.config import PlanSettings
from dockyard.control.loop import seconds_until
from dockyard.control.pattern import Retries, Skipped, Steps, T
from dockyard.domain import warm_pools as rules
from dockyard.domain.jobs import host_names
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import capacity, warm_pools
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import WarmPool

log = logging.getLogger("dockyard.control.pools")
# How often the instances of Available pools are looked at (a dead agent says nothing).
HEALTH_SECONDS = 5.0
# How soon instances told to go are looked at again.
RELEASE_SECONDS = 0.2
Instances = tuple[str, list[str]]  # a pool's home and host names: what the backend is asked


class PoolsReconciler:
    def __init__(self, db: Database, clock: Clock, backend: Backend, plans: PlanSettings):
        self.db = db
        self.clock = clock
        self.backend = backend
        self.plans = plans
        self.steps = Steps(db, WarmPool, claims.Claimant())
        self.retries = Retries("warm pool")
        # What the next pass is needed for: the first Available pool's deadline, the
        # next look at their instances, instances still being let go.
        self._deadline: datetime | None = None
        self._health_at: float | None = None
        self._releasing = False

    def __call__(self) -> None:
        now = self.clock.now()
        available = self._listed(WarmPool.status == WarmPoolStatus.AVAILABLE.value)
        for pool_id, deadline in available:
            if deadline is not None and deadline <= now:
                if self._run(pool_id, self._expire) is True:
                    log.info("warm pool %s terminated: its time is up", pool_id)
        self._deadline = min((d for _, d in available if d is not None and d > now), default=None)
        self._check_health([pool_id for pool_id, d in available if d is None or d > now])
        ended = self._listed(
            WarmPool.status == WarmPoolStatus.TERMINATED.value, WarmPool.released.is_(False)
        )
        self._releasing = False
        for pool_id, _ in ended:
            if self._run(pool_id, self._release) is not True:
                self._releasing = True  # told to go; looked at again on the next pass
        self.retries.keep([pool_id for pool_id, _ in [*available, *ended]])

    def due(self) -> float | None:
        wanted = [seconds_until(self.clock, [self._deadline]), self.retries.due()]
        if self._health_at is not None:
            wanted.append(max(0.0, self._health_at - monotonic()))
        if self._releasing:
            wanted.append(RELEASE_SECONDS)
        return min((s for s in wanted if s is not None), default=None)

    def give_up(self, pool_id: int, reason: str) -> None:
        """A pool whose step will never work: an Available one is terminated, saying why
        (nothing is kept for a job that cannot use it); a terminated one is left to a
        restart."""
        with self.db.session() as session:
            capacity.lock(session)  # its lease goes; claimers read pools under the lock
            pool = session.get(WarmPool, pool_id)
            if pool is not None and pool.status == WarmPoolStatus.AVAILABLE.value:
                warm_pools.terminate(session, pool, self.clock.now(), reason, self.plans)

    # ------------------------------------------------------------------ steps

    def _listed(self, *where: object) -> list[tuple[int, datetime | None]]:
        with self.db.read_session() as session:
            rows = session.execute(
                select(WarmPool.id, WarmPool.deadline)
                .where(*where)  # type: ignore[arg-type]
                .order_by(WarmPool.id)
            ).all()
        return [(row.id, row.deadline) for row in rows]

    def _run(self, pool_id: int, step: Callable[[int], T | Skipped | None]) -> T | Skipped | None:
        """One pool's step, backed off when it fails."""
        if not self.retries.ready(pool_id):
            return Skipped.REFUSED
        try:
            outcome = step(pool_id)
        except Exception as exc:
            self.retries.failed(pool_id, exc, self.give_up)
            return Skipped.REFUSED
        self.retries.succeeded(pool_id)
        return outcome

    def _expire(self, pool_id: int) -> bool | Skipped:
        def decide(session: Session, pool: WarmPool) -> bool:
            return warm_pools.expire(session, pool, self.clock.now(), self.plans)

        return self.steps.decide_only(pool_id, decide, books=True)

    def _check_health(self, pool_ids: list[int]) -> None:
        if not pool_ids:
            self._health_at = None
            return
        if self._health_at is not None and monotonic() < self._health_at:
            return
        self._health_at = monotonic() + HEALTH_SECONDS
        for pool_id in pool_ids:
            if self._run(pool_id, self._health) is True:
                log.warning("warm pool %s terminated: %s", pool_id, rules.UNHEALTHY)

    def _health(self, pool_id: int) -> bool | Skipped | None:
        """Terminate an Available pool whose instances no longer run; whether it was."""

        def decide(session: Session, pool: WarmPool) -> Instances | None:
            if pool.status != WarmPoolStatus.AVAILABLE.value:
                return None
            return pool.home, host_names(pool.instance_count)

        def record(session: Session, pool: WarmPool, _: Instances, healthy: bool) -> bool:
            # Still Available: a job may have claimed it since (under the capacity lock,
            # which this transaction took before reading the pool).
            if healthy or pool.status != WarmPoolStatus.AVAILABLE.value:
                return False
            warm_pools.terminate(session, pool, self.clock.now(), rules.UNHEALTHY, self.plans)
            return True

        return self.steps.step(
            pool_id,
            decide,
            lambda instances: self.backend.healthy(*instances),
            record,
            # Terminating releases the pool's lease: the recording does then.
            books=lambda instances, healthy: healthy is False,
        )

    def _release(self, pool_id: int) -> bool | Skipped | None:
        """Tell a terminated pool's instances to go; whether none runs any more."""

        def decide(session: Session, pool: WarmPool) -> Instances | None:
            if pool.status != WarmPoolStatus.TERMINATED.value or pool.released:
                return None
            return pool.home, host_names(pool.instance_count)

        def record(session: Session, pool: WarmPool, _: Instances, released: bool) -> bool:
            if released:
                pool.released = True
            return released

        outcome = self.steps.step(
            pool_id, decide, lambda instances: self.backend.release(*instances), record
        )
        return True if outcome is None else outcome  # None: released already
