"""SearchTrainingPlanOfferings through the API, as a user sees it (issue 13).

A server with a fleet of ~10,000 instances (10 instance types x 6 AZs of us-east-1 x
160) and ~47,000 leases over the offering horizon, written into its database; then
random searches through boto3 (the whole round trip: signing, HTTP, validation, the
search, the offerings stored for purchase, the response). The server keeps the
calendar in memory and reloads only pools whose version moved
(`services.capacity.CalendarCache`).

The baseline, measured in the same run on the same database, is what each request
cost before: the calendar loaded from the database for the search (in-process, no
HTTP), then searched. Goal: p99 through the API < 10 ms.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.live import live_server
from bench.offering_search import instance_types
from bench.saved import save, stats

SEED = 20261202
ZONES = [f"us-east-1{letter}" for letter in "abcdef"]
PER_POOL = 160
LEASES = 47_000
GOAL_P99_MS = 10.0


def _config(path: Path, types: list[str]) -> None:
    lines = []
    for instance_type in types:
        for zone in ZONES:
            lines += [
                "[[fleet]]",
                f'instance_type = "{instance_type}"',
                f'availability_zone = "{zone}"',
                f"count = {PER_POOL}",
                "",
            ]
    lines.append("[prices]")
    lines += [f'"{instance_type}" = 10.0' for instance_type in types]
    path.write_text("\n".join(lines) + "\n")


def _seed_leases(database_url: str, rng: random.Random, now: datetime) -> int:
    """Random leases, each admitted only where it fits (as a booking would be)."""
    from dockyard.domain.calendar import Lease
    from dockyard.services import capacity
    from dockyard.store.db import Database

    db = Database(database_url)
    placed = 0
    try:
        with db.session() as session:
            calendar = capacity.load_calendar(session, now, region="us-east-1")
            pools = [pool.pool.key for pool in calendar]
            horizon = int(timedelta(days=56 + 182).total_seconds())
            capacity.lock(session)
            for index in range(LEASES):
                key = rng.choice(pools)
                start = now + timedelta(seconds=rng.randrange(horizon))
                end = start + timedelta(seconds=rng.randint(3600, 30 * 86400))
                free = PER_POOL - calendar[key].max_usage(start, end)
                if free < 1:
                    continue
                count = rng.randint(1, min(4, free))
                # Checked against the calendar kept in step with every lease written.
                capacity.reserve(
                    session,
                    [(key, count)],
                    start,
                    end,
                    kind="bench",
                    holder=f"bench-{index}",
                    account_id=None,
                    calendar=calendar,
                )
                calendar[key].add(Lease(start, end, count))
                placed += 1
    finally:
        db.dispose()
    return placed


def _requests(rng: random.Random, types: list[str], count: int) -> list[dict[str, Any]]:
    requests = []
    for _ in range(count):
        request: dict[str, Any] = {
            "InstanceType": rng.choice(types),
            "InstanceCount": rng.choice([1, 2, 4, 8, 16, 32]),
            "DurationHours": 24 * rng.randint(1, 60),
            "TargetResources": ["training-job"],
        }
        requests.append(request)
    return requests


def _baseline(database_url: str, requests: list[dict[str, Any]], now: datetime) -> list[float]:
    """Each search as the server made it before: a fresh calendar from the database."""
    from dockyard.domain import offerings as rules
    from dockyard.services import capacity
    from dockyard.services.offerings import _request
    from dockyard.store.db import Database

    db = Database(database_url)
    seconds = []
    try:
        for params in requests:
            started = time.perf_counter()
            with db.read_session() as session:
                calendar = capacity.load_calendar(
                    session, now, region="us-east-1", instance_type=params["InstanceType"]
                )
                rules.search(calendar, _request(params, now))
            seconds.append(time.perf_counter() - started)
    finally:
        db.dispose()
    return seconds


def run_benchmark(quick: bool) -> dict[str, Any]:
    searches = 200 if quick else 1000
    rng = random.Random(SEED)
    types = instance_types()[:10]
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        config = Path(tmp) / "dockyard.toml"
        _config(config, types)
        database_url = f"sqlite:///{(data_dir / 'dockyard.db').resolve()}"
        with live_server(data_dir, "--config", str(config)):
            pass  # the first start makes the database and the fleet
        now = datetime.now(UTC)
        leases = _seed_leases(database_url, rng, now)
        requests = _requests(rng, types, searches)
        with live_server(data_dir, "--config", str(config)) as live:
            client = live.client()
            for params in requests[:20]:  # the calendar into memory, boto3 warmed up
                client.search_training_plan_offerings(**params)
            api = []
            for params in requests:
                started = time.perf_counter()
                client.search_training_plan_offerings(**params)
                api.append(time.perf_counter() - started)
        baseline = _baseline(database_url, requests[: max(20, searches // 5)], datetime.now(UTC))
    return {
        "instances": len(types) * len(ZONES) * PER_POOL,
        "leases": leases,
        "api": stats(api),
        "baseline": stats(baseline),
    }


def report(results: dict[str, Any]) -> bool:
    console = Console()
    table = Table(
        title=f"SearchTrainingPlanOfferings, {results['instances']:,} instances, "
        f"{results['leases']:,} leases"
    )
    table.add_column("search")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("max ms", justify="right")
    for label, key in (
        ("through the API (boto3 -> response), calendar in memory", "api"),
        ("calendar loaded per search, in-process (before)", "baseline"),
    ):
        stats = results[key]
        table.add_row(
            label, f"{stats['p50_ms']:.1f}", f"{stats['p99_ms']:.1f}", f"{stats['max_ms']:.1f}"
        )
    console.print(table)
    met = results["api"]["p99_ms"] < GOAL_P99_MS
    console.print(
        f"p99 through the API < {GOAL_P99_MS:.0f} ms: {'met' if met else 'missed'} "
        f"({results['api']['p99_ms']:.1f} ms)"
    )
    save("offering_api", results, console)
    return met


def run(quick: bool = False) -> bool:
    return report(run_benchmark(quick))


if __name__ == "__main__":
    sys.exit(0 if run(quick="--quick" in sys.argv) else 1)
