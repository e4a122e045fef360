"""The SageMaker Python SDK, unchanged, against a live server: nothing but
`eval "$(dockyard env)"` points it here (no endpoint_url, no bucket, no session set up).

The SDK's code runs in a separate process with only those exports (and none of this
process's AWS settings), as a user's script would.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.doc_blocks import SDK_V3_PYTHON
from tests.e2e.plan_helpers import search, set_clock, tomorrow_at
from tests.harness import DockyardServer, run_cli

pytest.importorskip("sagemaker", reason="the SageMaker SDK is a test dependency")


TRAIN_PY = """
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
print("epochs", args.epochs, "in", os.environ["TRAINING_JOB_NAME"], flush=True)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.txt"), "w") as out:
    out.write(f"trained for {args.epochs} epochs")
"""


def sdk_env(server: DockyardServer) -> dict[str, str]:
    out = run_cli("env", "--endpoint-url", server.endpoint, data_dir=server.data_dir).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0]
    env["SAGEMAKER_SUPPRESS_V2_WARNING"] = "1"
    return env


def run_sdk(server: DockyardServer, code: str, cwd: Path, python: str = sys.executable) -> str:
    result = subprocess.run(
        [python, "-c", textwrap.dedent(code)],
        env=sdk_env(server),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result.stdout + result.stderr


@pytest.fixture
def source(tmp_path: Path) -> Path:
    directory = tmp_path / "src"
    directory.mkdir()
    (directory / "train.py").write_text(TRAIN_PY)
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    running = DockyardServer(tmp_path_factory.mktemp("sdk") / "data").start()
    yield running
    running.stop()


def test_estimator_fit_twice_reuses_the_warm_pool(server: DockyardServer, source: Path) -> None:
    out = run_sdk(
        server,
        f"""
        from sagemaker.estimator import Estimator

        def estimator(epochs):
            return Estimator(
                image_uri="python:3.11",
                role="arn:aws:iam::123456789012:role/SageMakerRole",
                instance_count=1,
                instance_type="ml.m5.xlarge",
                entry_point="train.py",
                source_dir={str(source)!r},
                hyperparameters={{"epochs": epochs}},
                keep_alive_period_in_seconds=600,
                max_run=600,
            )

        first = estimator(2)
        first.fit(wait=True, logs=True)
        print("FIRST", first.latest_training_job.name, first.model_data)
        second = estimator(3)
        second.fit(wait=True, logs=True)
        print("SECOND", second.latest_training_job.name, second.model_data)
        """,
        source.parent,
    )
    first, second = (
        line.split()[1:] for line in out.splitlines() if line.startswith(("FIRST", "SECOND"))
    )
    assert "epochs 2 in " + first[0] in out and "epochs 3 in " + second[0] in out
    assert first[1].startswith("s3://dockyard-jobs/")  # the default bucket from the config
    client = server.client()
    done = client.describe_training_job(TrainingJobName=second[0])
    assert done["TrainingJobStatus"] == "Completed"
    starting = [t["StatusMessage"] for t in done["SecondaryStatusTransitions"]]
    assert any("warm pool" in message for message in starting), starting
    pool = client.describe_training_job(TrainingJobName=first[0])["WarmPoolStatus"]
    assert pool["Status"] == "Reused" and pool["ReusedByJob"] == second[0]
    key = second[1].removeprefix("s3://dockyard-jobs/")
    assert server.client("s3").head_object(Bucket="dockyard-jobs", Key=key)["ContentLength"] > 0
    client.update_training_job(
        TrainingJobName=second[0], ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )


def test_session_defaults_come_from_the_exports(server: DockyardServer, tmp_path: Path) -> None:
    out = run_sdk(
        server,
        """
        import sagemaker
        session = sagemaker.Session()
        print("BUCKET", session.default_bucket())
        print("REGION", session.boto_region_name)
        print("ACCOUNT", session.boto_session.client("sts").get_caller_identity()["Account"])
        """,
        tmp_path,
    )
    assert "BUCKET dockyard-jobs" in out and "REGION us-east-1" in out
    account = next(line.split()[1] for line in out.splitlines() if line.startswith("ACCOUNT"))
    assert server.client("sts").get_caller_identity()["Account"] == account


def test_estimator_on_a_training_plan(tmp_path: Path, source: Path) -> None:
    server = DockyardServer(tmp_path / "data", clock="manual").start()
    try:
        day0 = tomorrow_at(6)
        set_clock(server, day0)
        client = server.client()
        offering = search(
            client,
            InstanceType="ml.p5.48xlarge",
            InstanceCount=1,
            DurationHours=24,
            StartTimeAfter=day0.replace(hour=11, minute=30),
        )[0]
        plan: dict[str, Any] = client.create_training_plan(
            TrainingPlanName="sdk-plan", TrainingPlanOfferingId=offering["TrainingPlanOfferingId"]
        )
        set_clock(server, offering["ReservedCapacityOfferings"][0]["StartTime"])
        out = run_sdk(
            server,
            f"""
            from sagemaker.estimator import Estimator
            estimator = Estimator(
                image_uri="python:3.11",
                role="arn:aws:iam::123456789012:role/SageMakerRole",
                instance_count=1,
                instance_type="ml.p5.48xlarge",
                entry_point="train.py",
                source_dir={str(source)!r},
                training_plan={plan["TrainingPlanArn"]!r},
                max_run=3600,
            )
            estimator.fit(wait=True, logs=True)
            print("JOB", estimator.latest_training_job.name)
            """,
            source.parent,
        )
        name = next(line.split()[1] for line in out.splitlines() if line.startswith("JOB"))
        job = client.describe_training_job(TrainingJobName=name)
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        assert job["ResourceConfig"]["TrainingPlanArn"] == plan["TrainingPlanArn"]
    finally:
        server.stop()


@pytest.mark.skipif(not SDK_V3_PYTHON.exists(), reason="make test installs the SDK v3 venv")
def test_model_trainer_train(server: DockyardServer, source: Path) -> None:
    out = run_sdk(
        server,
        f"""
        import logging
        logging.basicConfig(level=logging.INFO)  # where the SDK v3 prints the job's logs
        from sagemaker.train import ModelTrainer
        from sagemaker.train.configs import Compute, SourceCode

        trainer = ModelTrainer(
            training_image="python:3.11",
            role="arn:aws:iam::123456789012:role/SageMakerRole",
            source_code=SourceCode(source_dir={str(source)!r}, entry_script="train.py"),
            compute=Compute(
                instance_type="ml.m5.xlarge", instance_count=1, keep_alive_period_in_seconds=600
            ),
            hyperparameters={{"epochs": 4}},
            base_job_name="sdk-v3",
        )
        trainer.train(wait=True, logs=True)
        print("JOB", trainer._latest_training_job.training_job_name)
        """,
        source.parent,
        python=str(SDK_V3_PYTHON),
    )
    name = next(line.split()[1] for line in out.splitlines() if line.startswith("JOB"))
    assert "epochs 4 in " + name in out  # the job's own log line, fetched by the SDK
    client = server.client()
    job = client.describe_training_job(TrainingJobName=name)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["WarmPoolStatus"]["Status"] == "Available"
    artifact = job["ModelArtifacts"]["S3ModelArtifacts"]
    assert artifact.startswith("s3://dockyard-jobs/")
    bucket, _, key = artifact.removeprefix("s3://").partition("/")
    assert server.client("s3").head_object(Bucket=bucket, Key=key)["ContentLength"] > 0
    client.update_training_job(
        TrainingJobName=name, ResourceConfig={"KeepAlivePeriodInSeconds": 0}
    )
