"""The one reconciler pattern: claim -> decide -> act -> record, with one error and
backoff policy.

Every reconciler (jobs, clusters, warm pools, plans) works the same way:

- a pass lists the rows that are due (`due()` tells the loop when the next one is) and
  steps each on its own, so one row's fault never holds up another's;
- a step **claims** its row (`store.claims`: owner, token, expiry on the row), so two
  servers sharing the database never act on one row at once;
- **decides**, in one transaction, what is to be done, as a plain value;
- **acts** on that decision with no session open (backend calls are slow and may
  block; a transaction held across them would hold its row locks too);
- **records** what the backend said in a transaction that first finds the claim still
  held (a step whose claim ran out and was taken over applies nothing), and gives the
  claim up there.

The capacity lock (`services.capacity.lock`) is not part of a step: it is taken only
by a transaction that books or releases capacity, and then *before* the claimed row is
locked, the one order every booking transaction takes them in (the jobs placer takes
the lock, then writes a warm pool's row: a pools step that locked the pool first and
the capacity second could deadlock with it).

Errors: a `TemporaryError` (or an error known to pass on its own: the database busy
or unreachable, a file or process the backend could not make) is retried with
`BACKOFF`, per row, for as long as it lasts. A `PermanentError` will not pass: the row
is failed or marked with its reason at once and not retried. Anything else is a fault
(in dockyard, or in a stored request): logged with its traceback and retried like a
temporary error, except where the reconciler can fail the row (jobs), which it does
after `BackoffPolicy.fault_tries` tries rather than retrying forever.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from dockyard.clock import monotonic
from dockyard.services import capacity
from dockyard.store import claims
from dockyard.store.db import Database
from dockyard.store.tables import Claimed

log = logging.getLogger("dockyard.control")


class TemporaryError(Exception):
    """An error that passes on its own (a backend busy, a resource not ready yet): the
    step is retried with backoff for as long as it lasts."""


class PermanentError(Exception):
    """An error no retry mends: the row is failed (or marked) with this message at once,
    and not retried."""


# Errors that pass on their own, whoever raised them: the database busy or gone for a
# moment, the backend out of room or processes.
TEMPORARY: tuple[type[BaseException], ...] = (
    TemporaryError,
    OperationalError,
    OSError,
    TimeoutError,
)


class ErrorKind(enum.Enum):
    TEMPORARY = "temporary"
    PERMANENT = "permanent"
    FAULT = "fault"  # unexpected: treated as temporary, logged with its traceback


def kind_of(exc: BaseException) -> ErrorKind:
    if isinstance(exc, PermanentError):
        return ErrorKind.PERMANENT
    if isinstance(exc, TEMPORARY):
        return ErrorKind.TEMPORARY
    return ErrorKind.FAULT


@dataclass(frozen=True)
class BackoffPolicy:
    """How long a row whose step failed is left alone: `first_seconds`, doubling with
    each failure in a row, never more than `max_seconds`; and after how many faults a
    row that can be failed is failed."""

    first_seconds: float = 0.5
    max_seconds: float = 60.0
    fault_tries: int = 3

    def wait(self, failures: int) -> float:
        return min(self.max_seconds, self.first_seconds * 2 ** max(0, failures - 1))


# The one policy every reconciler uses.
BACKOFF = BackoffPolicy()


@dataclass
class Backoff:
    """A row whose steps have been failing: how often, and when it is tried again."""

    failures: int
    retry_at: float  # monotonic


# Fail (or mark) a row with a reason a person can act on: (row id, reason).
GiveUp = Callable[[int, str], None]


@dataclass
class Retries:
    """One reconciler's rows that are backing off (in memory: a restarted server tries
    every row again at once, which is what a restart is for)."""

    noun: str  # "training job", "cluster": what the log lines name
    policy: BackoffPolicy = BACKOFF
    # The reason a row is failed with after repeated faults.
    fault_reason: Callable[[BaseException], str] = repr
    entries: dict[int, Backoff] = field(default_factory=dict)
    # Rows failed (or marked) for an error that will not pass: not stepped again by this
    # server (a row that stays listed after it, a cluster that cannot be Failed from
    # InService, is tried again after a restart).
    given_up: set[int] = field(default_factory=set)

    def ready(self, row_id: int) -> bool:
        """Whether the row may be stepped now (it is not backing off or given up)."""
        if row_id in self.given_up:
            return False
        entry = self.entries.get(row_id)
        return entry is None or monotonic() >= entry.retry_at

    def succeeded(self, row_id: int) -> None:
        self.entries.pop(row_id, None)

    def keep(self, row_ids: Iterable[int]) -> None:
        """Forget rows that are no longer listed (ended, here or on another server)."""
        wanted = set(row_ids)
        self.entries = {k: v for k, v in self.entries.items() if k in wanted}
        self.given_up &= wanted

    def failed(self, row_id: int, exc: BaseException, give_up: GiveUp | None = None) -> bool:
        """A step of the row raised: back off, or give the row up (answers True) when the
        error will not pass and there is a way to fail the row."""
        failures = self.entries[row_id].failures + 1 if row_id in self.entries else 1
        kind = kind_of(exc)
        reason = None
        if kind is ErrorKind.PERMANENT:
            reason = str(exc)
        elif kind is ErrorKind.FAULT and failures >= self.policy.fault_tries:
            reason = self.fault_reason(exc)
        if reason is not None and give_up is not None:
            log.error("%s %s: %s; failing it", self.noun, row_id, reason)
            try:
                give_up(row_id, reason)
            except Exception:
                log.exception("%s %s: could not fail it either", self.noun, row_id)
            else:
                self.entries.pop(row_id, None)
                self.given_up.add(row_id)
                return True
        wait = self.policy.wait(failures)
        temporary = kind is ErrorKind.TEMPORARY
        how = "temporary" if temporary else f"try {failures} of {self.policy.fault_tries}"
        if give_up is None and not temporary:
            how = f"{kind.value}, try {failures}"
        log.warning(
            "%s %s: step failed (%s, %s); trying again in %.1f s",
            self.noun,
            row_id,
            how,
            exc,
            wait,
            exc_info=not temporary,
        )
        self.entries[row_id] = Backoff(failures, monotonic() + wait)
        return False

    def due(self) -> float | None:
        """Seconds until the first row backing off may be tried again."""
        if not self.entries:
            return None
        return max(0.0, min(b.retry_at for b in self.entries.values()) - monotonic())


class Skipped(enum.Enum):
    """A step that did nothing to its row."""

    REFUSED = "refused"  # another server holds the row's claim (or the row is gone)
    LOST = "lost"  # the claim ran out and was taken over: nothing was applied


Row = TypeVar("Row", bound=Claimed)
D = TypeVar("D")  # a decision
R = TypeVar("R")  # what acting on it found
T = TypeVar("T")  # what a step answers


class Steps(Generic[Row]):
    """Steps of one table's rows, each under a claim (see the module's docstring)."""

    def __init__(self, db: Database, table: type[Row], claimant: claims.Claimant) -> None:
        self.db = db
        self.table = table
        self.claimant = claimant

    def claim(self, row_id: int) -> str | None:
        """Claim the row in a short transaction of its own; its token, or None when
        another server holds it. Apart from deciding, so that a decision that books
        capacity can take the capacity lock before it locks the row."""
        token = claims.new_token()
        with self.db.session() as session:
            if claims.claim(session, self.table, row_id, self.claimant, token) is None:
                return None
        return token

    def held(
        self, session: Session, row_id: int, token: str, *, books: bool = False
    ) -> Row | None:
        """The row if its claim is still ours (locked until the transaction ends); with
        the capacity lock first where the transaction books or releases capacity."""
        if books:
            capacity.lock(session)
        return claims.held_row(session, self.table, row_id, token)

    def let_go(self, row_id: int, token: str) -> None:
        """Give a claim up after a step that failed (the next pass, here or elsewhere,
        retries); a database that fails here too leaves it to expire."""
        try:
            with self.db.session() as session:
                row = claims.held_row(session, self.table, row_id, token)
                if row is not None:
                    claims.release(row)
        except Exception:
            log.warning("claim on %s %s left to expire", self.table.__name__, row_id)

    def decide_only(
        self, row_id: int, decide: Callable[[Session, Row], T], *, books: bool = False
    ) -> T | Skipped:
        """A step with nothing to do outside the database (a plan's payment, a pool's
        expiry): claim, then decide and record in one transaction."""
        token = self.claim(row_id)
        if token is None:
            return Skipped.REFUSED
        try:
            with self.db.session() as session:
                row = self.held(session, row_id, token, books=books)
                if row is None:
                    return Skipped.LOST
                claims.release(row)
                return decide(session, row)
        except BaseException:
            self.let_go(row_id, token)
            raise

    def step(
        self,
        row_id: int,
        decide: Callable[[Session, Row], D | None],
        act: Callable[[D], R],
        record: Callable[[Session, Row, D, R], T],
        *,
        books: Callable[[D | None, R | None], bool] = lambda decision, result: False,
    ) -> T | Skipped | None:
        """Claim the row, decide (None: nothing to do, the claim given up at once), act
        with no session open, record. `books(decision, result)` says whether the
        deciding (result None) or recording transaction books or releases capacity."""
        token = self.claim(row_id)
        if token is None:
            return Skipped.REFUSED
        try:
            with self.db.session() as session:
                row = self.held(session, row_id, token, books=books(None, None))
                if row is None:
                    return Skipped.LOST
                decision = decide(session, row)
                if decision is None:
                    claims.release(row)
                    return None
            result = act(decision)
            with self.db.session() as session:
                row = self.held(session, row_id, token, books=books(decision, result))
                if row is None:
                    return Skipped.LOST  # taken over meanwhile: its new holder decides
                claims.release(row)
                return record(session, row, decision, result)
        except BaseException:
            self.let_go(row_id, token)
            raise
