"""A running job survives a SIGKILLed server; several instances of one job find each other."""

from __future__ import annotations

import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_training_jobs import s3_path, script_job, wait_for
from tests.harness import UID, DockyardServer


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[DockyardServer]:
    server = DockyardServer(tmp_path / "data").start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


def test_sigkilled_server_still_finishes_the_running_job(own_server: DockyardServer) -> None:
    code = """
        import os, pathlib, time
        gate = pathlib.Path(os.environ["SM_INPUT_DIR"]) / "go"
        print("waiting for the gate", flush=True)
        deadline = time.time() + 120
        while not gate.exists() and time.time() < deadline:
            time.sleep(0.1)
        (pathlib.Path(os.environ["SM_MODEL_DIR"]) / "model.txt").write_text("survived")
    """
    client = own_server.client()
    client.create_training_job(**script_job(own_server, "survivor", code))
    deadline = time.monotonic() + 60
    while (
        client.describe_training_job(TrainingJobName="survivor")["SecondaryStatus"] != "Training"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)

    own_server.kill()
    instance = next((own_server.data_dir / "instances").glob(f"*-survivor-{UID}/algo-1"))
    (instance / "opt" / "ml" / "input" / "go").touch()  # let it finish while no server runs
    state = instance / "state.json"
    deadline = time.monotonic() + 60
    while '"completed"' not in state.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    own_server.start()

    job = wait_for(own_server.client(), "survivor", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses[-2:] == ["Uploading", "Completed"]
    with tarfile.open(s3_path(own_server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
        member = archive.extractfile("model.txt")
        assert member is not None and member.read() == b"survived"


def test_two_instances_talk_to_each_other(own_server: DockyardServer) -> None:
    code = """
        import json, os, pathlib, socket, time
        hosts = json.loads(os.environ["SM_HOSTS"])
        me = os.environ["SM_CURRENT_HOST"]
        port = int(os.environ["MASTER_PORT"])
        if me == hosts[0]:
            server = socket.create_server((os.environ["MASTER_ADDR"], port))
            connection, _ = server.accept()
            message = connection.recv(100).decode()
            print("leader got", message, flush=True)
            (pathlib.Path(os.environ["SM_MODEL_DIR"]) / "heard.txt").write_text(message)
            connection.close()
            time.sleep(2)  # a job long enough that per-instance billing shows
        else:
            deadline = time.time() + 60
            while True:
                try:
                    # By host name: algo-1 resolves on this backend, as on SageMaker.
                    sock = socket.create_connection((hosts[0], port))
                    break
                except OSError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.1)
            sock.sendall(f"hello from {me} of {len(hosts)}".encode())
            sock.close()
    """
    client = own_server.client()
    request = script_job(own_server, "pair", code)
    request["ResourceConfig"]["InstanceCount"] = 2
    client.create_training_job(**request)
    job = wait_for(client, "pair", {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    with tarfile.open(s3_path(own_server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
        member = archive.extractfile("heard.txt")
        assert member is not None and member.read() == b"hello from algo-2 of 2"
    # Billed per instance, as AWS reports it (not times the two instances).
    trained = job["TrainingTimeInSeconds"]
    assert trained >= 2 and job["BillableTimeInSeconds"] in (trained, trained + 1)


def test_training_instance_quota(tmp_path: Path) -> None:
    config = tmp_path / "dockyard.toml"
    config.write_text('[quotas.training_instances]\n"ml.m5.xlarge" = 1\n')
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--config", str(config)]
    server.start()
    try:
        for bucket in ("results", "data"):
            (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
        client = server.client()
        client.create_training_job(**script_job(server, "first", "import time; time.sleep(60)"))
        with pytest.raises(client.exceptions.ResourceLimitExceeded) as excinfo:
            client.create_training_job(**script_job(server, "second", "pass"))
        assert "'ml.m5.xlarge for training job usage' is 1 Instances" in str(excinfo.value)
        client.stop_training_job(TrainingJobName="first")
        wait_for(client, "first", {"Stopped"})
        client.create_training_job(**script_job(server, "second", "pass"))
        assert (
            wait_for(client, "second", {"Completed", "Failed"})["TrainingJobStatus"] == "Completed"
        )
    finally:
        server.stop()


def test_training_image_selects_the_interpreter_and_jobs_can_be_deleted(tmp_path: Path) -> None:
    interpreter = tmp_path / "python-for-my-image"
    interpreter.symlink_to(sys.executable)
    config = tmp_path / "dockyard.toml"
    config.write_text(f'[images]\n"my-image:1" = "{interpreter}"\n')
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--config", str(config)]
    server.start()
    try:
        for bucket in ("results", "data"):
            (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
        code = """
            import os, sys
            open(os.path.join(os.environ["SM_MODEL_DIR"], "python"), "w").write(sys.executable)
        """
        client = server.client()
        request = script_job(server, "imaged", code)
        request["AlgorithmSpecification"]["TrainingImage"] = "my-image:1"
        client.create_training_job(**request)
        job = wait_for(client, "imaged", {"Completed", "Failed", "Stopped"})
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        with tarfile.open(s3_path(server, job["ModelArtifacts"]["S3ModelArtifacts"])) as archive:
            member = archive.extractfile("python")
            assert member is not None and member.read().decode() == str(interpreter)

        client.create_training_job(**script_job(server, "busy", "import time; time.sleep(60)"))
        with pytest.raises(client.exceptions.ResourceInUse):
            client.delete_training_job(TrainingJobName="busy")
        client.stop_training_job(TrainingJobName="busy")
        wait_for(client, "busy", {"Stopped"})
        client.delete_training_job(TrainingJobName="imaged")
        with pytest.raises(client.exceptions.ResourceNotFound):
            client.describe_training_job(TrainingJobName="imaged")
        with pytest.raises(client.exceptions.ResourceNotFound):
            client.delete_training_job(TrainingJobName="imaged")
    finally:
        server.stop()
