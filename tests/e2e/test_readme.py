"""The README's examples work as written: every Python and shell block runs, in order,
against a server laid out like `make run`'s (tests/e2e/doc_blocks.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e import doc_blocks
from tests.harness import REPO, DockyardServer

README = (REPO / "README.md").read_text()
BLOCKS = doc_blocks.blocks(README)


def output_of(outputs: dict[int, str], needle: str) -> str:
    return doc_blocks.output_of(BLOCKS, outputs, needle)


@pytest.fixture(scope="module")
def ran(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[int, str], DockyardServer]]:
    base = tmp_path_factory.mktemp("readme")
    server = DockyardServer(base / ".dockyard").start()
    try:
        yield doc_blocks.run(README, server, base), server
    finally:
        server.stop()


def test_readme_opens_with_the_two_commands() -> None:
    head = README.split("\n## ")[0]
    assert "make run" in head and "make test" in head
    assert head.index("make run") < head.index("```python")
    # Only the opening commands are shown and not run; everything else a user copies runs.
    shown = [b for b in BLOCKS if b.lang in ("sh", "python") and not b.runs]
    assert len(shown) == 1 and "make run" in shown[0].code


def test_boto3_example_is_five_lines(ran: tuple[dict[int, str], DockyardServer]) -> None:
    outputs, _ = ran
    first = next(b for b in BLOCKS if b.lang == "python")
    assert len(first.code.strip().splitlines()) <= 6
    assert outputs[first.index].startswith("[]")


def test_aws_cli_example(ran: tuple[dict[int, str], DockyardServer]) -> None:
    outputs, _ = ran
    assert '"TrainingJobSummaries": []' in output_of(outputs, "list-training-jobs")


def test_warm_pool_example(ran: tuple[dict[int, str], DockyardServer]) -> None:
    outputs, server = ran
    out = output_of(outputs, "KeepAlivePeriodInSeconds")
    assert "'Status': 'Reused'" in out and "'ReusedByJob': 'warm-2'" in out
    client = server.client()
    for name in ("warm-1", "warm-2"):
        job = client.describe_training_job(TrainingJobName=name)
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert "warm-2" in output_of(outputs, "pools ls")
    released = client.describe_training_job(TrainingJobName="warm-2")["WarmPoolStatus"]
    assert released["Status"] == "Terminated"


def test_s3_and_sdk_example(ran: tuple[dict[int, str], DockyardServer]) -> None:
    outputs, server = ran
    assert "rows.csv" in output_of(outputs, "aws s3 mb")
    out = output_of(outputs, "Estimator(")
    assert ": training on 2 rows" in out  # the job's own log line, printed by fit()
    model = out.strip().splitlines()[-1]
    assert model.startswith("s3://dockyard-jobs/") and model.endswith("/output/model.tar.gz")
    jobs = server.client().list_training_jobs()["TrainingJobSummaries"]
    sdk_job = next(j for j in jobs if j["TrainingJobName"] in model)
    assert sdk_job["TrainingJobStatus"] == "Completed"
    s3 = server.client("s3")
    assert s3.head_object(Bucket="dockyard-jobs", Key=model.split("/", 3)[3])["ContentLength"]
