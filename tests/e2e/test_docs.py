"""docs/sdk.md works as written: its blocks run in order against a live server started
as the page says (`make run ARGS="--clock manual"`; tests/e2e/doc_blocks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e import doc_blocks
from tests.harness import REPO, DockyardServer

SDK_DOC = (REPO / "docs/sdk.md").read_text()
BLOCKS = doc_blocks.blocks(SDK_DOC)


def output_of(outputs: dict[int, str], needle: str) -> str:
    return doc_blocks.output_of(BLOCKS, outputs, needle)


@pytest.mark.skipif(
    not doc_blocks.SDK_V3_PYTHON.exists(), reason="make test installs the SDK v3 venv"
)
def test_sdk_walkthrough(tmp_path: Path) -> None:
    assert 'make run ARGS="--clock manual"' in SDK_DOC
    server = DockyardServer(tmp_path / ".dockyard", clock="manual").start()
    try:
        outputs = doc_blocks.run(SDK_DOC, server, tmp_path)
        client = server.client()

        # Create, reuse: the second job ran on the first's instances and saw its cache.
        out = output_of(outputs, "second.fit()")
        job_1, job_2 = (line.split()[0] for line in out.splitlines()[-2:])
        assert f"'ReusedByJob': '{job_2}'" in out
        assert f"jobs on this warm pool: ['{job_1}', '{job_2}']" in out
        assert client.describe_training_job(TrainingJobName=job_2)["TrainingJobStatus"] == (
            "Completed"
        )
        # Update, release: the pool job_2 left.
        assert output_of(outputs, '"KeepAlivePeriodInSeconds": 3600').split()[-1] == "3600"
        assert output_of(outputs, '"KeepAlivePeriodInSeconds": 0').split()[-1] == "Terminated"
        pool = client.describe_training_job(TrainingJobName=job_2)["WarmPoolStatus"]
        assert pool["Status"] == "Terminated"

        # The plan's job ran on the plan.
        plan = client.describe_training_plan(TrainingPlanName="my-plan")
        out = output_of(outputs, "training_plan=")
        assert out.split()[-2:] == ["Completed", plan["TrainingPlanArn"]]

        # SDK v3: the job's own log line reached the user.
        out = output_of(outputs, "ModelTrainer(")
        assert re.search(r"training for 3 epochs", out), out[-3000:]
    finally:
        server.stop()
