"""Service Quotas on the same endpoint: boto3, the `aws` CLI and `dockyard quotas`."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer, run_cli

WARM_M5 = "ml.m5.xlarge for training warm pool usage"
JOBS_M5 = "ml.m5.xlarge for training job usage"


def quota_codes(client: Any) -> dict[str, str]:
    """Quota name -> code, found the way a user finds them: by listing."""
    pages = client.get_paginator("list_service_quotas").paginate(ServiceCode="sagemaker")
    return {q["QuotaName"]: q["QuotaCode"] for p in pages for q in p["Quotas"]}


def quota_value(client: Any, code: str) -> float:
    return float(
        client.get_service_quota(ServiceCode="sagemaker", QuotaCode=code)["Quota"]["Value"]
    )


def aws(server: DockyardServer, key: tuple[str, str], *args: str) -> dict[str, Any]:
    """The real `aws` CLI, as the account with this key."""
    env = {**server.aws_env(), "AWS_ACCESS_KEY_ID": key[0], "AWS_SECRET_ACCESS_KEY": key[1]}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "aws"), *args, "--endpoint-url", server.endpoint],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_fresh_accounts_have_no_warm_pool_quota_and_development_has_some(
    server: DockyardServer,
) -> None:
    _, key = server.new_account("quota-fresh")
    fresh = server.client("service-quotas", key=key)
    services = fresh.list_services()["Services"]
    assert {"ServiceCode": "sagemaker", "ServiceName": "Amazon SageMaker"} in services

    quotas = {
        q["QuotaName"]: q
        for p in fresh.get_paginator("list_service_quotas").paginate(
            ServiceCode="sagemaker", PaginationConfig={"PageSize": 7}
        )
        for q in p["Quotas"]
    }
    # A type from the fleet and a reservable one: three quotas each, as AWS names them.
    assert quotas[WARM_M5]["Value"] == 0
    assert quotas[JOBS_M5]["Value"] == 64
    assert quotas["ml.p5.48xlarge for training plan usage"]["Value"] == 256
    assert quotas[WARM_M5]["QuotaCode"].startswith("L-")
    assert len(quotas) == len(fresh.list_service_quotas(ServiceCode="sagemaker")["Quotas"])

    development = server.client("service-quotas")
    assert quota_value(development, quotas[WARM_M5]["QuotaCode"]) == 4
    assert quota_value(development, quotas[JOBS_M5]["QuotaCode"]) == 64


def test_get_service_quota_and_the_default(server: DockyardServer) -> None:
    client = server.client("service-quotas")
    code = quota_codes(client)[WARM_M5]
    quota = client.get_service_quota(ServiceCode="sagemaker", QuotaCode=code)["Quota"]
    account_id = quota["QuotaArn"].split(":")[4]
    assert quota["QuotaArn"] == f"arn:aws:servicequotas:us-east-1:{account_id}:sagemaker/{code}"
    assert (quota["QuotaName"], quota["Value"], quota["Adjustable"]) == (WARM_M5, 4.0, True)
    assert quota["GlobalQuota"] is False and quota["Unit"] == "None"
    default = client.get_aws_default_service_quota(ServiceCode="sagemaker", QuotaCode=code)
    assert default["Quota"]["Value"] == 0  # AWS's default; the development account has 4
    defaults = client.list_aws_default_service_quotas(ServiceCode="sagemaker")["Quotas"]
    assert {q["QuotaName"]: q["Value"] for q in defaults}[JOBS_M5] == 64


def test_an_increase_requested_with_the_aws_cli_waits_for_an_operator(
    server: DockyardServer,
) -> None:
    account_id, key = server.new_account("quota-cli")
    client = server.client("service-quotas", key=key)
    code = quota_codes(client)[WARM_M5]
    asked = aws(
        server,
        key,
        "service-quotas",
        "request-service-quota-increase",
        "--service-code",
        "sagemaker",
        "--quota-code",
        code,
        "--desired-value",
        "8",
    )["RequestedQuota"]
    assert (asked["Status"], asked["QuotaName"], asked["DesiredValue"]) == ("PENDING", WARM_M5, 8)
    request_id = asked["Id"]
    assert quota_value(client, code) == 0  # nothing changes until an operator decides

    listed = run_cli(
        "quotas", "ls", "--pending", "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    assert request_id in listed and WARM_M5 in listed and "PENDING" in listed
    mine = run_cli(
        "quotas",
        "ls",
        "--account",
        "quota-cli",
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    ).stdout
    assert request_id in mine and "1 request\n" in mine

    out = run_cli(
        "quotas",
        "approve",
        request_id,
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    ).stdout
    assert f"Approved {request_id}" in out and account_id in out

    assert quota_value(client, code) == 8
    history = client.list_requested_service_quota_change_history(ServiceCode="sagemaker")
    assert [(r["Id"], r["Status"]) for r in history["RequestedQuotas"]] == [
        (request_id, "APPROVED")
    ]
    assert (
        client.list_requested_service_quota_change_history(Status="PENDING")["RequestedQuotas"]
        == []
    )
    assert (
        request_id
        not in run_cli(
            "quotas",
            "ls",
            "--pending",
            "--endpoint-url",
            server.endpoint,
            data_dir=server.data_dir,
        ).stdout
    )

    again = run_cli(
        "quotas",
        "approve",
        request_id,
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
        check=False,
    )
    assert again.returncode == 1
    assert "APPROVED already" in again.stderr and "Traceback" not in again.stderr


def test_a_denied_request_changes_nothing(server: DockyardServer) -> None:
    _, key = server.new_account("quota-deny")
    client = server.client("service-quotas", key=key)
    code = quota_codes(client)[JOBS_M5]
    request_id = client.request_service_quota_increase(
        ServiceCode="sagemaker", QuotaCode=code, DesiredValue=100
    )["RequestedQuota"]["Id"]
    out = run_cli(
        "quotas", "deny", request_id, "--endpoint-url", server.endpoint, data_dir=server.data_dir
    ).stdout
    assert f"Denied {request_id}" in out and "stays 64" in out
    assert quota_value(client, code) == 64
    change = client.get_requested_service_quota_change(RequestId=request_id)["RequestedQuota"]
    assert change["Status"] == "DENIED" and change["LastUpdated"] >= change["Created"]
    by_quota = client.list_requested_service_quota_change_history_by_quota(
        ServiceCode="sagemaker", QuotaCode=code
    )["RequestedQuotas"]
    assert [r["Status"] for r in by_quota] == ["DENIED"]
    # Decided, so a new request for the same quota may be made.
    client.request_service_quota_increase(ServiceCode="sagemaker", QuotaCode=code, DesiredValue=80)


def test_errors_say_what_to_do(server: DockyardServer) -> None:
    _, key = server.new_account("quota-errors")
    client = server.client("service-quotas", key=key)
    code = quota_codes(client)[WARM_M5]

    with pytest.raises(client.exceptions.NoSuchResourceException, match="ListServiceQuotas"):
        client.get_service_quota(ServiceCode="sagemaker", QuotaCode="L-00000000")
    with pytest.raises(client.exceptions.NoSuchResourceException, match="sagemaker"):
        client.list_service_quotas(ServiceCode="ec2")
    with pytest.raises(client.exceptions.IllegalArgumentException, match="greater than"):
        client.request_service_quota_increase(
            ServiceCode="sagemaker", QuotaCode=code, DesiredValue=0
        )
    with pytest.raises(client.exceptions.IllegalArgumentException, match="whole number"):
        client.request_service_quota_increase(
            ServiceCode="sagemaker", QuotaCode=code, DesiredValue=2.5
        )
    first = client.request_service_quota_increase(
        ServiceCode="sagemaker", QuotaCode=code, DesiredValue=2
    )["RequestedQuota"]["Id"]
    with pytest.raises(client.exceptions.ResourceAlreadyExistsException, match=first):
        client.request_service_quota_increase(
            ServiceCode="sagemaker", QuotaCode=code, DesiredValue=3
        )
    with pytest.raises(client.exceptions.NoSuchResourceException):
        client.get_requested_service_quota_change(RequestId="0123456789abcdef")
    with pytest.raises(client.exceptions.InvalidPaginationTokenException):
        client.list_service_quotas(ServiceCode="sagemaker", NextToken="bm90LWEtdG9rZW4=")

    missing = run_cli(
        "quotas",
        "approve",
        "0123456789abcdef",
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
        check=False,
    )
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    request = urllib.request.Request(server.endpoint + "/_dockyard/quotas/requests")
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(request, timeout=10)
    assert denied.value.code == 403


def test_accounts_see_only_their_own_requests(server: DockyardServer) -> None:
    _, key_a = server.new_account("quota-a")
    _, key_b = server.new_account("quota-b")
    a = server.client("service-quotas", key=key_a)
    b = server.client("service-quotas", key=key_b)
    code = quota_codes(a)[WARM_M5]
    request_id = a.request_service_quota_increase(
        ServiceCode="sagemaker", QuotaCode=code, DesiredValue=5
    )["RequestedQuota"]["Id"]
    run_cli(
        "quotas",
        "approve",
        request_id,
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    )

    assert b.list_requested_service_quota_change_history()["RequestedQuotas"] == []
    with pytest.raises(b.exceptions.NoSuchResourceException):
        b.get_requested_service_quota_change(RequestId=request_id)
    assert quota_value(b, code) == 0
    assert quota_value(a, code) == 5
    # Quotas are per Region, as in AWS.
    west = server.client("service-quotas", key=key_a, region="us-west-2")
    assert quota_value(west, code) == 0
    assert west.list_requested_service_quota_change_history()["RequestedQuotas"] == []


@pytest.fixture
def one_m5_server(tmp_path: Path) -> Iterator[DockyardServer]:
    config = tmp_path / "dockyard.toml"
    config.write_text('[quotas.training_instances]\n"ml.m5.xlarge" = 1\n')
    server = DockyardServer(tmp_path / "data")
    server.extra_args = ["--config", str(config)]
    server.start()
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield server
    server.stop()


def test_an_approved_increase_lets_the_next_training_job_start(
    one_m5_server: DockyardServer,
) -> None:
    server = one_m5_server
    sagemaker = server.client()
    quotas = server.client("service-quotas")
    sleeper = "import time; time.sleep(120)"
    sagemaker.create_training_job(**job_request("first", sleeper))
    with pytest.raises(sagemaker.exceptions.ResourceLimitExceeded) as excinfo:
        sagemaker.create_training_job(**job_request("second", sleeper))
    assert f"'{JOBS_M5}' is 1 Instances" in str(excinfo.value)

    code = quota_codes(quotas)[JOBS_M5]
    assert quota_value(quotas, code) == 1
    request_id = quotas.request_service_quota_increase(
        ServiceCode="sagemaker", QuotaCode=code, DesiredValue=2
    )["RequestedQuota"]["Id"]
    run_cli(
        "quotas",
        "approve",
        request_id,
        "--endpoint-url",
        server.endpoint,
        data_dir=server.data_dir,
    )

    sagemaker.create_training_job(**job_request("second", sleeper))
    with pytest.raises(sagemaker.exceptions.ResourceLimitExceeded) as excinfo:
        sagemaker.create_training_job(**job_request("third", sleeper))
    assert f"'{JOBS_M5}' is 2 Instances" in str(excinfo.value)
    for name in ("first", "second"):
        sagemaker.stop_training_job(TrainingJobName=name)
    for name in ("first", "second"):
        wait_for(sagemaker, name, {"Stopped", "Failed", "Completed"})
