"""Where a benchmark's numbers are kept: bench/results/<name>.json (not committed)."""

from __future__ import annotations

import json
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
