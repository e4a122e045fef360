"""Running jobs: what their instances report becomes the job's statuses.

A step reads each instance's state (its phase, and whether its agent runs) and moves
the job's SecondaryStatus along; an instance whose agent died mid-job fails the job, or,
on a training plan, interrupts it until the plan's next block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from dockyard.clock import wall_now
from dockyard.compute.wire.state import ENDED_PHASES, InstanceState, times
from dockyard.control.jobs.queue import Seen
from dockyard.domain import jobs as rules
from dockyard.domain import plan_jobs as plan_rules
from dockyard.domain.job_runtime import JobEnd, JobPhase, StopReason
from dockyard.domain.jobs import Secondary
from dockyard.services.job_status import catch_up, transition
from dockyard.store.tables import TrainingJob

PHASES = ("launching", "downloading", "training", "uploading")
# finish(session, job, how it ended, its instances' states): `ending.Ending.finish`
Finish = Callable[[Session, TrainingJob, JobEnd, "list[InstanceState] | None"], None]


def apply(
    session: Session,
    job: TrainingJob,
    states: list[InstanceState],
    alive: list[bool],
    now: datetime,
    finish: Finish,
) -> None:
    """Move the job's statuses to where its instances are; settle it once they ended."""
    phases = [state.get("phase", "launching") for state in states]
    failed = [s for s in states if s.get("phase") == "failed"]
    died = dead(phases, alive)
    started = times(states, "training_started_at")
    if started and job.training_start_time is None:
        job.training_start_time = min(started)
    if failed:
        finish(session, job, JobEnd.failed(failed[0].get("failure_reason")), states)
        return
    if died:
        reason = "InternalServerError: an instance's agent exited unexpectedly"
        finish(session, job, JobEnd.failed(reason), states)
        return
    if all(p in ("completed", "stopped") for p in phases):
        stopped = [s for s in states if s.get("phase") == "stopped"]
        if stopped:
            why = StopReason.reported(stopped[0].get("stop_reason"))
            finish(session, job, JobEnd.stopped(why), states)
        else:
            finish(session, job, JobEnd.completed(), states)
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


def interrupted(
    session: Session,
    job: TrainingJob,
    states: list[InstanceState],
    alive: list[bool],
    now: datetime,
    finish: Finish,
) -> bool:
    """A plan job whose block ended, or whose instance died: once none of its
    instances runs, it waits for the plan's next block (or, on reserved capacity, the
    same block) and resumes from its checkpoints. True if that is what happened."""
    phases = [state.get("phase", "launching") for state in states]
    runtime = job.runtime
    if runtime.phase is JobPhase.ENDING:
        return False  # told to stop for good: it ends, however its instances do
    if dead(phases, alive) and runtime.phase is not JobPhase.INTERRUPTING:
        job.runtime = runtime.interrupting(plan_rules.INSTANCE_LOST)
        return True  # the next pass stops the other instances
    if runtime.phase is not JobPhase.INTERRUPTING or job.stop_requested:
        return False
    over = all(phase in ENDED_PHASES or not up for phase, up in zip(phases, alive, strict=True))
    if not over:
        return True
    if all(phase == "completed" for phase in phases):
        return False  # it finished just in time: settle it as usual
    started = times(states, "training_started_at")
    used = runtime.used_seconds + run_seconds(states)
    if started and job.training_start_time is None:
        job.training_start_time = min(started)
    catch_up(job, Secondary.TRAINING if started else Secondary.DOWNLOADING, now)
    transition(job, Secondary.INTERRUPTED, str(runtime.interruption), now)
    job.runtime = runtime.requeued(used)
    if used >= int(job.spec["StoppingCondition"]["MaxRuntimeInSeconds"]):
        finish(session, job, JobEnd.stopped(StopReason.MAX_RUNTIME), None)
    return True


def run_seconds(states: list[InstanceState]) -> float:
    """How long this attempt's instances trained, by their own clocks (MaxRuntime and
    billing count time run, which a manual control-plane clock knows nothing of)."""
    started = times(states, "training_started_at")
    if not started:
        return 0.0
    ended = times(states, "ended_at")
    end = max(ended) if ended else wall_now()
    return max(0.0, (end - min(started)).total_seconds())


def seen(states: list[InstanceState], alive: list[bool]) -> Seen:
    return tuple(
        (str(state.get("phase", "launching")), up) for state, up in zip(states, alive, strict=True)
    )


def dead(phases: Sequence[str], alive: list[bool]) -> bool:
    """Whether an instance's agent exited in the middle of the job (an infrastructure
    failure: it has not ended, and no longer runs). One that never reported a state
    counts too: its launch marks it (agent.pid) before it starts, so by the time a step
    reads it, its agent runs or ran."""
    return any(phase in PHASES and not up for phase, up in zip(phases, alive, strict=True))
