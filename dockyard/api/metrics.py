"""Prometheus metrics for the API, on a registry per server (tests run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class ApiMetrics:
    def __init__(self) -> None:
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
        self.requests.labels(operation, code).inc()
        self.latency.labels(operation).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
