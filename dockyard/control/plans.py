"""The plans reconciler: pays for Pending plans, then moves plans and blocks with the clock."""

from __future__ import annotations

from dockyard.clock import Clock
from dockyard.config import PlanSettings
from dockyard.services import training_plans
from dockyard.store.db import Database


class PlansReconciler:
    def __init__(self, db: Database, clock: Clock, settings: PlanSettings) -> None:
        self.db = db
        self.clock = clock
        self.settings = settings

    def __call__(self) -> int:
        # Two transactions: a payment is committed even if moving statuses fails after it.
        with self.db.session() as session:
            paid = training_plans.settle_payments(session, self.clock.now(), self.settings)
        with self.db.session() as session:
            moved = training_plans.advance(session, self.clock.now())
        return paid + moved
