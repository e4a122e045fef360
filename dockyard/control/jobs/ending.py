"""Ending jobs: the one path every end takes - completed, failed (a give-up included),
stopped. The end is recorded (statuses, metrics), the capacity released, the instances
kept as a warm pool or not, and the time billed (`domain.billing`)."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import Backend
from dockyard.compute.wire.state import InstanceState, times
from dockyard.config import PlanSettings
from dockyard.control.jobs.running import run_seconds
from dockyard.domain import billing
from dockyard.domain import jobs as rules
from dockyard.domain import metrics as metric_rules
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.job_runtime import JobEnd, Outcome, StopReason
from dockyard.domain.jobs import JobStatus, Secondary
from dockyard.services import capacity, ledger, logs, warm_pools
from dockyard.services.job_status import catch_up, set_status, transition
from dockyard.store.tables import TrainingJob

log = logging.getLogger("dockyard.control.jobs")


class Ending:
    def __init__(self, clock: Clock, backend: Backend, plans: PlanSettings) -> None:
        self.clock = clock
        self.backend = backend
        self.plans = plans

    def finish(
        self,
        session: Session,
        job: TrainingJob,
        end: JobEnd,
        states: list[InstanceState] | None = None,
        *,
        launched: bool | None = None,
        best_effort: bool = False,
    ) -> None:
        """Record how `job` ended. `states`: what its instances last reported (None when
        none was read: a job that never got instances, or one given up on). `launched`:
        whether its instances launched, when the states cannot say. `best_effort`: the
        end is recorded even if what the instances left (their metrics) cannot be read -
        a job given up on may be failing because that very read does."""
        now = self.clock.now()
        ended = times(states or [], "ended_at")
        end_time = max(ended) if ended else now
        self._statuses(job, end, states, now)
        history = list(job.transitions.get("items", []))
        if history:
            history[-1] = {**history[-1], "EndTime": now.isoformat()}
            job.transitions = {"items": history}
        job.training_end_time = end_time
        job.waiting_for = None
        self._final_metrics(session, job, best_effort)
        capacity.release(session, job.arn)
        if launched is None:
            launched = any(s.get("phase", "launching") != "launching" for s in states or [])
        warm_pools.settle(
            session,
            job,
            now,
            outcome=end.outcome,
            failure_reason=job.failure_reason,
            launched=launched,
            plans=self.plans,
        )
        self._bill(session, job, states, end_time, now)
        job.runtime = job.runtime.ended()

    @staticmethod
    def _statuses(
        job: TrainingJob, end: JobEnd, states: list[InstanceState] | None, now: datetime
    ) -> None:
        if end.outcome is Outcome.COMPLETED:
            catch_up(job, Secondary.UPLOADING, now)
            transition(job, Secondary.COMPLETED, rules.COMPLETED, now)
            set_status(job, JobStatus.COMPLETED, now)
        elif end.outcome is Outcome.FAILED:
            reason = end.failure_reason
            if states is not None:
                # A job that failed between two polls still shows the steps it got through.
                trained = any(state.get("training_started_at") for state in states)
                catch_up(job, Secondary.TRAINING if trained else Secondary.DOWNLOADING, now)
            transition(job, Secondary.FAILED, reason or rules.FAILED, now)
            set_status(job, JobStatus.FAILED, now)
            job.failure_reason = (reason or "InternalServerError")[:1024]
        else:
            if end.stop_reason is StopReason.MAX_RUNTIME:
                transition(job, Secondary.MAX_RUNTIME_EXCEEDED, rules.MAX_RUNTIME, now)
            elif end.stop_reason is StopReason.PLAN_ENDED:
                transition(job, Secondary.STOPPED, plan_rules.PLAN_ENDED, now)
            else:
                transition(job, Secondary.STOPPING, rules.STOPPING, now)
                transition(job, Secondary.STOPPED, rules.STOPPED, now)
            set_status(job, JobStatus.STOPPED, now)

    def _final_metrics(self, session: Session, job: TrainingJob, best_effort: bool) -> None:
        definitions = job.spec.get("AlgorithmSpecification", {}).get("MetricDefinitions")
        if not definitions:
            return
        # Written by each agent before it reports its end; kept so a Describe reads
        # only the database.
        try:
            scraped = logs.job_metrics(
                session, self.backend.records, job.account_id, job.region, job.name
            )
        except Exception:
            if not best_effort:
                raise
            log.exception("training job %s: its final metrics could not be read", job.name)
            return
        job.final_metrics = {
            "items": [
                {**metric, "Timestamp": metric["Timestamp"].isoformat()}
                for metric in metric_rules.final_metrics_of(definitions, scraped)
            ]
        }

    def _bill(
        self,
        session: Session,
        job: TrainingJob,
        states: list[InstanceState] | None,
        end_time: datetime,
        now: datetime,
    ) -> None:
        """BillableTimeInSeconds, and the job's one ledger entry (none on a plan)."""
        if job.training_start_time is None:
            return  # it never trained: nothing is billed
        runtime = job.runtime
        instance_type = job.spec["ResourceConfig"]["InstanceType"]
        bill = billing.training_bill(
            on_plan=bool(job.training_plan_arn),
            count=int(job.spec["ResourceConfig"]["InstanceCount"]),
            price_per_hour=billing.price(self.plans.prices, instance_type),
            start=job.training_start_time,
            end=end_time,
            earlier_run_seconds=runtime.used_seconds,
            # A job given up on has no states: its current try's run time is unknown.
            run_seconds=run_seconds(states or []),
        )
        job.billable_seconds = bill.seconds
        if bill.amount is None:
            return
        ledger.record(
            session,
            account_id=job.account_id,
            region=job.region,
            kind=bill.charge,
            resource_arn=job.arn,
            amount=bill.amount,
            currency=self.plans.currency,
            description=f"{bill.count} x {bill.seconds} s of training job {job.name}",
            now=now,
        )
