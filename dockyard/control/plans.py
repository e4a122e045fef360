"""The plans reconciler: pays for Pending plans, then moves plans and blocks with the clock.

Each plan is a step of its own (`control.pattern`): claimed, then paid for or moved in
one transaction (there is nothing to do outside the database). Only a step that books
or releases capacity takes the capacity lock - a payment (it completes a purchase, and
the budget check must see every other purchase) and a block's end (its leases go) - so
a pass in which nothing is due takes no lock at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.config import PlanSettings
from dockyard.control.loop import seconds_until
from dockyard.control.pattern import Retries, Skipped, Steps
from dockyard.domain.plans import PlanStatus
from dockyard.services import capacity, training_plans
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import ReservedCapacity, TrainingPlan

log = logging.getLogger("dockyard.control.plans")


class PlansReconciler:
    def __init__(self, db: Database, clock: Clock, settings: PlanSettings) -> None:
        self.db = db
        self.clock = clock
        self.settings = settings
        self.steps = Steps(db, TrainingPlan, claims.Claimant())
        self.retries = Retries("training plan")
        self._next: datetime | None = None  # the next start or end of a live block

    def __call__(self) -> int:
        """One pass; answers how many plans were paid for and statuses moved."""
        with self.db.read_session() as session:
            pending, _ = training_plans.due(session, self.clock.now())
        done = sum(self._step(plan_id, self._pay, books=True) for plan_id in pending)
        # Read again: a plan paid for just now may have a block that has started.
        with self.db.read_session() as session:
            _, moving = training_plans.due(session, self.clock.now())
        done += sum(self._step(plan_id, self._advance, ends) for plan_id, ends in moving.items())
        self.retries.keep([*pending, *moving])
        self._next = self._next_boundary() if self.clock.kind != "manual" else None
        return done

    def _step(
        self, plan_id: int, decide: Callable[[Session, TrainingPlan], int], books: bool
    ) -> int:
        if not self.retries.ready(plan_id):
            return 0
        try:
            done = self.steps.decide_only(plan_id, decide, books=books)
        except Exception as exc:  # one plan's fault holds up no other plan
            self.retries.failed(plan_id, exc, self.give_up)
            return 0
        self.retries.succeeded(plan_id)
        return 0 if isinstance(done, Skipped) else int(done)

    def _pay(self, session: Session, plan: TrainingPlan) -> int:
        return int(training_plans.settle_payment(session, plan, self.clock.now(), self.settings))

    def _advance(self, session: Session, plan: TrainingPlan) -> int:
        return training_plans.advance(session, plan, self.clock.now())

    def give_up(self, plan_id: int, reason: str) -> None:
        """A plan whose step will never work: a Pending one fails (its capacity freed),
        a paid one keeps its status and says why in its StatusMessage."""
        with self.db.session() as session:
            capacity.lock(session)  # a failed plan's leases are released
            plan = session.get(TrainingPlan, plan_id)
            if plan is None:
                return
            if plan.status == PlanStatus.PENDING.value:
                training_plans.fail_pending(session, plan, self.clock.now(), reason)
            else:
                plan.status_message = reason[:1024]

    def due(self) -> float | None:
        """Seconds until a block starts or ends (a pass is needed then), or a plan that
        failed is tried again."""
        wanted = [seconds_until(self.clock, [self._next]), self.retries.due()]
        return min((s for s in wanted if s is not None), default=None)

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
