"""The jobs reconciler: place a job, launch its instances, follow them, settle the end.

Each step is a short transaction; launching and polling happen with no session open
and are safe to repeat (the backend never launches a job's host twice), so a server
killed at any point picks the job up where its rows and its agents' files say it is.
"""

from __future__ import annotations

import logging
import math
import socket
import sys
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.clock import Clock, wall_now
from dockyard.compute import wake
from dockyard.compute.backend import Backend
from dockyard.config import PlanSettings, Settings
from dockyard.control.job_queue import Following, JobQueue, Outcome, Seen
from dockyard.domain import instance_types
from dockyard.domain import jobs as rules
from dockyard.domain import metrics as metric_rules
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.jobs import TERMINAL, JobStatus, Secondary
from dockyard.domain.warm_pools import keep_alive_seconds
from dockyard.services import capacity, ledger, logs, plan_jobs, warm_pools
from dockyard.services.job_requests import set_status, transition
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob

log = logging.getLogger("dockyard.control.jobs")
PHASES = ("launching", "downloading", "training", "uploading")
ENDED_PHASES = frozenset({"completed", "failed", "stopped"})
STOP_GRACE_SECONDS = 10


def _instance_key(job: TrainingJob) -> str:
    return rules.instance_key(job.account_id, job.region, job.name, job.uid)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class JobsReconciler:
    def __init__(
        self,
        db: Database,
        clock: Clock,
        backend: Backend,
        settings: Settings,
        plans: PlanSettings,
        calendars: capacity.CalendarCache | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.backend = backend
        self.data_dir = Path(settings.data_dir).resolve()
        self.plans = plans
        self.queue = JobQueue(db, clock)  # which jobs a pass steps
        # This server, as its claims on the jobs it steps name it.
        self.claimant = claims.Claimant()
        self.calendars = calendars if calendars is not None else capacity.CalendarCache()
        # TrainingImage -> the interpreter that stands for it on this backend ([images]).
        self.images = {str(k): str(v) for k, v in dict(settings.extra.get("images", {})).items()}
        # What one instance of a type may use: its sandbox's limits (SPEC §4.8).
        self.instance_types = instance_types.catalogue(settings.extra.get("instance_types"))
        self.sandbox_mode = settings.sandbox
        # Where the instances find s3:// URIs: a real S3-compatible service, or directories.
        self.s3: dict[str, Any] = (
            {
                "endpoint_url": settings.s3_endpoint_url,
                "access_key_id": settings.s3_access_key_id,
                "secret_access_key": settings.s3_secret_access_key,
                "region": settings.s3_region,
            }
            if settings.s3_endpoint_url
            else {"root": str(self.data_dir / "s3")}
        )

    def __call__(self) -> None:
        self.queue.run(self.step, self.peek, self.give_up)

    def give_up(self, job_id: int, reason: str) -> None:
        """Fail a job whose steps keep failing (a fault, not a passing error): its capacity
        and any warm pool go, and its instances are told to stop, so nothing is held for
        a job nobody can move on."""
        now = self.clock.now()
        with self.db.session() as session:
            job = session.scalar(
                select(TrainingJob).where(TrainingJob.id == job_id).with_for_update()
            )
            if job is None or JobStatus(job.status) in TERMINAL:
                return
            transition(job, Secondary.FAILED, reason[:1024], now)
            set_status(job, JobStatus.FAILED, now)
            job.failure_reason = reason[:1024]
            job.training_end_time = now
            job.waiting_for = None
            claims.release(job)
            capacity.release(session, job.arn)
            warm_pools.settle(
                session,
                job,
                now,
                outcome="failed",
                failure_reason=job.failure_reason,
                launched=True,
                plans=self.plans,
            )
            followed = self.queue.following(job_id)
        for handle in followed.handles if followed is not None else ():
            self.backend.stop(handle)

    def due(self) -> float | None:
        return self.queue.due()

    def woken(self, keys: set[str]) -> None:
        """Agents reported a change of these jobs (their instance keys)."""
        self.queue.woken(keys)

    def peek(self, handles: tuple[str, ...]) -> Seen:
        """What a followed job's instances are doing: phases, and whose agent runs."""
        alive = [self.backend.alive(handle) for handle in handles]
        states = [self.backend.poll(handle) for handle in handles]
        return _seen(states, alive)

    # ------------------------------------------------------------------ one job

    def step(self, job_id: int) -> Outcome:
        """Move one job on; answers what it saw when it could not be placed on demand,
        or, for a job left running, what to follow it by.

        The job is claimed for the step (`store.claims`): a job another server is
        stepping is left alone, and the step's last transaction gives the claim up.
        """
        token = claims.new_token()
        with self.db.session() as session:
            job = claims.claim_job(session, job_id, self.claimant, token)
            if job is None:
                return None  # another server is stepping it
            if JobStatus(job.status) in TERMINAL:
                claims.release(job)
                return None
            runtime = dict(job.runtime)
            if "placement" not in runtime:
                if job.stop_requested:
                    self._finish(session, job, "stopped", "stop", None, None)
                    claims.release(job)
                    return None
                if not self._place(session, job):
                    claims.release(job)
                    return capacity.WaitStamp.parse(job.waiting_for)
                runtime = dict(job.runtime)
                log.info("training job %s placed: %s", job.name, runtime["placement"])
            elif (
                job.training_plan_arn
                and not runtime.get("interrupting")
                and plan_jobs.block_ending(job, self.clock.now())
            ):
                # The block's last 30 minutes: stop the instances (checkpoints are
                # saved as they stop) and wait for the plan's next block.
                runtime["interrupting"] = plan_rules.INTERRUPTED
                job.runtime = {**job.runtime, "interrupting": plan_rules.INTERRUPTED}
            specs = runtime.get("specs") or self._host_specs(job, runtime)
            if "specs" not in runtime:
                job.runtime = {**runtime, "specs": specs}
        try:
            handles, states, alive = self._observe(job, runtime, specs)
        except BaseException:
            with self.db.session() as session:  # the next pass, here or elsewhere, retries
                current = claims.held(session, job_id, token)
                if current is not None:
                    claims.release(current)
            raise
        with self.db.session() as session:
            current = claims.held(session, job_id, token)
            if current is None:
                return None  # the claim ran out and another server took the job over
            claims.release(current)
            if JobStatus(current.status) in TERMINAL:
                return None
            if current.training_plan_arn and self._interrupted(session, current, states, alive):
                return None
            self._apply(session, current, states, alive)
            if JobStatus(current.status) in TERMINAL or current.stop_requested:
                return None  # over, or stopping: a stopping job is stepped each pass
            ends = (current.runtime.get("placement") or {}).get("work_ends")
            return Following(
                key=_instance_key(current),
                handles=tuple(handles),
                seen=_seen(states, alive),
                deadline=datetime.fromisoformat(str(ends)) if ends else None,
            )

    def _observe(
        self, job: TrainingJob, runtime: dict[str, Any], specs: list[dict[str, Any]]
    ) -> tuple[list[str], list[dict[str, Any]], list[bool]]:
        """Launch (or hand a warm pool) the job's instances, once; read where they are."""
        key = _instance_key(job)
        home = str(runtime.get("home") or key)
        if home == key:
            handles = self.backend.launch(key, specs)
        else:  # a warm pool's instances, already running: no launch (SPEC §5.3)
            handles = self.backend.assign(home, key, specs)
        # Whether each agent runs, then its state: an agent that had exited before its
        # state was read left its last word there, so one ending in between is not
        # taken for one that died mid-job.
        alive = [self.backend.alive(handle) for handle in handles]
        states = [self.backend.poll(handle) for handle in handles]
        for index, handle in enumerate(handles):
            if _dead([states[index].get("phase", "launching")], [alive[index]]):
                # Looked again before it is called dead: an agent started by another
                # server may have written its state between the two reads.
                alive[index] = self.backend.alive(handle)
                states[index] = self.backend.poll(handle)
        if job.stop_requested or runtime.get("interrupting"):
            for handle in handles:
                self.backend.stop(handle)
        return handles, states, alive

    def _place(self, session: Session, job: TrainingJob) -> bool:
        """Start the job on a matching warm pool, else on its plan's block or on demand."""
        now = self.clock.now()
        capacity.lock(session)  # one placer at a time: every check sees every booking
        # A resumed plan job starts on fresh instances, never on a pool.
        if int(job.runtime.get("attempt", 1)) == 1:
            claimed = warm_pools.claim(session, job, now, self.plans)
            if claimed is not None:
                warm, previous = claimed
                job.runtime = {**job.runtime, "placement": dict(warm.placement), "home": warm.home}
                transition(job, Secondary.STARTING, rules.warm_start(previous), now)
                job.waiting_for = None
                return True
        if job.training_plan_arn:
            return self._place_on_plan(session, job, now)
        return self._place_on_demand(session, job, now)

    def _place_on_demand(self, session: Session, job: TrainingJob, now: datetime) -> bool:
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
                capacity.book(
                    session,
                    [(pool.key, count)],
                    now,
                    now + runtime,
                    kind="training-job",
                    holder=job.arn,
                    account_id=job.account_id,
                )
                job.runtime = {
                    "placement": {"pool": pool.key, "az": pool.availability_zone},
                    "home": _instance_key(job),
                    # On the control plane's clock: a warm pool's 28 days count from here.
                    "placed_at": now.isoformat(),
                }
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

    def _place_on_plan(self, session: Session, job: TrainingJob, now: datetime) -> bool:
        """Take instances of the plan's usable block, or say why the job waits."""
        attempt = int(job.runtime.get("attempt", 1))
        placement = plan_jobs.place(session, job, now)
        if placement is None:
            self._finish(session, job, "stopped", "plan_ended", None, None)
            return False
        if isinstance(placement, str):
            transition(job, Secondary.PENDING, placement, now)
            return False
        job.runtime = {
            **job.runtime,
            "placement": placement,
            "home": _instance_key(job),
            "placed_at": job.runtime.get("placed_at") or now.isoformat(),
        }
        if attempt > 1:
            transition(
                job, Secondary.RESTARTING, plan_rules.restarting(attempt, placement["az"]), now
            )
        else:
            transition(job, Secondary.STARTING, plan_rules.starting_on_plan(placement["az"]), now)
        return True

    def _interrupted(
        self, session: Session, job: TrainingJob, states: list[dict[str, Any]], alive: list[bool]
    ) -> bool:
        """A plan job whose block ended, or whose instance died: once none of its
        instances runs, it waits for the plan's next block (or, on reserved capacity, the
        same block) and resumes from its checkpoints. True if that is what happened."""
        phases = [state.get("phase", "launching") for state in states]
        if _dead(phases, alive) and not job.runtime.get("interrupting"):
            job.runtime = {**job.runtime, "interrupting": plan_rules.INSTANCE_LOST}
            return True  # the next pass stops the other instances
        reason = job.runtime.get("interrupting")
        if not reason or job.stop_requested:
            return False
        over = all(
            phase in ENDED_PHASES or not up for phase, up in zip(phases, alive, strict=True)
        )
        if not over:
            return True
        if all(phase == "completed" for phase in phases):
            return False  # it finished just in time: settle it as usual
        now = self.clock.now()
        started = [s["training_started_at"] for s in states if s.get("training_started_at")]
        used = float(job.runtime.get("used_seconds", 0)) + _run_seconds(states)
        if started and job.training_start_time is None:
            job.training_start_time = datetime.fromisoformat(min(started))
        _catch_up(job, Secondary.TRAINING if started else Secondary.DOWNLOADING, now)
        transition(job, Secondary.INTERRUPTED, str(reason), now)
        job.runtime = {"attempt": int(job.runtime.get("attempt", 1)) + 1, "used_seconds": used}
        if used >= int(job.spec["StoppingCondition"]["MaxRuntimeInSeconds"]):
            self._finish(session, job, "stopped", "max_runtime", None, None)
        return True

    def _host_specs(self, job: TrainingJob, runtime: dict[str, Any]) -> list[dict[str, Any]]:
        placement = runtime["placement"]
        spec = job.spec
        count = int(spec["ResourceConfig"]["InstanceCount"])
        hosts = rules.host_names(count)
        hyper = dict(spec.get("HyperParameters", {}))
        algorithm = spec["AlgorithmSpecification"]
        checkpoint = spec.get("CheckpointConfig") or {}
        image = algorithm.get("TrainingImage") or ""
        python = self.images.get(image)
        if python is None:
            python = sys.executable
            log.info(
                "training job %s: image %s is not in [images]; it runs on the server's own "
                "Python (%s)",
                job.name,
                image,
                python,
            )
        port = _free_port()
        kind = instance_types.describe(spec["ResourceConfig"]["InstanceType"], self.instance_types)
        sandbox = {
            "mode": self.sandbox_mode,
            "limits": {
                "memory_bytes": kind.memory_bytes,
                "cpus": kind.vcpus,
                "pids": kind.max_pids,
            },
        }
        return [
            {
                "job_name": job.name,
                "host": host,
                "hosts": hosts,
                "hyperparameters": hyper,
                "input_data_config": spec.get("InputDataConfig", []),
                "resource_config": spec["ResourceConfig"],
                "entrypoint": algorithm.get("ContainerEntrypoint"),
                "arguments": algorithm.get("ContainerArguments"),
                # As the SDK sends them (JSON-quoted); the agent decodes them.
                "program": hyper.get("sagemaker_program"),
                "submit_directory": hyper.get("sagemaker_submit_directory"),
                "python": python,
                "environment": spec.get("Environment", {}),
                "output_path": spec["OutputDataConfig"]["S3OutputPath"],
                "checkpoint_s3_uri": checkpoint.get("S3Uri"),
                "checkpoint_local_path": checkpoint.get("LocalPath", "/opt/ml/checkpoints"),
                # MaxRuntime counts only time actually run (earlier attempts on a plan).
                "max_runtime_seconds": max(
                    1,
                    int(spec["StoppingCondition"]["MaxRuntimeInSeconds"])
                    - int(runtime.get("used_seconds", 0)),
                ),
                "attempt": int(runtime.get("attempt", 1)),
                "stop_grace_seconds": STOP_GRACE_SECONDS,
                "s3": self.s3,
                "master_port": port,
                "network_isolation": bool(spec.get("EnableNetworkIsolation", False)),
                # The account's own: a cache is code that the next install runs.
                "uv_cache_dir": str(self.data_dir / "uv-cache" / job.account_id),
                "job_arn": job.arn,
                "account_id": job.account_id,
                "sandbox": sandbox,
                "availability_zone": placement["az"],
                "keep_alive_seconds": keep_alive_seconds(spec),
                "metric_definitions": algorithm.get("MetricDefinitions") or [],
                "wake_socket": str(wake.directory(self.data_dir)),
            }
            for host in hosts
        ]

    def _apply(
        self, session: Session, job: TrainingJob, states: list[dict[str, Any]], alive: list[bool]
    ) -> None:
        now = self.clock.now()
        phases = [state.get("phase", "launching") for state in states]
        failed = [s for s in states if s.get("phase") == "failed"]
        dead = _dead(phases, alive)
        started = [s["training_started_at"] for s in states if s.get("training_started_at")]
        if started and job.training_start_time is None:
            job.training_start_time = datetime.fromisoformat(min(started))
        if failed:
            self._finish(session, job, "failed", None, states, failed[0].get("failure_reason"))
            return
        if dead:
            reason = "InternalServerError: an instance's agent exited unexpectedly"
            self._finish(session, job, "failed", None, states, reason)
            return
        if all(p in ("completed", "stopped") for p in phases):
            stopped = [s for s in states if s.get("phase") == "stopped"]
            if stopped:
                self._finish(session, job, "stopped", stopped[0].get("stop_reason"), states, None)
            else:
                self._finish(session, job, "completed", None, states, None)
            return
        if job.stop_requested:
            return
        least = min((PHASES.index(p) for p in phases if p in PHASES), default=0)
        if least >= 1 and Secondary(job.secondary_status) in (
            Secondary.STARTING,
            Secondary.RESTARTING,
        ):
            transition(job, Secondary(job.secondary_status), rules.PREPARING, now)
            transition(job, Secondary.DOWNLOADING, rules.DOWNLOADING, now)
        if least >= 2 and Secondary(job.secondary_status) is Secondary.DOWNLOADING:
            transition(job, Secondary.TRAINING, rules.TRAINING, now)
        if least >= 3 and Secondary(job.secondary_status) is Secondary.TRAINING:
            transition(job, Secondary.UPLOADING, rules.UPLOADING, now)

    def _finish(
        self,
        session: Session,
        job: TrainingJob,
        outcome: str,
        stop_reason: str | None,
        states: list[dict[str, Any]] | None,
        reason: str | None,
    ) -> None:
        now = self.clock.now()
        ended = [s["ended_at"] for s in (states or []) if s.get("ended_at")]
        end = datetime.fromisoformat(max(ended)) if ended else now
        trained = any(state.get("training_started_at") for state in states or [])
        if outcome == "completed":
            _catch_up(job, Secondary.UPLOADING, now)
            transition(job, Secondary.COMPLETED, rules.COMPLETED, now)
            set_status(job, JobStatus.COMPLETED, now)
        elif outcome == "failed":
            # A job that failed between two polls still shows the steps it got through.
            _catch_up(job, Secondary.TRAINING if trained else Secondary.DOWNLOADING, now)
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
                session, self.data_dir, job.account_id, job.region, job.name
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
            job.billable_seconds = math.ceil(earlier + _run_seconds(states or []))
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


def _run_seconds(states: list[dict[str, Any]]) -> float:
    """How long this attempt's instances trained, by their own clocks (MaxRuntime and
    billing count time run, which a manual control-plane clock knows nothing of)."""
    started = [s["training_started_at"] for s in states if s.get("training_started_at")]
    if not started:
        return 0.0
    ended = [s["ended_at"] for s in states if s.get("ended_at")]
    end = datetime.fromisoformat(max(ended)) if ended else wall_now()
    return max(0.0, (end - datetime.fromisoformat(min(started))).total_seconds())


def _seen(states: list[dict[str, Any]], alive: list[bool]) -> Seen:
    return tuple(
        (str(state.get("phase", "launching")), up) for state, up in zip(states, alive, strict=True)
    )


def _dead(phases: list[str], alive: list[bool]) -> bool:
    """Whether an instance's agent exited in the middle of the job (an infrastructure
    failure: it has not ended, and no longer runs). One that never reported a state
    counts too: its launch marks it (agent.pid) before it starts, so by the time a step
    reads it, its agent runs or ran."""
    return any(phase in PHASES and not up for phase, up in zip(phases, alive, strict=True))


_STEPS = (
    (Secondary.DOWNLOADING, rules.DOWNLOADING),
    (Secondary.TRAINING, rules.TRAINING),
    (Secondary.UPLOADING, rules.UPLOADING),
)


def _catch_up(job: TrainingJob, upto: Secondary, now: datetime) -> None:
    """Record the steps a job went through between two polls, up to `upto`.

    Only a job still on the normal path is caught up; one being stopped is not.
    """
    for status, message in _STEPS:
        current = Secondary(job.secondary_status)
        if current not in SECONDARY_ORDER:
            return
        if SECONDARY_ORDER.index(current) < SECONDARY_ORDER.index(status):
            transition(job, status, message, now)
        if status is upto:
            return


SECONDARY_ORDER = [
    Secondary.STARTING,
    Secondary.RESTARTING,
    Secondary.PENDING,
    Secondary.DOWNLOADING,
    Secondary.TRAINING,
    Secondary.UPLOADING,
]
