"""Training metrics scraped from a job's log lines, as SageMaker does with MetricDefinitions.

SageMaker applies each definition's regex to every line the job prints and reports the
last value it found (FinalMetricDataList). Each instance's agent scrapes its own lines
as they are written (`Scraper`) and keeps the latest value of each metric; describing
a finished job merges the instances' latest values (`final_metrics_of`), so a Describe
costs the same whatever the size of the log. This module is pure (lines in, values
out) so the rules are easy to test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

# name -> (value, epoch ms of the line it came from)
Latest = dict[str, tuple[float, int]]


def compile_definitions(
    definitions: Sequence[Mapping[str, Any]],
) -> list[tuple[str, re.Pattern[str]]]:
    """(name, pattern) for each usable definition.

    SageMaker's regexes are Java's; Python's `re` reads the common subset the same way.
    A regex Python cannot compile is skipped rather than failing the job it watches.
    """
    compiled = []
    for definition in definitions:
        try:
            compiled.append((str(definition["Name"]), re.compile(str(definition["Regex"]))))
        except (re.error, KeyError, TypeError):
            continue
    return compiled


def _value(match: re.Match[str]) -> float | None:
    text = match.group(1) if match.re.groups else match.group(0)
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    # NaN and infinities have no JSON form; SageMaker drops them too.
    return value if math.isfinite(value) else None


class Scraper:
    """The latest value of each metric over lines fed in time order."""

    def __init__(self, definitions: Sequence[Mapping[str, Any]]) -> None:
        self.patterns = compile_definitions(definitions)
        self.latest: Latest = {}

    def feed(self, timestamp: int, message: str) -> bool:
        """Scrape one line; True when a metric's value changed."""
        changed = False
        for name, pattern in self.patterns:
            match = pattern.search(message)
            if match is None:
                continue
            value = _value(match)
            if value is not None:
                self.latest[name] = (value, timestamp)
                changed = True
        return changed


def final_metrics_of(
    definitions: Sequence[Mapping[str, Any]], instances: Iterable[Latest]
) -> list[dict[str, Any]]:
    """FinalMetricDataList from each instance's latest values (algo-1 first).

    Each metric's value is the one of the latest line that matched, on any instance (on
    a tie, the later instance's, as if their lines were merged in time order); its
    Timestamp is that line's. Metrics that never matched are left out, in the
    definitions' order otherwise.
    """
    latest: dict[str, tuple[int, int, float]] = {}
    for order, values in enumerate(instances):
        for name, (value, timestamp) in values.items():
            candidate = (timestamp, order, value)
            if name not in latest or candidate[:2] >= latest[name][:2]:
                latest[name] = candidate
    return [
        {
            "MetricName": name,
            "Value": latest[name][2],
            "Timestamp": datetime.fromtimestamp(latest[name][0] / 1000, UTC),
        }
        for name in dict.fromkeys(name for name, _ in compile_definitions(definitions))
        if name in latest
    ]


def final_metrics(
    definitions: Sequence[Mapping[str, Any]], events: Iterable[tuple[int, str]]
) -> list[dict[str, Any]]:
    """FinalMetricDataList for one stream of (epoch ms, line) events in time order."""
    scraper = Scraper(definitions)
    for timestamp, message in events:
        scraper.feed(timestamp, message)
    return final_metrics_of(definitions, [scraper.latest])


def series(
    definitions: Sequence[Mapping[str, Any]], events: Iterable[tuple[int, str]]
) -> dict[str, list[tuple[int, float]]]:
    """Every value of each metric over log lines (epoch ms, message) in time order: what
    SageMaker's console charts from a job's MetricDefinitions."""
    patterns = compile_definitions(definitions)
    found: dict[str, list[tuple[int, float]]] = {name: [] for name, _ in patterns}
    for timestamp, message in events:
        for name, pattern in patterns:
            match = pattern.search(message)
            value = _value(match) if match is not None else None
            if value is not None:
                found[name].append((timestamp, value))
    return found
