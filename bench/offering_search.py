"""SearchTrainingPlanOfferings' search: `offerings.search` against `reference_search`.

The issue's goals: one search on a fleet of 10,000 instances (10 instance types x 20 AZs x
50 instances) holding 50,000 leases over the 238-day horizon (56 days to the latest first
start + 182 days of plan) answers in under 10 ms at p99, and at least 20x faster than the
straightforward reference implementation, measured in the same run on the same requests.

The fleet and the requests are random but seeded, so every run measures the same work.
Leases start anywhere in [now, now + 238 days), last 1 hour to 30 days and hold a random
count that fits (1 to 4, at most what is free over the interval); one whose pool is full
at some instant of it is skipped (the report says how many were placed). Requests draw
an instance type, a count from INSTANCE_COUNTS (64 never fits a 50-instance pool), 1 to
60 days, a target, and sometimes a StartTimeAfter / EndTimeBefore window; `now` moves
within a day so that t0 falls at every time of day.

`search` is timed twice per request: with cold tables (every memoised per-pool table
dropped first: a calendar loaded fresh for the search, the services' way today) and
with warm ones (a long-lived calendar, unchanged since the last search). The reference
keeps nothing between searches, so it has one timing. The goals are judged on the cold
numbers. On the requests the reference answers, both must return the same offerings.
This is a report, not a test: it never fails on timing (see `--strict` in bench/__main__.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dockyard.domain.calendar import Calendar, Lease, Pool
from dockyard.domain.offerings import (
    INSTANCE_COUNTS,
    TARGETS,
    Offering,
    OfferingRequest,
    OfferingRuleError,
    check_request,
    reference_search,
    search,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS_FILE = Path(__file__).resolve().parent / "results" / "offering_search.json"

GOAL_P99_MS = 10.0
GOAL_SPEEDUP = 20.0
SEED = 20261201
NOW = datetime(2026, 12, 1, 9, 17, tzinfo=UTC)
HORIZON = timedelta(days=56 + 182)
ZONES = tuple(
    f"{region}{letter}"
    for region, letters in (
        ("us-east-1", "abcdef"),
        ("us-east-2", "abc"),
        ("us-west-2", "abcd"),
        ("eu-west-1", "abc"),
        ("eu-central-1", "abc"),
        ("ap-northeast-1", "a"),
    )
    for letter in letters
)
INSTANCES_PER_POOL = 50
LEASES = 50_000
MAX_LEASE_COUNT = 4
ULTRASERVER_ONLY = "ml.p6e-gb200.36xlarge"  # sold as UltraServers, not by the instance


@dataclass(frozen=True)
class Config:
    searches: int
    reference_searches: int
    reference_budget_s: float  # stop timing the reference once it has used this much

    @classmethod
    def for_run(cls, quick: bool) -> Config:
        if quick:
            return cls(searches=300, reference_searches=25, reference_budget_s=6.0)
        return cls(searches=2000, reference_searches=100, reference_budget_s=30.0)


def instance_types() -> list[str]:
    """SageMaker's ReservedCapacityInstanceType values, read from the botocore model."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    names = model.shape_for("ReservedCapacityInstanceType").enum
    return [name for name in names if name != ULTRASERVER_ONLY]


def build_fleet(rng: random.Random, types: list[str]) -> tuple[Calendar, dict[str, Any]]:
    started = time.perf_counter()
    calendar = Calendar()
    for instance_type in types:
        for zone in ZONES:
            pool = Pool(f"{instance_type}@{zone}", instance_type, zone, INSTANCES_PER_POOL)
            calendar.add_pool(pool)
    pools = calendar.pools()
    horizon_s = int(HORIZON.total_seconds())
    placed = 0
    for _ in range(LEASES):
        pool_calendar = calendar[rng.choice(pools).key]
        start = NOW + timedelta(seconds=rng.randrange(horizon_s))
        end = start + timedelta(seconds=rng.randint(3600, 30 * 86400))
        free = INSTANCES_PER_POOL - pool_calendar.max_usage(start, end)
        if free < 1:
            continue  # the pool is full somewhere in that interval
        pool_calendar.add(Lease(start, end, rng.randint(1, min(MAX_LEASE_COUNT, free))))
        placed += 1
    return calendar, {
        "instance_types": len(types),
        "zones": len(ZONES),
        "instances": len(pools) * INSTANCES_PER_POOL,
        "leases_tried": LEASES,
        "leases_placed": placed,
        "horizon_days": HORIZON.days,
        "build_s": round(time.perf_counter() - started, 3),
    }


