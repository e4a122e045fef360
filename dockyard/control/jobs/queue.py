"""Which unfinished training jobs a jobs-reconciler pass steps, and which it may skip.

A queued job that could not be placed on demand carries the capacity it saw
(`capacity.WaitStamp`, in `training_jobs.waiting_for`). A pass reads only the jobs that
may have moved: running ones, stopping ones, new ones, and the queued jobs of instance
types whose pool versions moved (or one of whose stamps ran out) since the last pass.
Of those, a queued job is not tried if one of its type asking for no more just failed
on the same capacity. Every job is read and judged again once a minute regardless.

A step that raises is retried with the one backoff policy of every reconciler
(`control.pattern.BACKOFF`: 0.5 s doubling to a minute), the job left alone in between.
An error that passes on its own (the database busy or unreachable, a file or process
the backend could not make) is retried for as long as it lasts; a `PermanentError`
fails the job at once; any other is a fault in dockyard or in the job's stored request,
and after three tries the job fails with an InternalServerError that says what went
wrong, rather than being retried forever.

A running job is followed (`Following`): after a step it is stepped again only when
its agents woke the control plane naming it, when a deadline of its own comes (a plan
block's end), or when a look at its instances every few seconds finds them changed (an
agent that died sends no wake-up; a wake-up may be lost). So a pass costs what changed,
not what runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import or_, select, tuple_

from dockyard.clock import Clock, monotonic
from dockyard.control.loop import seconds_until
from dockyard.control.pattern import BACKOFF, Backoff, Retries
from dockyard.domain.job_runtime import JobRuntime
from dockyard.domain.jobs import JobStatus
from dockyard.domain.warm_pools import WarmPoolStatus
from dockyard.services import capacity, ultraserver_capacity
from dockyard.store.db import Database
from dockyard.store.tables import TrainingJob, WarmPool

log = logging.getLogger("dockyard.control.jobs")

# How often every queued job is tried again even though its wait stamp still holds.
RECHECK_ALL_SECONDS = 60.0
# How often a running job's instances are looked at though no wake-up named it.
RECHECK_RUNNING_SECONDS = 5.0
# How soon a job a step left neither queued nor followed is stepped again (one being
# stopped, one another server was stepping, a plan job whose instances are being let go).
SOON_SECONDS = 0.5
_WARM_TYPES = (
    select(WarmPool.region, WarmPool.instance_type)
    .where(WarmPool.status == WarmPoolStatus.AVAILABLE.value)
    .distinct()
)
Kind = tuple[str, str]  # (region, instance type)
Seen = tuple[tuple[str, bool], ...]  # each instance's phase, and whether its agent runs


@dataclass
class Following:
    """A running job as its last step left it: stepped again only when this changes."""

    key: str  # its instance key, which its agents' wake-ups name
    handles: tuple[str, ...]
    seen: Seen
    # A moment on the control plane's clock when it needs a step whatever its instances
    # say (its plan block's end), or None.
    deadline: datetime | None = None
    look_at: float = 0.0  # monotonic: when its instances are looked at unprompted
    # The fleet instances it runs on by id (on an UltraServer): stepped when one fails.
    instances: tuple[str, ...] = ()


class Prepared(NamedTuple):
    """A job claimed (under `token`) and placed, with its instances' specs: what a
    step launches or reads next."""

    job: TrainingJob
    runtime: JobRuntime
    specs: list[dict[str, Any]]
    token: str


Outcome = capacity.WaitStamp | Following | None
Step = Callable[[int, "Prepared | None"], Outcome]
# What preparing a job answered: how it waits, Prepared, or the error it raised.
Placing = tuple[int, "capacity.WaitStamp | Prepared | Exception | None"]
Place = Callable[[Sequence[int], Callable[[int], bool]], Iterator[Placing]]
Peek = Callable[[tuple[str, ...]], Seen]
GiveUp = Callable[[int, str], None]


class JobQueue:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self.recheck_all_at = 0.0  # the first pass looks at every job
        self._following: dict[int, Following] = {}
        self._woken: set[str] = set()
        self._woken_lock = threading.Lock()
        self._soon = False  # a step left a job that needs another soon
        self.retries = Retries("training job", BACKOFF, _fault_reason)
        # What the last pass saw: each type's pool-version sum, and the next moment one
        # of its queued jobs' stamps runs out.
        self._seen: dict[Kind, int] = {}
        self._until: dict[Kind, datetime] = {}

    @property
    def backoff_first_seconds(self) -> float:
        return self.retries.policy.first_seconds

    @backoff_first_seconds.setter
    def backoff_first_seconds(self, seconds: float) -> None:
        """(Tests whose tries follow each other set it to 0.)"""
        self.retries.policy = replace(self.retries.policy, first_seconds=seconds)

    @property
    def _backoff(self) -> dict[int, Backoff]:
        """The jobs backing off, by id."""
        return self.retries.entries

    def following(self, job_id: int) -> Following | None:
        return self._following.get(job_id)

    def woken(self, keys: set[str]) -> None:
        """The agents of these jobs (instance keys) reported a change (any thread)."""
        with self._woken_lock:
            self._woken |= keys

    def run(self, step: Step, place: Place, peek: Peek, give_up: GiveUp) -> None:
        """One pass: the jobs that may move are prepared by `place` in one transaction
        (queued ones placed), then each is `step`ped on; a step answers how a running
        job is to be followed. `peek` reads a followed job's instances; `give_up` fails
        a job whose steps keep failing."""
        with self._woken_lock:
            woken, self._woken = self._woken, set()
        now = self.clock.now()
        # Now and then every job is looked at again, whatever its stamp says: a change
        # that bypassed the versions (none is known) would otherwise strand a job.
        everything = monotonic() >= self.recheck_all_at
        if everything:
            self.recheck_all_at = monotonic() + RECHECK_ALL_SECONDS
        with self.db.read_session() as session:
            versions = capacity.versions(session)
            query = select(
                TrainingJob.id,
                TrainingJob.region,
                TrainingJob.instance_type,
                TrainingJob.waiting_for,
                TrainingJob.stop_requested,
            ).where(
                TrainingJob.status.in_([JobStatus.IN_PROGRESS.value, JobStatus.STOPPING.value])
            )
            changed = list(versions)
            if not everything:
                # Queued jobs of a type whose capacity has not changed since the last pass
                # (and none of whose stamps has run out) are not even read: a deep queue
                # costs a pass, and so each create's nudge, next to nothing.
                changed = [
                    kind
                    for kind, version in versions.items()
                    if self._seen.get(kind) != version
                    or (kind in self._until and now >= self._until[kind])
                ]
                query = query.where(
                    or_(
                        TrainingJob.waiting_for.is_(None),
                        TrainingJob.stop_requested,
                        tuple_(TrainingJob.region, TrainingJob.instance_type).in_(changed),
                    )
                )
            rows = session.execute(query.order_by(TrainingJob.id)).all()
        self._seen = dict(versions)
        until: dict[Kind, datetime] = {}  # the next stamp to run out, per type

        def waits(kind: Kind, stamp: capacity.WaitStamp) -> None:
            if stamp.until is not None and (kind not in until or stamp.until < until[kind]):
                until[kind] = stamp.until

        self._soon = False
        if everything:  # forget jobs that ended (here or on another server)
            running = {row.id for row in rows}
            self._following = {k: v for k, v in self._following.items() if k in running}
            self.retries.keep(running)
        # Fleet instances that failed under followed jobs (UltraServers; rare, and read
        # only when some followed job runs on instances by id).
        pinned = {i for f in self._following.values() for i in f.instances}
        lost: set[str] = set()
        if pinned:
            with self.db.read_session() as session:
                lost = ultraserver_capacity.failed(session, pinned)
        todo = []
        for row in rows:
            if not self.retries.ready(row.id):
                continue
            followed = self._following.get(row.id)
            if (
                followed is not None
                and not row.stop_requested
                and not lost.intersection(followed.instances)
                and not self._needs_step(followed, woken, now, peek)
            ):
                continue
            stamp = capacity.WaitStamp.parse(row.waiting_for)
            kind = (row.region, row.instance_type)
            if (
                stamp is not None
                and not row.stop_requested
                and not everything
                and stamp.holds(versions.get(kind), now)
            ):
                waits(kind, stamp)
                continue  # queued, and nothing it waits for has changed
            todo.append(row)

        # Jobs neither followed nor stopping - queued ones, new ones - are prepared in one
        # transaction: one capacity lock for all the placements of a pass.
        batch = {
            row.id: row for row in todo if row.id not in self._following and not row.stop_requested
        }
        # A warm pool may take a job its type's other jobs could not: no inference from
        # one job's failure to another's where one is Available.
        warm: set[Kind] = set()
        if any(row.waiting_for for row in batch.values()):
            with self.db.read_session() as session:
                warm = {(r.region, r.instance_type) for r in session.execute(_WARM_TYPES)}
        failed: dict[Kind, list[capacity.WaitStamp]] = {}

        def skip(job_id: int) -> bool:
            """Whether a job of the same type asking for no more failed to place in
            this transaction, which has only taken capacity since: this one cannot fit
            either. Not written back: the next pass reads this type's jobs only if its
            capacity moves again (or once a minute), and judges them the same way."""
            row = batch[job_id]
            kind = (row.region, row.instance_type)
            stamp = capacity.WaitStamp.parse(row.waiting_for)
            if stamp is None or kind in warm:
                return False
            covering = next((f for f in failed.get(kind, ()) if f.covers(stamp)), None)
            if covering is None:
                return False
            waits(kind, replace(stamp, until=covering.until))
            return True

        prepared: dict[int, Prepared] = {}
        # Errors are handled once the transaction is over (giving up writes elsewhere).
        errors: dict[int, Exception] = {}
        answered: list[int] = []
        try:
            for job_id, outcome in place(list(batch), skip):
                answered.append(job_id)
                if isinstance(outcome, Exception):
                    errors[job_id] = outcome
                elif isinstance(outcome, Prepared):
                    prepared[job_id] = outcome
                else:
                    row = batch[job_id]
                    self._stepped(job_id, (row.region, row.instance_type), outcome, waits, failed)
        except Exception as exc:  # the transaction failed: so did every job in it
            errors = dict.fromkeys(answered, exc)
            prepared.clear()
        for job_id, error in errors.items():
            self._failed(job_id, error, give_up)
        for row in todo:
            if row.id in batch and row.id not in prepared:
                continue  # answered by `place` (or skipped)
            try:
                stepped = step(row.id, prepared.get(row.id))
            except Exception as exc:
                self._failed(row.id, exc, give_up)
                continue
            self._stepped(row.id, (row.region, row.instance_type), stepped, waits, failed)
        # Types whose stamped jobs were read now know their next run-out afresh; the
        # others keep the last pass's, or an earlier one from a job that failed now.
        kept = {k: v for k, v in self._until.items() if k not in set(changed)}
        for kind, moment in until.items():
            kept[kind] = min(kept.get(kind, moment), moment)
        self._until = kept

    def _stepped(
        self,
        job_id: int,
        kind: Kind,
        outcome: Outcome,
        waits: Callable[[Kind, capacity.WaitStamp], None],
        failed: dict[Kind, list[capacity.WaitStamp]],
    ) -> None:
        """Remember what a step (or preparing) answered for the job."""
        self.retries.succeeded(job_id)
        self._following.pop(job_id, None)
        if isinstance(outcome, capacity.WaitStamp):
            failed.setdefault(kind, []).append(outcome)
            waits(kind, outcome)
        elif outcome is not None:
            outcome.look_at = monotonic() + RECHECK_RUNNING_SECONDS
            self._following[job_id] = outcome
        else:
            self._soon = True

    def _failed(self, job_id: int, exc: Exception, give_up: GiveUp) -> None:
        """Back off from a job whose step raised; give up on it when the error will not
        pass on its own (`control.pattern.Retries`)."""
        self._following.pop(job_id, None)
        self.retries.failed(job_id, exc, give_up)

    def due(self) -> float | None:
        """Seconds until a pass is needed: a queued job's capacity frees (a lease ends),
        a followed job's deadline or next look, the next look at every job."""
        wanted = [
            seconds_until(
                self.clock,
                [*self._until.values(), *(f.deadline for f in self._following.values())],
            ),
            max(0.0, self.recheck_all_at - monotonic()),
        ]
        if self._following:
            wanted.append(max(0.0, min(f.look_at for f in self._following.values()) - monotonic()))
        if self._soon:
            wanted.append(SOON_SECONDS)
        wanted.append(self.retries.due())
        return min(s for s in wanted if s is not None)

    @staticmethod
    def _needs_step(followed: Following, woken: set[str], now: datetime, peek: Peek) -> bool:
        """Whether a followed job needs a step: named by a wake-up, at its deadline, or
        its instances changed when looked at (only every few seconds unprompted)."""
        if followed.key in woken or (followed.deadline is not None and now >= followed.deadline):
            return True
        if monotonic() < followed.look_at:
            return False
        followed.look_at = monotonic() + RECHECK_RUNNING_SECONDS
        return peek(followed.handles) != followed.seen


def _fault_reason(exc: BaseException) -> str:
    return f"InternalServerError: dockyard could not run the job: {exc!r}"
