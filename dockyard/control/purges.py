"""The purges reconciler: a deleted job's files go, once nothing of it runs.

DeleteTrainingJob records the job's instances (`InstancePurge`); each pass asks the
backend to remove what they left - trees, logs, state - and forgets the ones it has
removed. An instance still running is left for a later pass: the home of a warm pool
the deleted job handed on is that pool's until the pool ends. Safe to repeat.
"""

from __future__ import annotations

import logging

from sqlalchemy import delete, select

from dockyard.clock import monotonic
from dockyard.compute.backends.protocol import Backend
from dockyard.store.db import Database
from dockyard.store.tables import InstancePurge

log = logging.getLogger("dockyard.control.purges")
# How soon instances still running are looked at again.
RETRY_SECONDS = 5.0


class PurgesReconciler:
    def __init__(self, db: Database, backend: Backend) -> None:
        self.db = db
        self.backend = backend
        # Instances found still running, and when to look at them again.
        self._waiting: set[str] = set()
        self._retry_at = 0.0

    def __call__(self) -> None:
        with self.db.read_session() as session:
            keys = set(session.scalars(select(InstancePurge.job_key)))
        now = monotonic()
        todo = keys if now >= self._retry_at else keys - self._waiting
        done = set()
        for key in sorted(todo):
            try:
                if self.backend.purge(key):
                    done.add(key)
            except OSError as exc:
                log.warning("the files of deleted job %s could not be removed: %s", key, exc)
        if done:
            with self.db.session() as session:
                session.execute(delete(InstancePurge).where(InstancePurge.job_key.in_(done)))
        waiting = keys - done
        if waiting - self._waiting or now >= self._retry_at:
            self._retry_at = now + RETRY_SECONDS
        self._waiting = waiting

    def due(self) -> float | None:
        if not self._waiting:
            return None
        return max(0.0, self._retry_at - monotonic())