def random_requests(rng: random.Random, types: list[str], count: int) -> list[OfferingRequest]:
    requests: list[OfferingRequest] = []
    while len(requests) < count:
        now = NOW + timedelta(minutes=rng.randrange(24 * 60))
        days = rng.randint(1, 60)
        start_after = end_before = None
        if rng.random() < 0.3:
            start_after = now + timedelta(minutes=rng.randrange(56 * 24 * 60))
            if rng.random() < 0.5:
                end_before = start_after + timedelta(days=days + 2 + rng.randint(0, 30))
        request = OfferingRequest(
            now=now,
            duration_hours=24 * days,
            target=rng.choice(TARGETS),
            instance_type=rng.choice(types),
            instance_count=rng.choice(INSTANCE_COUNTS),
            start_after=start_after,
            end_before=end_before,
        )
        try:
            check_request(request)
        except OfferingRuleError:
            continue
        requests.append(request)
    return requests


def _stats(seconds: list[float]) -> dict[str, Any]:
    ordered = sorted(seconds)
    return {
        "requests": len(seconds),
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        "max_ms": ordered[-1] * 1e3,
    }


def _shape(offerings: list[Offering]) -> str:
    if not offerings:
        return "nothing fits"
    if not offerings[0].is_split:
        return "contiguous first"
    return "splits only"


def run_benchmark(config: Config) -> dict[str, Any]:
    started = time.perf_counter()
    rng = random.Random(SEED)
    types = instance_types()
    calendar, fleet = build_fleet(rng, types)
    requests = random_requests(rng, types, config.searches)

    cold: list[float] = []
    answers: list[list[Offering]] = []
    gc.collect()
    for request in requests:
        calendar.drop_derived()
        begin = time.perf_counter()
        answers.append(search(calendar, request))
        cold.append(time.perf_counter() - begin)
    for request in requests:  # fill every table once, untimed
        search(calendar, request)
    warm: list[float] = []
    gc.collect()
    for request in requests:
        begin = time.perf_counter()
        search(calendar, request)
        warm.append(time.perf_counter() - begin)

    reference: list[float] = []
    mismatches: list[int] = []
    spent = 0.0
    for index, request in enumerate(requests[: config.reference_searches]):
        if spent >= config.reference_budget_s:
            break
        begin = time.perf_counter()
        expected = reference_search(calendar, request)
        elapsed = time.perf_counter() - begin
        reference.append(elapsed)
        spent += elapsed
        if expected != answers[index]:
            mismatches.append(index)
    compared = len(reference)

    by_answer: dict[str, dict[str, Any]] = {}
    for shape in sorted({_shape(answers[index]) for index in range(compared)}):
        chosen = [index for index in range(compared) if _shape(answers[index]) == shape]
        ours = statistics.median(cold[index] for index in chosen)
        theirs = statistics.median(reference[index] for index in chosen)
        by_answer[shape] = {
            "requests": len(chosen),
            "reference_p50_ms": theirs * 1e3,
            "search_cold_p50_ms": ours * 1e3,
            "speedup": theirs / ours,
        }
    search_cold, search_warm = _stats(cold), _stats(warm)
    same_cold, same_warm = _stats(cold[:compared]), _stats(warm[:compared])
    baseline = _stats(reference)
    speedup_cold = baseline["p50_ms"] / same_cold["p50_ms"]
    speedup_warm = baseline["p50_ms"] / same_warm["p50_ms"]
    p99_met = search_cold["p99_ms"] < GOAL_P99_MS
    speedup_met = speedup_cold >= GOAL_SPEEDUP
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "benchmark": "offering_search",
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": asdict(config) | {"seed": SEED},
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_1m_after": load,
        },
        "fleet": fleet,
        "answers": dict(Counter(_shape(found) for found in answers)),
        "search_cold": search_cold,
        "search_warm": search_warm,
        "reference": baseline,
        "search_cold_same_requests": same_cold,
        "search_warm_same_requests": same_warm,
        "compared": compared,
        "mismatches": mismatches,
        "by_answer": by_answer,
        "total_time_ratio_cold": sum(reference) / sum(cold[:compared]),
        "speedup_cold": speedup_cold,
        "speedup_warm": speedup_warm,
        "goals": {
            "search_p99_ms_below": GOAL_P99_MS,
            "speedup_at_least": GOAL_SPEEDUP,
            "p99_met": p99_met,
            "speedup_met": speedup_met,
        },
        "goal_met": p99_met and speedup_met and not mismatches,
        "total_s": round(time.perf_counter() - started, 1),
    }


