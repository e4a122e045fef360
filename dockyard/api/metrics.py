"""Prometheus metrics for the API, on a registry per server (tests run several).

Every label set a metric sees is kept (and rendered by /metrics) for the server's life,
so no label holds what a client chose: an operation is one of the operations dockyard
knows (the models' names, its own endpoints') or "unknown", a code one of its own
error codes or HTTP statuses. Anyone can send `POST /` with any X-Amz-Target; 5,000
distinct ones once grew /metrics to 408 MB and its rendering held the event loop 14 s.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

UNKNOWN = "unknown"
# dockyard's error codes (AWS's names) and HTTP statuses; anything else is not ours.
_CODE = re.compile(r"[A-Za-z0-9.]{1,64}")


class ApiMetrics:
    def __init__(self, operations: Iterable[str]) -> None:
        self.operations = frozenset(operations)
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "dockyard_api_requests",
            "API requests served, by operation and result code",
            ["operation", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dockyard_api_request_seconds",
            "Time to serve an API request, by operation",
            ["operation"],
            registry=self.registry,
        )

    def observe(self, operation: str, code: str, seconds: float) -> None:
        if operation not in self.operations:
            operation = UNKNOWN
        if not _CODE.fullmatch(code):
            code = UNKNOWN
        self.requests.labels(operation, code).inc()
        self.latency.labels(operation).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
