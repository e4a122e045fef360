"""The console's doors, tried with a plain HTTP client against a live server: a session
only from a right key, sealed and HttpOnly; no change without the session's CSRF token
or from another site; a key's policy obeyed; another account's resources never shown;
S3's bucket named "console" still S3's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import DockyardServer


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    instance = DockyardServer(tmp_path_factory.mktemp("console") / "data").start()
    yield instance
    instance.stop()


def sign_in(server: DockyardServer, key: tuple[str, str]) -> tuple[httpx.Client, str]:
    client = httpx.Client(base_url=server.endpoint, timeout=60)
    answer = client.post(
        "/console/signin",
        data={"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]},
    )
    assert answer.status_code == 303, answer.text
    page = client.get("/console/jobs")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return client, found.group(1)


def job_form(csrf: str, name: str, output: str = "s3://dockyard-jobs/console") -> dict[str, str]:
    """The "Create training job" form as a browser posts it."""
    return {
        "csrf": csrf,
        "name": name,
        "instance_type": "ml.m5.xlarge",
        "count": "1",
        "keep_alive": "0",
        "plan": "",
        "max_runtime": "60",
        "code": "print('hi')",
        "output": output,
        "metric_name": "",
        "metric_regex": "",
    }


def test_a_session_comes_only_from_a_right_key(live: DockyardServer) -> None:
    client = httpx.Client(base_url=live.endpoint, timeout=60)
    # Signed out, every page sends the browser to sign in, and back afterwards.
    answer = client.get("/console/jobs?status=Completed")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/signin?next=/console/jobs%3Fstatus%3DCompleted"
    key = live.credentials()
    for wrong in ((key[0], "wrong"), ("AKIANOSUCHKEY0000000", key[1]), ("", "")):
        refused = client.post(
            "/console/signin",
            data={"kind": "key", "access_key_id": wrong[0], "secret_access_key": wrong[1]},
        )
        assert refused.status_code == 401 and "dockyard_console" not in refused.headers.get(
            "set-cookie", ""
        )
    refused = client.post("/console/signin", data={"kind": "operator", "operator_key": "guess"})
    assert refused.status_code == 401
    # A sign-in never sends the browser elsewhere.
    answer = client.post(
        "/console/signin?next=https://evil.example/",
        data={"kind": "key", "access_key_id": key[0], "secret_access_key": key[1]},
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    # The cookie is sealed: neither the secret nor the key id is readable in it, and a
    # changed cookie is no session.
    value = client.cookies["dockyard_console"]
    assert key[1] not in value and key[0] not in value
    tampered = value[:-6] + ("A" if value[-6] != "A" else "B") + value[-5:]
    other = httpx.Client(
        base_url=live.endpoint, timeout=60, cookies={"dockyard_console": tampered}
    )
    assert other.get("/console/jobs").status_code == 303
    # Pages are never cached, and load nothing from elsewhere.
    page = client.get("/console/jobs")
    assert page.headers["cache-control"] == "no-store"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http://" not in page.text.replace(live.endpoint, "") and "https://" not in page.text


def test_no_change_without_the_sessions_token_or_from_another_site(live: DockyardServer) -> None:
    client, csrf = sign_in(live, live.credentials())
    data = job_form(csrf, "csrf-check")
    for bad in ({**data, "csrf": ""}, {**data, "csrf": "forged"}):
        refused = client.post("/console/jobs/new", data=bad)
        assert refused.status_code == 403 and "another site" in refused.text
    refused = client.post(
        "/console/jobs/new", data=data, headers={"origin": "https://evil.example"}
    )
    assert refused.status_code == 403
    sagemaker = live.client()
    assert sagemaker.list_training_jobs(NameContains="csrf-check")["TrainingJobSummaries"] == []
    made = client.post("/console/jobs/new", data=data, headers={"origin": live.endpoint})
    assert made.status_code == 303 and made.headers["location"] == "/console/jobs/csrf-check"
    assert sagemaker.describe_training_job(TrainingJobName="csrf-check")["TrainingJobName"]


def test_a_keys_policy_and_account_hold_in_the_console(live: DockyardServer) -> None:
    account_id, stranger = live.new_account("console-stranger")
    # A key of that account that may only read.
    reader = live.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": ["sagemaker:List*", "sagemaker:Describe*",
                                                    "logs:*", "servicequotas:*"],
                     "Resource": "*"}
                ],
            }
        ),
    )  # fmt: skip
    live.client("s3", key=stranger).create_bucket(Bucket="stranger-bucket")
    client, csrf = sign_in(live, reader)
    assert "No training jobs" in client.get("/console/jobs").text
    refused = client.post(
        "/console/jobs/new", data=job_form(csrf, "not-allowed", "s3://stranger-bucket/x")
    )
    assert refused.status_code == 400
    assert "AccessDeniedException" in refused.text
    assert "sagemaker:CreateTrainingJob" in refused.text
    # The development account's job is nobody else's.
    stranger_client, _ = sign_in(live, stranger)
    live.client().create_training_job(
        TrainingJobName="dev-only",
        AlgorithmSpecification={
            "TrainingImage": "python:3.11",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python", "-c", "print(1)"],
        },
        RoleArn="arn:aws:iam::123456789012:role/demo",
        OutputDataConfig={"S3OutputPath": "s3://dockyard-jobs/output"},
        ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
    page = stranger_client.get("/console/jobs/dev-only")
    assert page.status_code == 400 and "ResourceNotFound" in page.text
    assert "dev-only" not in stranger_client.get("/console/jobs").text
    # And an operator page is not an account's.
    assert stranger_client.get("/console/fleet").status_code == 403


def test_a_bucket_named_console_is_still_s3s(live: DockyardServer, tmp_path: Path) -> None:
    s3 = live.client("s3")
    s3.create_bucket(Bucket="console")
    s3.put_object(Bucket="console", Key="signin", Body=b"an object, not a page")
    assert s3.get_object(Bucket="console", Key="signin")["Body"].read() == b"an object, not a page"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="console")["Contents"]]
    assert keys == ["signin"]


def test_an_operator_takes_instances_out_of_service(live: DockyardServer) -> None:
    client = httpx.Client(base_url=live.endpoint, timeout=60)
    token = (live.data_dir / "operator.key").read_text().strip()
    client.post("/console/signin", data={"kind": "operator", "operator_key": token})
    page = client.get("/console/fleet")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert page.status_code == 200 and csrf is not None
    where = {"instance_type": "ml.g5.xlarge", "availability_zone": "us-east-1c"}
    done = client.post("/console/fleet", data={"csrf": csrf.group(1), "action": "start", **where})
    assert "4 instance(s) now Maintenance" in done.text
    fleet = {
        (row["instance_type"], row["availability_zone"], row["health"])
        for row in httpx.get(
            live.endpoint + "/_dockyard/fleet", headers={"x-dockyard-operator-key": token}
        ).json()["instances"]
    }
    assert ("ml.g5.xlarge", "us-east-1c", "Maintenance") in fleet
    back = client.post("/console/fleet", data={"csrf": csrf.group(1), "action": "end", **where})
    assert "4 instance(s) now Healthy" in back.text
    # An operator session is not an account's: its pages are the operator's only.
    assert client.get("/console/jobs").status_code == 403