def report(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    fleet = results["fleet"]
    table = Table(
        title=(
            f"Offering search: {fleet['instances']:,} instances "
            f"({fleet['instance_types']} types x {fleet['zones']} AZs), "
            f"{fleet['leases_placed']:,} leases over {fleet['horizon_days']} days"
        )
    )
    table.add_column("implementation", no_wrap=True)
    table.add_column("requests", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("max ms", justify="right")
    table.add_column("ref p50 / p50", justify="right")
    rows = [
        ("search, cold tables", results["search_cold"], results["speedup_cold"]),
        ("search, warm tables", results["search_warm"], results["speedup_warm"]),
        ("reference_search", results["reference"], None),
    ]
    for label, stats, speedup in rows:
        table.add_row(
            label,
            str(stats["requests"]),
            f"{stats['p50_ms']:.2f}",
            f"{stats['p99_ms']:.2f}",
            f"{stats['max_ms']:.2f}",
            "-" if speedup is None else f"{speedup:.0f}x",
        )
    console.print(table)
    kinds = Table(title="Cold search against the reference, by answer (same requests)")
    kinds.add_column("answer", no_wrap=True)
    kinds.add_column("requests", justify="right")
    kinds.add_column("reference p50 ms", justify="right")
    kinds.add_column("search p50 ms", justify="right")
    kinds.add_column("ratio", justify="right")
    for shape, row in results["by_answer"].items():
        kinds.add_row(
            shape,
            str(row["requests"]),
            f"{row['reference_p50_ms']:.2f}",
            f"{row['search_cold_p50_ms']:.3f}",
            f"{row['speedup']:.0f}x",
        )
    kinds.add_row(
        "all (total time)",
        str(results["compared"]),
        "",
        "",
        f"{results['total_time_ratio_cold']:.0f}x",
    )
    console.print(kinds)
    compared = results["compared"]
    same = results["search_cold_same_requests"]
    console.print(
        f"Speedups compare p50s on the {compared} requests the reference answered "
        f"(search cold p50 there: {same['p50_ms']:.2f} ms). Answers: "
        + ", ".join(f"{n} {shape}" for shape, n in sorted(results["answers"].items()))
        + f". {fleet['leases_placed']:,} of {fleet['leases_tried']:,} leases placed "
        f"(the rest would have over-booked), built in {fleet['build_s']:.1f} s."
    )
    if results["mismatches"]:
        console.print(
            f"[bold red]search and reference_search DISAGREE on requests "
            f"{results['mismatches']}[/]"
        )
    else:
        console.print(f"search and reference_search agree on all {compared} requests compared")
    goals = results["goals"]
    verdicts = [
        (goals["p99_met"], f"search p99 (cold) < {GOAL_P99_MS:g} ms"),
        (goals["speedup_met"], f"search >= {GOAL_SPEEDUP:g}x the reference (cold, p50)"),
    ]
    for met, goal in verdicts:
        style = "bold green" if met else "bold red"
        console.print(f"[{style}]goal {'met' if met else 'NOT met'}: {goal}[/]")
    console.print(f"results: {RESULTS_FILE.relative_to(ROOT)} ({results['total_s']} s)")


def run(quick: bool = False, config: Config | None = None) -> bool:
    """Measure, print the table, write the JSON; True when both goals were met."""
    results = run_benchmark(config or Config.for_run(quick))
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(json.dumps(results, indent=2) + "\n")
    report(results)
    return bool(results["goal_met"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 searches, 25 reference ones")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
