"""Training metrics scraped from a job's log lines, as SageMaker does with MetricDefinitions.

SageMaker applies each definition's regex to every line the job prints and reports the
last value it found (FinalMetricDataList). Each instance's agent scrapes its own lines
as they are written (`Scraper`) and keeps the latest value of each metric; describing
a finished job merges the instances' latest values (`final_metrics_of`), so a Describe
costs the same whatever the size of the log. This module is pure (lines in, values
out) so the rules are easy to test.

The regexes are a tenant's, run by a root agent outside the job's cgroup and by the
server (the console's charts), so they run in RE2, whose matching takes time linear in
the text, never in Python's backtracking `re` (`(a+)+$` on forty `a`s and a `!` is 2^40
steps there). RE2 reads the syntax SageMaker users write (`loss=([0-9\\.]+)`, `\\d`,
`(?P<name>...)`, `(?i)`) and refuses what only a backtracking engine can do (lookarounds,
backreferences, possessive quantifiers, atomic groups): `definition_problems` says so at
CreateTrainingJob. Linear is not cheap enough on its own - a matching step costs up to
the size of the regex's program - so each regex's program, its memory and the part of a
line it reads are bounded as well (numbers below; docs/security.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import re2

# name -> (value, epoch ms of the line it came from)
Latest = dict[str, tuple[float, int]]

# The part of each line the regexes read: metric lines are short (a Hugging Face logging
# dict is ~100 bytes, an evaluation summary of many metrics well under 1 KiB); past 4 KiB
# is a progress bar or a dump, not a metric. It bounds a line's cost: 40 definitions of
# the crafted worst kind we found cost ~0.2 s on a 4 KiB line, realistic ones ~0.5 ms.
SCRAPED_BYTES = 4 * 1024
# RE2's memory for one regex (its compiled program and its DFA's cache; past that RE2
# falls back to a slower but still linear matcher): 40 definitions stay under 10 MiB.
REGEX_MAX_MEM = 256 * 1024
# The largest program (RE2 instructions) a definition may compile to. Matching can cost
# a step per instruction per byte; the SDK's and the docs' regexes are under 100.
MAX_PROGRAM_SIZE = 1000


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = REGEX_MAX_MEM
    options.log_errors = False  # a refused regex is the tenant's; its reason is returned
    return options


_OPTIONS = _options()


def _compile(regex: str) -> tuple[Any, str | None]:
    """(the RE2 regex, None), or (None, why it cannot be run, in a person's words)."""
    try:
        compiled = re2.compile(regex, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else b""
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        if "too large" in reason:
            return None, (
                f"is too costly to run on every line: RE2 cannot compile it in "
                f"{REGEX_MAX_MEM // 1024} KiB (use fewer or smaller repetitions)"
            )
        shown = reason if len(reason) <= 80 else reason[:77] + "..."
        return None, (
            f"is not RE2 syntax ({shown or 'it does not compile'}): metric regexes run in RE2, "
            "which has no lookarounds, backreferences, possessive quantifiers or atomic groups "
            "(https://github.com/google/re2/wiki/Syntax)"
        )
    except (TypeError, UnicodeError):
        return None, "is not text RE2 can read"
    if compiled.programsize > MAX_PROGRAM_SIZE:
        return None, (
            f"is too costly to run on every line: it compiles to {compiled.programsize} RE2 "
            f"instructions, at most {MAX_PROGRAM_SIZE} (use fewer or smaller repetitions)"
        )
    return compiled, None


def regex_problem(regex: str) -> str | None:
    """Why a metric's regex cannot be run; None when it can."""
    return _compile(regex)[1]


def definition_problems(definitions: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each definition whose regex cannot be run, named by its index and metric name."""
    found = []
    for index, definition in enumerate(definitions):
        problem = regex_problem(str(definition.get("Regex", "")))
        if problem is not None:
            name = str(definition.get("Name", ""))
            found.append(
                f"AlgorithmSpecification.MetricDefinitions[{index}] ({name!r}): Regex {problem}"
            )
    return found


def compile_definitions(definitions: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """(name, RE2 regex) for each usable definition.

    One RE2 cannot run (a job created before it was checked) is skipped rather than
    failing the job it watches.
    """
    compiled = []
    for definition in definitions:
        try:
            name, regex = str(definition["Name"]), str(definition["Regex"])
        except (KeyError, TypeError):
            continue
        pattern, _ = _compile(regex)
        if pattern is not None:
            compiled.append((name, pattern))
    return compiled


def _scrape(patterns: Sequence[tuple[str, Any]], message: str) -> Iterator[tuple[str, float]]:
    """(name, value) of each metric the line gives a value for."""
    if not patterns:
        return
    # Encoded once for every regex, and only the part they read (a character is at
    # least a byte, so no more characters than that are encoded).
    text = message[:SCRAPED_BYTES].encode("utf-8", "surrogatepass")[:SCRAPED_BYTES]
    for name, pattern in patterns:
        match = pattern.search(text)
        if match is None:
            continue
        value = _value(match.group(1) if pattern.groups else match.group(0))
        if value is not None:
            yield name, value


def _value(found: bytes | None) -> float | None:
    if found is None:
        return None
    try:
        value = float(found.decode(errors="replace").strip())
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
        for name, value in _scrape(self.patterns, message):
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
        for name, value in _scrape(patterns, message):
            found[name].append((timestamp, value))
    return found
