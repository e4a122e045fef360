"""Which operations may run on the event loop."""

from __future__ import annotations

import pytest

from dockyard.api.dispatch import reads_only_the_database


@pytest.mark.parametrize(
    "target",
    [
        "Logs_20140328.GetLogEvents",
        "Logs_20140328.DescribeLogStreams",
        "Logs_20140328.FilterLogEvents",
        "SageMaker.CreateTrainingJob",
        "SageMaker.SearchTrainingPlanOfferings",
    ],
)
def test_what_reads_files_or_writes_goes_to_the_thread_pool(target: str) -> None:
    """Issue 12 (3): a big log read on the event loop held up every other request."""
    assert not reads_only_the_database(target)


@pytest.mark.parametrize(
    "target",
    [
        "SageMaker.ListTrainingJobs",
        "SageMaker.DescribeTrainingJob",
        "SageMaker.DescribeTrainingPlan",
    ],
)
def test_database_reads_run_inline(target: str) -> None:
    assert reads_only_the_database(target)
