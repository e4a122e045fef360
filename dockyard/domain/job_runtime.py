"""What the control plane keeps of a training job while it runs: one typed value.

A job's TrainingJobStatus and SecondaryStatus are what the API shows; its `JobPhase` is
where the jobs reconciler has it (queued, placed, running, interrupting, ending, ended),
kept explicitly rather than inferred from which keys a JSON bag happens to hold. The
phase moves through one checked table (`PHASE_TRANSITIONS`), and `JobRuntime`'s methods
are the only ways from one phase to the next, so a reconciler step reads top to bottom.

How a job ends travels typed too: an `Outcome` and, for a stopped job, a `StopReason`,
together a `JobEnd` that the one ending path (`control.jobs.ending`) records.

Stored as the `training_jobs.phase` column plus the `training_jobs.runtime` JSON
(`JobRuntime.of` / `JobRuntime.json`: the shape has this one home).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from dockyard.domain.placement import Placement
from dockyard.domain.transitions import IllegalTransition, Transitions


class JobPhase(StrEnum):
    """Where the jobs reconciler has a job (internal; the API never shows it)."""

    QUEUED = "queued"  # waiting for capacity: new, or interrupted until a plan's next block
    PLACED = "placed"  # capacity taken (a placement), its instances not seen yet
    RUNNING = "running"  # its instances launched (or handed a warm pool) and followed
    INTERRUPTING = "interrupting"  # a plan job's instances stopping; it resumes later
    ENDING = "ending"  # its instances stopping for good (StopTrainingJob)
    ENDED = "ended"  # the end recorded: Completed, Failed or Stopped


_P = JobPhase
PHASE_TRANSITIONS = Transitions(
    "training job phase",
    {
        _P.QUEUED: frozenset({_P.PLACED, _P.ENDED}),
        _P.PLACED: frozenset({_P.RUNNING, _P.INTERRUPTING, _P.ENDING, _P.ENDED}),
        _P.RUNNING: frozenset({_P.INTERRUPTING, _P.ENDING, _P.ENDED}),
        _P.INTERRUPTING: frozenset({_P.QUEUED, _P.ENDING, _P.ENDED}),
        _P.ENDING: frozenset({_P.ENDED}),
        _P.ENDED: frozenset(),
    },
)
# Phases whose job holds a placement (capacity, instances).
PLACED_PHASES = frozenset({_P.PLACED, _P.RUNNING, _P.INTERRUPTING, _P.ENDING})


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"


class StopReason(StrEnum):
    """Why a stopped job stopped."""

    REQUESTED = "stop"  # StopTrainingJob
    MAX_RUNTIME = "max_runtime"  # StoppingCondition.MaxRuntimeInSeconds ran out
    PLAN_ENDED = "plan_ended"  # its training plan has no capacity left

    @classmethod
    def reported(cls, word: str | None) -> StopReason:
        """An agent's `stop_reason` (the agents say "stop" or "max_runtime")."""
        return cls.MAX_RUNTIME if word == cls.MAX_RUNTIME.value else cls.REQUESTED


@dataclass(frozen=True)
class JobEnd:
    """How a job ended: what the ending path records."""

    outcome: Outcome
    stop_reason: StopReason | None = None  # a stopped job's
    failure_reason: str | None = None  # a failed job's FailureReason (None: unknown)

    def __post_init__(self) -> None:
        if (self.stop_reason is not None) != (self.outcome is Outcome.STOPPED):
            raise ValueError(f"a stop reason belongs to a stopped job: {self}")
        if self.failure_reason is not None and self.outcome is not Outcome.FAILED:
            raise ValueError(f"a failure reason belongs to a failed job: {self}")

    @classmethod
    def completed(cls) -> JobEnd:
        return cls(Outcome.COMPLETED)

    @classmethod
    def failed(cls, reason: str | None) -> JobEnd:
        return cls(Outcome.FAILED, failure_reason=reason)

    @classmethod
    def stopped(cls, reason: StopReason) -> JobEnd:
        return cls(Outcome.STOPPED, stop_reason=reason)


