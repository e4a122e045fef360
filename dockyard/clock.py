"""The only source of "now" in dockyard.

Plans last up to 182 days and warm pools up to 28; nobody can test that against the
wall clock. Every read of the time goes through a Clock so that tests, demos and
operators can drive time by hand (`--clock manual` and `dockyard clock advance 2h`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

Listener = Callable[[datetime], None]


class Clock(Protocol):
    """What every part of dockyard may ask of time."""

    kind: str

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    def subscribe(self, listener: Listener) -> None:
        """Call `listener(now)` whenever time jumps (manual clocks only), so waiting work wakes."""
        ...


def utc(dt: datetime) -> datetime:
    """Normalise to aware UTC; naive datetimes are taken to be UTC already."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def wall_now() -> datetime:
    """The real time of day, whatever clock the server runs on.

    Only for facts about the outside world: a SigV4 signature is made with the
    client's real clock, so its skew is judged against ours, not the manual one.
    """
    return datetime.now(UTC)


def monotonic() -> float:
    """Seconds on a monotonic counter, for measuring durations (latency, timeouts)."""
    return time.perf_counter()


class RealClock:
    """The wall clock."""

    kind = "real"

    def now(self) -> datetime:
        return wall_now()

    def subscribe(self, listener: Listener) -> None:
        # The real clock never jumps; reconcilers poll it on their own tick.
        return None


class ClockError(ValueError):
    """A manual-clock request that cannot be honoured (e.g. moving time backwards)."""


class ManualClock:
    """Starts at a given instant and moves only when told to.

    Time never goes backwards: leases, ledgers and statuses were all computed
    against the instants already seen.
    """

    kind = "manual"

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start) if start is not None else wall_now()
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def now(self) -> datetime:
        return self._now

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ClockError(f"cannot advance by a negative duration ({delta})")
        with self._lock:
            self._now = self._now + delta
            now = self._now
        self._notify(now)
        return now

    def set(self, instant: datetime) -> datetime:
        instant = utc(instant)
        with self._lock:
            if instant < self._now:
                raise ClockError(
                    f"cannot set the clock back from {self._now.isoformat()} "
                    f"to {instant.isoformat()}"
                )
            self._now = instant
        self._notify(instant)
        return instant

    def _notify(self, now: datetime) -> None:
        for listener in list(self._listeners):
            listener(now)


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(w|d|h|m|s)", re.IGNORECASE)
_UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """Parse "2h", "90m", "1d12h", "30s", "1w" or a bare number of seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return timedelta(seconds=float(text))
    pos = 0
    total = 0.0
    for match in _DURATION_PART.finditer(text):
        if text[pos : match.start()].strip():
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]
        pos = match.end()
    if pos == 0 or text[pos:].strip():
        raise ClockError(f"cannot read {text!r} as a duration; use e.g. 30s, 90m, 2h, 1d12h or 1w")
    return timedelta(seconds=total)


def parse_instant(text: str) -> datetime:
    """Parse an ISO 8601 instant (without an offset it is taken as UTC), or seconds since
    the epoch, which is how the aws CLI v1 prints the SageMaker API's timestamps."""
    text = text.strip()
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ClockError(
            f"cannot read {text!r} as an ISO 8601 instant or seconds since the epoch"
        ) from exc
    return utc(value)


def make_clock(kind: str, start: datetime | None = None) -> Clock:
    if kind == "real":
        return RealClock()
    if kind == "manual":
        return ManualClock(start)
    raise ClockError(f"unknown clock {kind!r}; choose real or manual")
