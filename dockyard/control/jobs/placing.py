"""Placing queued jobs: on a matching warm pool of the account, else on the plan's
usable block, else on demand (instances of one AZ free for the whole MaxRuntime) - or
the job waits, saying why, with what it saw recorded so that it is not tried again
until that changes (`capacity.WaitStamp`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.config import PlanSettings
from dockyard.control.jobs.running import Finish
from dockyard.control.jobs.specs import instance_key
from dockyard.domain import jobs as rules
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.job_runtime import JobEnd, StopReason
from dockyard.domain.jobs import Secondary
from dockyard.domain.placement import Placement
from dockyard.services import capacity, plan_jobs, warm_pools
from dockyard.services.job_status import transition
from dockyard.store.tables import TrainingJob


class Placer:
    def __init__(
        self,
        clock: Clock,
        plans: PlanSettings,
        calendars: capacity.CalendarCache,
        finish: Finish,
    ) -> None:
        self.clock = clock
        self.plans = plans
        self.calendars = calendars
        self.finish = finish

    def place(self, session: Session, job: TrainingJob) -> bool:
        """Start the job on a matching warm pool, else on its plan's block or on demand."""
        now = self.clock.now()
        capacity.lock(session)  # one placer at a time: every check sees every booking
        # A resumed plan job starts on fresh instances, never on a pool.
        if job.runtime.attempt == 1:
            claimed = warm_pools.claim(session, job, now, self.plans)
            if claimed is not None:
                warm, previous = claimed
                placement = Placement.of(warm.placement)
                assert placement is not None  # a pool is made from a placed job
                job.runtime = job.runtime.placed(placement, home=warm.home)
                transition(job, Secondary.STARTING, rules.warm_start(previous), now)
                job.waiting_for = None
                return True
        if job.training_plan_arn:
            return self._on_plan(session, job, now)
        return self._on_demand(session, job, now)

    def _on_demand(self, session: Session, job: TrainingJob, now: datetime) -> bool:
        """Lease instances of one AZ for the whole MaxRuntime, or say why the job waits."""
        resources = job.spec["ResourceConfig"]
        count = int(resources["InstanceCount"])
        runtime = timedelta(seconds=int(job.spec["StoppingCondition"]["MaxRuntimeInSeconds"]))
        # From memory, reloading only pools whose version moved: read after the capacity
        # lock, so no booking can slip in between and the calendar is current.
        calendar = self.calendars.calendar(
            session, now, region=job.region, instance_type=resources["InstanceType"]
        )
        for pool in calendar.pools():
            if pool.ultraserver_id is None and calendar[pool.key].fits(now, now + runtime, count):
                capacity.reserve(
                    session,
                    [(pool.key, count)],
                    now,
                    now + runtime,
                    kind="training-job",
                    holder=job.arn,
                    account_id=job.account_id,
                    calendar=calendar,
                )
                job.runtime = job.runtime.placed(
                    Placement(pool.key, pool.availability_zone),
                    home=instance_key(job),
                    # On the control plane's clock: a warm pool's 28 days count from here.
                    placed_at=now,
                )
                transition(job, Secondary.STARTING, rules.LAUNCHING, now)
                job.waiting_for = None
                return True
        job.waiting_for = capacity.wait_stamp(
            session,
            calendar,
            job.region,
            resources["InstanceType"],
            now,
            count,
            int(runtime.total_seconds()),
        ).text()
        transition(
            job,
            Secondary.PENDING,
            f"Waiting for capacity: no {count} x {resources['InstanceType']} free in one "
            f"availability zone of {job.region} for {int(runtime.total_seconds())} seconds",
            now,
        )
        return False

    def _on_plan(self, session: Session, job: TrainingJob, now: datetime) -> bool:
        """Take instances of the plan's usable block, or say why the job waits."""
        attempt = job.runtime.attempt
        placement = plan_jobs.place(session, job, now)
        if placement is None:
            self.finish(session, job, JobEnd.stopped(StopReason.PLAN_ENDED), None)
            return False
        if isinstance(placement, str):
            transition(job, Secondary.PENDING, placement, now)
            return False
        job.runtime = job.runtime.placed(placement, home=instance_key(job), placed_at=now)
        if attempt > 1:
            transition(
                job, Secondary.RESTARTING, plan_rules.restarting(attempt, placement.az), now
            )
        else:
            transition(job, Secondary.STARTING, plan_rules.starting_on_plan(placement.az), now)
        return True