@dataclass(frozen=True)
class JobRuntime:
    phase: JobPhase = JobPhase.QUEUED
    placement: Placement | None = None
    # The backend's name for the instances it runs on: its own instance key, or the
    # key of the warm pool's first job when it runs on a pool.
    home: str | None = None
    # When it was first placed, on the control plane's clock: a warm pool's 28 days
    # count from here.
    placed_at: datetime | None = None
    # A plan job's try (1, 2, ...) and the seconds its earlier tries ran (MaxRuntime
    # and BillableTime count time run, over every try).
    attempt: int = 1
    used_seconds: float = 0.0
    # Why its instances are being stopped while INTERRUPTING (the Interrupted message).
    interruption: str | None = None
    # What each of its instances is told (the host specs), once made; opaque here.
    specs: list[dict[str, Any]] | None = None

    # ------------------------------------------------------------------ moves

    def _to(self, phase: JobPhase, **changes: Any) -> JobRuntime:
        PHASE_TRANSITIONS.check(self.phase, phase)
        return replace(self, phase=phase, **changes)

    def placed(
        self, placement: Placement, home: str, placed_at: datetime | None = None
    ) -> JobRuntime:
        """Capacity taken: on a warm pool (whose `home` it runs on), a plan's block, or
        on demand. A try after the first keeps when the job was first placed."""
        return self._to(
            JobPhase.PLACED,
            placement=placement,
            home=home,
            placed_at=self.placed_at or placed_at,
            specs=None,
        )

    def with_specs(self, specs: list[dict[str, Any]]) -> JobRuntime:
        if self.phase not in PLACED_PHASES:
            raise ValueError(f"specs are made for placed jobs only (the job is {self.phase})")
        return replace(self, specs=specs)

    def running(self) -> JobRuntime:
        """Its instances launched (or handed a pool): they are followed from now on."""
        return self._to(JobPhase.RUNNING) if self.phase is JobPhase.PLACED else self

    def interrupting(self, reason: str) -> JobRuntime:
        return self._to(JobPhase.INTERRUPTING, interruption=reason)

    def requeued(self, used_seconds: float) -> JobRuntime:
        """An interrupted plan job, its instances gone: it waits for capacity again,
        for its next try, on fresh instances."""
        if self.phase is not JobPhase.INTERRUPTING:
            raise IllegalTransition(
                f"only an interrupted job is queued again, not a {self.phase} one"
            )
        return JobRuntime(attempt=self.attempt + 1, used_seconds=used_seconds)

    def ending(self) -> JobRuntime:
        return self._to(JobPhase.ENDING, interruption=None)

    def ended(self) -> JobRuntime:
        return self._to(JobPhase.ENDED, interruption=None)

    # ------------------------------------------------------------------ storage

    def json(self) -> dict[str, Any]:
        """The `runtime` column (the phase has a column of its own)."""
        data: dict[str, Any] = {}
        if self.placement is not None:
            data["placement"] = self.placement.json()
        if self.home is not None:
            data["home"] = self.home
        if self.placed_at is not None:
            data["placed_at"] = self.placed_at.isoformat()
        if self.attempt != 1:
            data["attempt"] = self.attempt
        if self.used_seconds:
            data["used_seconds"] = self.used_seconds
        if self.interruption is not None:
            data["interruption"] = self.interruption
        if self.specs is not None:
            data["specs"] = self.specs
        return data

    @classmethod
    def of(cls, phase: JobPhase | str | None, data: Mapping[str, Any] | None) -> JobRuntime:
        data = data or {}
        placed_at = data.get("placed_at")
        specs = data.get("specs")
        return cls(
            phase=JobPhase(phase or JobPhase.QUEUED),
            placement=Placement.of(data.get("placement")),
            home=str(data["home"]) if data.get("home") else None,
            placed_at=datetime.fromisoformat(str(placed_at)) if placed_at else None,
            attempt=int(data.get("attempt", 1)),
            used_seconds=float(data.get("used_seconds", 0)),
            interruption=str(data["interruption"]) if data.get("interruption") else None,
            specs=list(specs) if specs is not None else None,
        )
