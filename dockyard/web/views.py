"""What the console's pages draw, worked out from plain values: durations in words,
bars on a time axis (plans' blocks, the fleet's leases), a metric's line. No I/O and no
clock reads: "now" is passed in, so the pictures are tested as functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


def duration(seconds: float | None) -> str:
    """`1d 2h`, `3h 05m`, `4m 09s`, `7s`."""
    if seconds is None:
        return "-"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@dataclass(frozen=True)
class Bar:
    """One bar on a time axis, in percent of the axis' width."""

    row: str
    label: str
    left: float
    width: float
    kind: str  # a CSS class: what the bar stands for
    title: str  # its full description (a tooltip, and what a screen reader says)


@dataclass(frozen=True)
class Axis:
    start: datetime
    end: datetime
    now: float | None  # "now" in percent, when it is on the axis
    ticks: list[tuple[float, str]]

    def at(self, moment: datetime) -> float:
        span = (self.end - self.start).total_seconds() or 1.0
        return max(0.0, min(100.0, (moment - self.start).total_seconds() / span * 100))


def axis(start: datetime, end: datetime, now: datetime, ticks: int = 6) -> Axis:
    """A time axis from start to end, with evenly spaced dated ticks and "now" on it."""
    if end <= start:
        end = start + timedelta(hours=1)
    span = end - start
    shown = "%m-%d %H:%M" if span < timedelta(days=8) else "%m-%d"
    marks = [
        (i / ticks * 100, (start + span * i / ticks).strftime(shown)) for i in range(ticks + 1)
    ]
    base = Axis(start, end, None, marks)
    where = base.at(now) if start <= now <= end else None
    return Axis(start, end, where, marks)


def bars(
    axis_: Axis,
    spans: Sequence[tuple[str, str, datetime, datetime, str, str]],
) -> list[Bar]:
    """(row, label, start, end, kind, title) spans as bars on the axis; spans wholly off
    it are left out, and a bar is at least a sliver wide so a short one still shows."""
    found = []
    for row, label, start, end, kind, title in spans:
        if end <= axis_.start or start >= axis_.end:
            continue
        left = axis_.at(start)
        width = max(0.6, axis_.at(end) - left)
        found.append(Bar(row, label, left, width, kind, title))
    return found


@dataclass(frozen=True)
class Chart:
    name: str
    points: str  # an SVG polyline's points, in a 0..100 x 0..40 box
    low: float
    high: float
    last: float
    count: int


def chart(name: str, values: Sequence[tuple[int, float]]) -> Chart | None:
    """A metric's values over time as one line, scaled to fill its box."""
    if not values:
        return None
    times = [t for t, _ in values]
    numbers = [v for _, v in values]
    t0, t1 = min(times), max(times)
    low, high = min(numbers), max(numbers)
    width = (t1 - t0) or 1
    height = (high - low) or 1.0
    if len(values) == 1:
        points = "0,20 100,20"
    else:
        points = " ".join(
            f"{(t - t0) / width * 100:.2f},{38 - (v - low) / height * 36:.2f}" for t, v in values
        )
    return Chart(name, points, low, high, numbers[-1], len(values))
