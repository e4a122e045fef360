"""The reconciler loop: one background thread that runs every reconciler in turn.

It wakes on a nudge (a handler recorded new intent, an agent reported a change), when
the manual clock jumps, and when the nearest deadline a reconciler named comes (a warm
pool's end, a plan block's start, a queued job's capacity freeing, a running job's next
look; `due()`). The tick (`reconcile_interval_seconds`) is only a safety net.
`sync()` lets an operator command wait until a whole pass that started after it has
finished, so `dockyard clock advance 2h` returns once the world has caught up with the
new time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from dockyard.clock import Clock

log = logging.getLogger("dockyard.control")

Reconciler = tuple[str, Callable[[], object]]
# The least wait between two passes that only deadlines asked for.
DEADLINE_FLOOR_SECONDS = 0.05


def seconds_until(clock: Clock, moments: Iterable[datetime | None]) -> float | None:
    """Seconds until the first of these instants of the control plane's clock, for a
    reconciler's `due()`; None when there is none, or when the clock is manual (its
    time moves only by jumps, and each jump wakes the loop)."""
    if clock.kind == "manual":
        return None
    found = [moment for moment in moments if moment is not None]
    if not found:
        return None
    return max(0.0, (min(found) - clock.now()).total_seconds())


def _due(reconcile: Callable[[], object]) -> float | None:
    """When a reconciler wants its next pass (seconds), if it says."""
    due = getattr(reconcile, "due", None)
    if due is None:
        return None
    try:
        seconds = due()
    except Exception:
        log.exception("a reconciler's next deadline could not be read")
        return None
    return None if seconds is None else float(seconds)


class ControlLoop:
    def __init__(self, reconcilers: Sequence[Reconciler], interval_seconds: float = 10.0) -> None:
        self._reconcilers = list(reconcilers)
        self._interval = interval_seconds
        self._wake = threading.Event()
        self._done = threading.Condition()
        self._requested = 0
        self._completed = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Reconcilers a nudge asked for: they go first in the next pass, so a new job's
        # latency does not include every other reconciler's pass.
        self._urgent: set[str] = set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dockyard-control", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def nudge(self, first: str | None = None) -> None:
        if first is not None:
            self._urgent.add(first)
        self._wake.set()

    def sync(self, timeout: float = 60.0) -> bool:
        """Request a pass and wait for it; False if it did not finish in time."""
        with self._done:
            self._requested += 1
            target = self._requested
        self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._completed >= target, timeout=timeout)

    def run_once(self) -> None:
        urgent, self._urgent = self._urgent, set()
        ordered = sorted(self._reconcilers, key=lambda item: item[0] not in urgent)
        for name, reconcile in ordered:
            try:
                reconcile()
            except Exception:  # one failing reconciler must not stop the others
                log.exception("reconciler %s failed; it runs again on the next pass", name)

    def _timeout(self) -> float:
        """Until the nearest deadline any reconciler named, the tick at the latest."""
        wanted = [_due(reconcile) for _, reconcile in self._reconcilers]
        return min([self._interval, *(seconds for seconds in wanted if seconds is not None)])

    def _run(self) -> None:
        timeout = 0.0  # the first pass at once
        while not self._stopping:
            self._wake.wait(timeout)
            self._wake.clear()
            with self._done:
                target = self._requested
            self.run_once()
            with self._done:
                self._completed = max(self._completed, target)
                self._done.notify_all()
            # Deadlines that keep coming due at once (instances being let go) do not
            # spin the loop; a nudge still wakes it at once.
            timeout = max(self._timeout(), DEADLINE_FLOOR_SECONDS)
