"""The reconciler loop: one background thread that runs every reconciler in turn.

It wakes on a tick (real seconds), on a nudge (a handler recorded new intent), and
when the manual clock jumps. `sync()` lets an operator command wait until a whole
pass that started after it has finished, so `dockyard clock advance 2h` returns once
the world has caught up with the new time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger("dockyard.control")

Reconciler = tuple[str, Callable[[], object]]


class ControlLoop:
    def __init__(self, reconcilers: Sequence[Reconciler], interval_seconds: float = 1.0) -> None:
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

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval)
            self._wake.clear()
            with self._done:
                target = self._requested
            self.run_once()
            with self._done:
                self._completed = max(self._completed, target)
                self._done.notify_all()
