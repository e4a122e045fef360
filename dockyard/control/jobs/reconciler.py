"""The jobs reconciler: place a job, launch its instances, follow them, settle the end.

Each step is a short transaction; launching and polling happen with no session open
and are safe to repeat (the backend never launches a job's host twice), so a server
killed at any point picks the job up where its rows and its agents' files say it is.
What a step does depends on the job's state: `placing` (queued), `running` (followed),
`ending` (settled); `queue` chooses which jobs a pass steps.

A step is the reconcilers' one pattern (`control.pattern`): claim and decide
(`_prepare`, placing a queued job), act with no session open (`_observe`: launch, read
the instances), record (the rest of `_advance`, under the claim still held). Unlike
the other reconcilers it claims in the deciding transaction: the jobs a pass places
are claimed and placed in one transaction behind one capacity lock (`place`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import Backend
from dockyard.compute.wire.state import ENDED_PHASES, InstanceState
from dockyard.config import PlanSettings, Settings
from dockyard.control.jobs.ending import Ending
from dockyard.control.jobs.placing import Placer
from dockyard.control.jobs.queue import Following, JobQueue, Outcome, Placing, Prepared, Seen
from dockyard.control.jobs.running import apply, dead, interrupted, seen
from dockyard.control.jobs.specs import HostSpecs, instance_key
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.job_runtime import JobEnd, JobPhase, JobRuntime, StopReason
from dockyard.domain.jobs import TERMINAL, JobStatus
from dockyard.services import capacity, plan_jobs
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob

log = logging.getLogger("dockyard.control.jobs")


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
        self.plans = plans
        self.queue = JobQueue(db, clock)  # which jobs a pass steps
        # This server, as its claims on the jobs it steps name it.
        self.claimant = claims.Claimant()
        self.calendars = calendars if calendars is not None else capacity.CalendarCache()
        self.specs = HostSpecs(settings)
        self.ending = Ending(clock, backend, plans)
        self.placer = Placer(clock, plans, self.calendars, self.ending.finish)

    def __call__(self) -> None:
        self.queue.run(self.step, self.place, self.peek, self.give_up)

    def give_up(self, job_id: int, reason: str) -> None:
        """Fail a job whose steps keep failing (a fault, not a passing error): its capacity
        and any warm pool go, and its instances are told to stop, so nothing is held for
        a job nobody can move on."""
        with self.db.session() as session:
            job = session.scalar(
                select(TrainingJob).where(TrainingJob.id == job_id).with_for_update()
            )
            if job is None or JobStatus(job.status) in TERMINAL:
                return
            claims.release(job)
            # The one ending path, as for any failure: capacity and any warm pool go,
            # metrics are kept where they can be read, and the time it trained is billed
            # (its instances ran until now, for all dockyard knows).
            self.ending.finish(
                session, job, JobEnd.failed(reason[:1024]), None, launched=True, best_effort=True
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
        return seen(*self._look(handles))

    def _look(self, handles: Sequence[str]) -> tuple[list[InstanceState], list[bool]]:
        """Each instance's state, and whether its agent runs.

        Whether it runs is read first: an agent that had exited before its state was
        read left its last word there, so one ending in between is not taken for one
        that died mid-job. One that looks dead is looked at again: an agent started by
        another server may have written its state between the two reads."""
        alive = [self.backend.alive(handle) for handle in handles]
        states = [self.backend.poll(handle) for handle in handles]
        for index, handle in enumerate(handles):
            if dead([states[index].get("phase", "launching")], [alive[index]]):
                alive[index] = self.backend.alive(handle)
                states[index] = self.backend.poll(handle)
        return states, alive

    # ------------------------------------------------------------------ one job

    def step(self, job_id: int, prepared: Prepared | None = None) -> Outcome:
        """Move one job on; answers what it saw when it could not be placed on demand,
        or, for a job left running, what to follow it by.

        The job is claimed for the step (`store.claims`): a job another server is
        stepping is left alone, and the step's last transaction gives the claim up. A
        job `place` prepared (claimed, placed) goes on from there.
        """
        if prepared is None:
            token = claims.new_token()
            with self.db.session() as session:
                job = claims.claim_job(session, job_id, self.claimant, token)
                if job is None:
                    return None  # another server is stepping it
                outcome = self._prepare(session, job, token)
            if not isinstance(outcome, Prepared):
                return outcome
            prepared = outcome
        return self._advance(prepared)

    def place(self, job_ids: Sequence[int], skip: Callable[[int], bool]) -> Iterator[Placing]:
        """Claim and prepare these jobs (queued ones placed) in one transaction, one
        capacity lock for all: answers each job's id with what a step would have seen
        (`Prepared` to go on with, a wait stamp, None), or the error its preparing
        raised (that job's work undone, the others' kept). `skip(id)`, asked just
        before a job is tried, leaves it out (one like it just failed to place).

        Nothing is final until the transaction commits, after the last answer: if
        the commit fails, so has every answer."""
        with self.db.session() as session:
            for job_id in job_ids:
                if skip(job_id):
                    continue
                token = claims.new_token()
                try:
                    with session.begin_nested():  # one job's fault undoes its work only
                        job = claims.claim_job(session, job_id, self.claimant, token)
                        outcome = None if job is None else self._prepare(session, job, token)
                except Exception as exc:
                    yield job_id, exc
                    continue
                yield job_id, outcome

    def _prepare(
        self, session: Session, job: TrainingJob, token: str
    ) -> capacity.WaitStamp | Prepared | None:
        """With the job claimed: place it if it is queued; what its instances need."""
        if JobStatus(job.status) in TERMINAL:
            claims.release(job)
            return None
        runtime = job.runtime
        if runtime.phase is JobPhase.QUEUED:
            if job.stop_requested:
                self.ending.finish(session, job, JobEnd.stopped(StopReason.REQUESTED), None)
                claims.release(job)
                return None
            if not self.placer.place(session, job):
                claims.release(job)
                return capacity.WaitStamp.parse(job.waiting_for)
            runtime = job.runtime
            log.info("training job %s placed: %s", job.name, runtime.placement)
        elif job.stop_requested and runtime.phase is not JobPhase.ENDING:
            runtime = job.runtime = runtime.ending()
        elif job.training_plan_arn and runtime.phase is not JobPhase.INTERRUPTING:
            reason = None
            if plan_jobs.block_ending(job, self.clock.now()):
                # The block's last 30 minutes: stop the instances (checkpoints are
                # saved as they stop) and wait for the plan's next block.
                reason = plan_rules.INTERRUPTED
            elif plan_jobs.lost_instances(session, job):
                # An instance of its UltraServer failed: stop the others, and start
                # again from the checkpoints on healthy instances (a spare's).
                reason = plan_rules.INSTANCE_LOST
            if reason is not None:
                runtime = job.runtime = runtime.interrupting(reason)
        specs = runtime.specs
        if specs is None:
            specs = self.specs.for_job(job, runtime)
            runtime = job.runtime = runtime.with_specs(specs)
        return Prepared(job, runtime, specs, token)

    def _advance(self, prepared: Prepared) -> Outcome:
        """Launch or read the prepared job's instances (no session open), then apply
        what they say and give the claim up."""
        job, runtime, specs, token = prepared
        job_id = job.id
        try:
            handles, states, alive = self._observe(job, runtime, specs)
        except BaseException:
            with self.db.session() as session:  # the next pass, here or elsewhere, retries
                current = claims.held(session, job_id, token)
                if current is not None:
                    claims.release(current)
            raise
        working: list[str] = []
        with self.db.session() as session:
            current = claims.held(session, job_id, token)
            if current is None:
                return None  # the claim ran out and another server took the job over
            claims.release(current)
            if JobStatus(current.status) in TERMINAL:
                return None
            current.runtime = current.runtime.running()
            if current.training_plan_arn and interrupted(
                session, current, states, alive, self.clock.now(), self.ending.finish
            ):
                return None
            apply(session, current, states, alive, self.clock.now(), self.ending.finish)
            if JobStatus(current.status) in TERMINAL:
                # One instance's end ended the job (it failed): the others, still at
                # work, must stop too - their capacity is no longer the job's.
                working = [
                    handle
                    for handle, state, up in zip(handles, states, alive, strict=True)
                    if up and state.get("phase") not in ENDED_PHASES
                ]
                following = None
            elif current.stop_requested:
                following = None  # stopping: a stopping job is stepped each pass
            else:
                placement = current.runtime.placement
                following = Following(
                    key=instance_key(current),
                    handles=tuple(handles),
                    seen=seen(states, alive),
                    deadline=placement.work_ends if placement else None,
                    instances=placement.instances if placement else (),
                )
        for handle in working:  # after the end is recorded: a stop is safe to repeat
            self.backend.stop(handle)
        return following

    def _observe(
        self, job: TrainingJob, runtime: JobRuntime, specs: list[dict[str, Any]]
    ) -> tuple[list[str], list[InstanceState], list[bool]]:
        """Launch (or hand a warm pool) the job's instances, once; read where they are."""
        key = instance_key(job)
        home = runtime.home or key
        launched = self.specs.launchable(specs)
        if home == key:
            handles = self.backend.launch(key, launched)
        else:  # a warm pool's instances, already running: no launch (spec §5.3)
            handles = self.backend.assign(home, key, launched)
        states, alive = self._look(handles)
        if job.stop_requested or runtime.phase in (JobPhase.INTERRUPTING, JobPhase.ENDING):
            for handle in handles:
                self.backend.stop(handle)
        return handles, states, alive
