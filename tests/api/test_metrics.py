"""The API's metrics hold no label a client chose (dockyard.api.metrics, issue 25)."""

from __future__ import annotations

from dockyard.api.dispatch import known_operations, operation_label
from dockyard.api.metrics import ApiMetrics


def test_only_known_operations_and_codes_are_labels() -> None:
    metrics = ApiMetrics(known_operations())
    for index in range(500):
        metrics.observe(operation_label(f"junk-{index}-" + "A" * 4000), "OK", 0.01)
        metrics.observe("SageMaker.ListTrainingJobs", f"<code {index}>", 0.01)
    metrics.observe(operation_label("SageMaker.ListTrainingJobs"), "ValidationException", 0.01)
    page = metrics.render().decode()
    assert "junk-" not in page and "<code" not in page
    total = "dockyard_api_requests_total"
    assert f'{total}{{code="OK",operation="unknown"}} 500.0' in page
    assert f'{total}{{code="unknown",operation="SageMaker.ListTrainingJobs"}} 500.0' in page
    assert (
        f'{total}{{code="ValidationException",operation="SageMaker.ListTrainingJobs"}} 1.0' in page
    )
    assert operation_label("SageMaker.NoSuchOperation") == "unknown"
    assert operation_label("") == "-"
