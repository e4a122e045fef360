"""The plans reconciler: pays for Pending plans, then moves plans and blocks with the clock."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from dockyard.clock import Clock
from dockyard.config import PlanSettings
from dockyard.control.loop import seconds_until
from dockyard.domain.plans import PlanStatus
from dockyard.services import training_plans
from dockyard.store.db import Database
from dockyard.store.tables import ReservedCapacity


class PlansReconciler:
    def __init__(self, db: Database, clock: Clock, settings: PlanSettings) -> None:
        self.db = db
        self.clock = clock
        self.settings = settings
        self._next: datetime | None = None  # the next start or end of a live block

    def __call__(self) -> int:
        # Two transactions: a payment is committed even if moving statuses fails after it.
        with self.db.session() as session:
            paid = training_plans.settle_payments(session, self.clock.now(), self.settings)
        with self.db.session() as session:
            moved = training_plans.advance(session, self.clock.now())
        self._next = self._next_boundary() if self.clock.kind != "manual" else None
        return paid + moved

    def due(self) -> float | None:
        """Seconds until a block starts or ends (a pass is needed then)."""
        return seconds_until(self.clock, [self._next])

    def _next_boundary(self) -> datetime | None:
        with self.db.read_session() as session:
            starts, ends = session.execute(
                select(
                    func.min(ReservedCapacity.start_time).filter(
                        ReservedCapacity.status == PlanStatus.SCHEDULED.value
                    ),
                    func.min(ReservedCapacity.end_time).filter(
                        ReservedCapacity.status == PlanStatus.ACTIVE.value
                    ),
                )
            ).one()
        return min((moment for moment in (starts, ends) if moment is not None), default=None)
