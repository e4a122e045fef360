"""The warm pools reconciler: expire pools, notice dead ones, release their instances.

Each pass: Available pools past their deadline (or the 28-day cap) are terminated;
Available pools whose instances no longer run are terminated as unhealthy; and every
terminated pool's instances are told to go until none runs (their persistent caches
deleted), which is marked on the pool so it is not asked again. Every step is safe
to repeat, so a restart anywhere in between only repeats a step.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select

from dockyard.clock import Clock, monotonic
from dockyard.compute.backends.protocol import Backend
from dockyard.config import PlanSettings
from dockyard.control.loop import seconds_until
from dockyard.domain import warm_pools as rules
from dockyard.domain.jobs import host_names
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import capacity, warm_pools
from dockyard.store.db import Database
from dockyard.store.tables import WarmPool

log = logging.getLogger("dockyard.control.pools")
# How often the instances of Available pools are looked at (a dead agent says nothing).
HEALTH_SECONDS = 5.0
# How soon instances told to go are looked at again.
RELEASE_SECONDS = 0.2


class PoolsReconciler:
    def __init__(self, db: Database, clock: Clock, backend: Backend, plans: PlanSettings):
        self.db = db
        self.clock = clock
        self.backend = backend
        self.plans = plans
        # What the next pass is needed for: the first Available pool's deadline, the
        # next look at their instances, instances still being let go.
        self._deadline: datetime | None = None
        self._health_at: float | None = None
        self._releasing = False

    def __call__(self) -> None:
        with self.db.session() as session:
            for pool_id in warm_pools.expire(session, self.clock.now(), self.plans):
                log.info("warm pool %s terminated: its time is up", pool_id)
        self._check_health()
        self._release_terminated()

    def due(self) -> float | None:
        wanted = [seconds_until(self.clock, [self._deadline])]
        if self._health_at is not None:
            wanted.append(max(0.0, self._health_at - monotonic()))
        if self._releasing:
            wanted.append(RELEASE_SECONDS)
        return min((s for s in wanted if s is not None), default=None)

    def _check_health(self) -> None:
        with self.db.read_session() as session:
            available = session.execute(
                select(
                    WarmPool.id, WarmPool.home, WarmPool.instance_count, WarmPool.deadline
                ).where(WarmPool.status == WarmPoolStatus.AVAILABLE.value)
            ).all()
        self._deadline = min((row.deadline for row in available if row.deadline), default=None)
        if not available:
            self._health_at = None
            return
        if self._health_at is not None and monotonic() < self._health_at:
            return
        self._health_at = monotonic() + HEALTH_SECONDS
        for pool_id, home, count, _ in available:
            if self.backend.healthy(home, host_names(count)):
                continue
            with self.db.session() as session:
                capacity.lock(session)  # read as every other writer of pools leaves it
                pool = session.get(WarmPool, pool_id)
                if pool is not None and pool.status == WarmPoolStatus.AVAILABLE.value:
                    warm_pools.terminate(
                        session, pool, self.clock.now(), rules.UNHEALTHY, self.plans
                    )
                    log.warning("warm pool %s terminated: %s", pool_id, rules.UNHEALTHY)

    def _release_terminated(self) -> None:
        with self.db.read_session() as session:
            ended = session.execute(
                select(WarmPool.id, WarmPool.home, WarmPool.instance_count).where(
                    WarmPool.status == WarmPoolStatus.TERMINATED.value,
                    WarmPool.released.is_(False),
                )
            ).all()
        self._releasing = False
        for pool_id, home, count in ended:
            if not self.backend.release(home, host_names(count)):
                self._releasing = True
                continue  # told to go; looked at again on the next pass
            with self.db.session() as session:
                pool = session.get(WarmPool, pool_id)
                if pool is not None:
                    pool.released = True
