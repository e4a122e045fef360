"""Training metrics scraped from a job's log lines, as SageMaker does with MetricDefinitions.

SageMaker applies each definition's regex to every line the job prints and reports the
last value it found (FinalMetricDataList). dockyard keeps no metric store: the log files
are the record, so the final values are computed from them when a finished job is
described. This module is pure (lines in, values out) so the rules are easy to test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def compile_definitions(
    definitions: Sequence[Mapping[str, Any]],
) -> list[tuple[str, re.Pattern[str]]]:
    """(name, pattern) for each usable definition.

    SageMaker's regexes are Java's; Python's `re` reads the common subset the same way.
    A regex Python cannot compile is skipped rather than failing the Describe it feeds.
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


def final_metrics(
    definitions: Sequence[Mapping[str, Any]], events: Iterable[tuple[int, str]]
) -> list[dict[str, Any]]:
    """FinalMetricDataList for (epoch ms, line) events in time order.

    Each metric's value is the last match's first group (the whole match when the regex
    has no group), parsed as a float; its Timestamp is that line's. Metrics that never
    matched are left out, in the definitions' order otherwise.
    """
    compiled = compile_definitions(definitions)
    latest: dict[str, tuple[float, int]] = {}
    if not compiled:
        return []
    for timestamp, message in events:
        for name, pattern in compiled:
            match = pattern.search(message)
            if match is None:
                continue
            value = _value(match)
            if value is not None:
                latest[name] = (value, timestamp)
    return [
        {
            "MetricName": name,
            "Value": latest[name][0],
            "Timestamp": datetime.fromtimestamp(latest[name][1] / 1000, UTC),
        }
        for name in dict.fromkeys(name for name, _ in compiled)
        if name in latest
    ]
