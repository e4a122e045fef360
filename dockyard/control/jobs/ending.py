"""Ending jobs: the end is recorded (statuses, metrics), the capacity released, the
instances kept as a warm pool or not, and the time billed."""

from __future__ import annotations

import math
from decimal import Decimal

from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import Backend
from dockyard.compute.wire.state import InstanceState, times
from dockyard.config import PlanSettings
from dockyard.control.jobs.running import run_seconds
from dockyard.domain import jobs as rules
from dockyard.domain import metrics as metric_rules
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.jobs import JobStatus, Secondary
from dockyard.services import capacity, ledger, logs, warm_pools
from dockyard.services.job_status import catch_up, set_status, transition
from dockyard.store.tables import TrainingJob


class Ending:
    def __init__(self, clock: Clock, backend: Backend, plans: PlanSettings) -> None:
        self.clock = clock
        self.backend = backend
        self.plans = plans

    def finish(
        self,
        session: Session,
        job: TrainingJob,
        outcome: str,
        stop_reason: str | None,
        states: list[InstanceState] | None,
        reason: str | None,
    ) -> None:
        now = self.clock.now()
        ended = times(states or [], "ended_at")
        end = max(ended) if ended else now
        trained = any(state.get("training_started_at") for state in states or [])
        if outcome == "completed":
            catch_up(job, Secondary.UPLOADING, now)
            transition(job, Secondary.COMPLETED, rules.COMPLETED, now)
            set_status(job, JobStatus.COMPLETED, now)
        elif outcome == "failed":
            # A job that failed between two polls still shows the steps it got through.
            catch_up(job, Secondary.TRAINING if trained else Secondary.DOWNLOADING, now)
            transition(job, Secondary.FAILED, reason or rules.FAILED, now)
            set_status(job, JobStatus.FAILED, now)
            job.failure_reason = (reason or "InternalServerError")[:1024]
        else:
            if stop_reason == "max_runtime":
                transition(job, Secondary.MAX_RUNTIME_EXCEEDED, rules.MAX_RUNTIME, now)
            elif stop_reason == "plan_ended":
                transition(job, Secondary.STOPPED, plan_rules.PLAN_ENDED, now)
            else:
                transition(job, Secondary.STOPPING, rules.STOPPING, now)
                transition(job, Secondary.STOPPED, rules.STOPPED, now)
            set_status(job, JobStatus.STOPPED, now)
        history = list(job.transitions.get("items", []))
        if history:
            history[-1] = {**history[-1], "EndTime": now.isoformat()}
            job.transitions = {"items": history}
        job.training_end_time = end
        definitions = job.spec.get("AlgorithmSpecification", {}).get("MetricDefinitions")
        if definitions:
            # Written by each agent before it reports its end; kept so a Describe reads
            # only the database.
            scraped = logs.job_metrics(
                session, self.backend.records, job.account_id, job.region, job.name
            )
            job.final_metrics = {
                "items": [
                    {**metric, "Timestamp": metric["Timestamp"].isoformat()}
                    for metric in metric_rules.final_metrics_of(definitions, scraped)
                ]
            }
        capacity.release(session, job.arn)
        launched = any(state.get("phase", "launching") != "launching" for state in states or [])
        warm_pools.settle(
            session,
            job,
            now,
            outcome=outcome,
            failure_reason=job.failure_reason,
            launched=launched,
            plans=self.plans,
        )
        count = int(job.spec["ResourceConfig"]["InstanceCount"])
        if job.training_start_time is None:
            return
        # BillableTimeInSeconds is per instance, as AWS defines it (the SDK multiplies by
        # the instance count itself), and a started second counts.
        seconds = max(0, math.ceil((end - job.training_start_time).total_seconds()))
        if job.training_plan_arn:
            # Time actually run, over every attempt; the plan's capacity is paid already.
            earlier = float(job.runtime.get("used_seconds", 0))
            job.billable_seconds = math.ceil(earlier + run_seconds(states or []))
            return
        job.billable_seconds = seconds
        price = self.plans.prices.get(job.spec["ResourceConfig"]["InstanceType"], Decimal(0))
        ledger.record(
            session,
            account_id=job.account_id,
            region=job.region,
            kind="training-job-instance-seconds",
            resource_arn=job.arn,
            amount=(price * seconds * count / 3600).quantize(Decimal("0.0001")),
            currency=self.plans.currency,
            description=f"{count} x {seconds} s of training job {job.name}",
            now=now,
        )
