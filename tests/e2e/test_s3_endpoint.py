"""With --s3-endpoint-url, jobs read and write a real S3-compatible service (moto's server)."""

from __future__ import annotations

import io
import os
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer, free_port, run_cli


@pytest.fixture
def s3_service() -> Iterator[tuple[str, Any]]:
    port = free_port()
    service = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    service.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    yield endpoint, client
    service.stop()


def test_a_job_uses_the_s3_service(tmp_path: Path, s3_service: tuple[str, Any]) -> None:
    endpoint, s3 = s3_service
    for bucket in ("data", "results"):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket="data", Key="train/numbers.txt", Body=b"20\n22\n")
    code = textwrap.dedent(
        """
        import os, pathlib
        total = sum(int(x) for f in pathlib.Path(os.environ["SM_CHANNEL_TRAIN"]).iterdir()
                    for x in f.read_text().split())
        (pathlib.Path(os.environ["SM_MODEL_DIR"]) / "answer.txt").write_text(str(total))
        """
    ).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(code)
        tar.addfile(info, io.BytesIO(code))
    s3.put_object(Bucket="data", Key="code/source.tar.gz", Body=archive.getvalue())

    # (moto takes any secret: this one is the operator's, for the test to look for.)
    os.environ.update(
        DOCKYARD_S3_ACCESS_KEY_ID="testing", DOCKYARD_S3_SECRET_ACCESS_KEY="the-operators-secret"
    )
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--s3-endpoint-url", endpoint]
    server.start()
    try:
        request = job_request("s3-peer", "")
        del request["AlgorithmSpecification"]["ContainerEntrypoint"]
        request["HyperParameters"] = {
            "sagemaker_program": '"train.py"',
            "sagemaker_submit_directory": '"s3://data/code/source.tar.gz"',
        }
        request["InputDataConfig"] = [
            {
                "ChannelName": "train",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/train"}
                },
            }
        ]
        client = server.client()
        client.create_training_job(**request)
        job = wait_for(client, "s3-peer", {"Completed", "Failed", "Stopped"})
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        body = s3.get_object(Bucket="results", Key="out/s3-peer/output/model.tar.gz")[
            "Body"
        ].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            member = tar.extractfile("answer.txt")
            assert member is not None and member.read() == b"42"
        assert not (server.data_dir / "s3").exists()  # nothing went to local directories
        # The job's specs are kept with it, but never the service's secret (issue 26).
        stored = b"".join(
            path.read_bytes() for path in server.data_dir.glob("dockyard.db*") if path.is_file()
        )
        assert b"the-operators-secret" not in stored
        assert b"s3-peer" in stored  # (where the job's row is)

        # `dockyard jobs run` uploads its code to the same S3 service.
        code_dir = tmp_path / "cli-code"
        code_dir.mkdir()
        (code_dir / "train.py").write_text(
            "import os, pathlib\n"
            "(pathlib.Path(os.environ['SM_MODEL_DIR']) / 'cli.txt').write_text('via cli')\n"
        )
        result = run_cli(
            "jobs",
            "run",
            str(code_dir),
            "--entry-point",
            "train.py",
            "--name",
            "cli-s3",
            "--output",
            "s3://results/out",
            "--endpoint-url",
            server.endpoint,
            "--s3-endpoint-url",
            endpoint,
            data_dir=server.data_dir,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        body = s3.get_object(Bucket="results", Key="out/cli-s3/output/model.tar.gz")["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            member = tar.extractfile("cli.txt")
            assert member is not None and member.read() == b"via cli"
    finally:
        server.stop()
        for name in ("DOCKYARD_S3_ACCESS_KEY_ID", "DOCKYARD_S3_SECRET_ACCESS_KEY"):
            os.environ.pop(name, None)
