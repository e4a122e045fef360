"""A benchmark's numbers: summarised (`stats`) and kept in bench/results/<name>.json
(not committed)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

RESULTS = Path(__file__).resolve().parent / "results"


def save(name: str, results: Any, console: Console) -> Path:
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"results: {path}")
    return path


def stats(seconds: list[float]) -> dict[str, float]:
    """p50, p99 and max of a list of durations, in milliseconds."""
    ordered = sorted(seconds)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }
