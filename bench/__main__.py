"""`python -m bench` (what `make bench` runs): every benchmark in bench/, one report each.

Benchmarks report numbers; they do not fail on them. The exit status is 1 only when a
benchmark could not measure at all (a server would not start, the load client broke),
or, with `--strict`, when a benchmark's goal was missed or a request failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import (
    api_throughput,
    big_log,
    cold_start,
    offering_api,
    offering_search,
    ray_warm,
    restart,
    scale,
)

# name -> run(quick) -> goal met (and no failed requests)
BENCHMARKS: dict[str, Callable[[bool], bool]] = {
    "api_throughput": lambda quick: api_throughput.run(quick=quick),
    "offering_search": lambda quick: offering_search.run(quick=quick),
    "offering_api": lambda quick: offering_api.run(quick=quick),
    "cold_start": lambda quick: cold_start.run(quick=quick),
    "big_log": lambda quick: big_log.run(quick=quick),
    "restart": lambda quick: restart.run(quick=quick),
    "scale": lambda quick: scale.run(quick=quick),
    "ray_warm": lambda quick: ray_warm.run(quick=quick),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all of {list(BENCHMARKS)})"
    )
    parser.add_argument("--quick", action="store_true", help="short measurement windows")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a goal is missed or a request failed"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {list(BENCHMARKS)}")
    status = 0
    for name in args.names or list(BENCHMARKS):
        try:
            met = BENCHMARKS[name](args.quick)
        except api_throughput.BenchError as exc:
            print(f"{name}: could not measure: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.strict and not met:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
