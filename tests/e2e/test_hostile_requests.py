"""Requests written to break the server get an AWS-style error, never a 500 (issue 25).

A red-team round against a live server found requests that got a plain-text 500 and a
traceback: a non-ASCII operator key (`hmac.compare_digest` on a str), forged NextTokens
(an offset of 10**20, 1e300 or Infinity), lone UTF-16 surrogates in JSON strings,
"²" as a terminal's Rows, JSON nested 100,000 deep, and two that cost everyone else:
a Prometheus label per X-Amz-Target anyone sends, and an IAM form decoded in O(N^2).
Each test here sends the attack to a live server and checks what the client gets back.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.client
import json
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from tests.e2e.test_cluster_exec import post
from tests.e2e.test_console_security import sign_in
from tests.harness import REGION, DockyardServer, signed_post

GROUP = "/aws/sagemaker/TrainingJobs"
DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    # The manual clock: its endpoint reads a body only on a server that has one.
    instance = DockyardServer(tmp_path_factory.mktemp("hostile") / "data", clock="manual")
    yield instance.start()
    instance.stop()


@pytest.fixture(scope="module")
def tenant(live: DockyardServer) -> tuple[str, tuple[str, str]]:
    return live.new_account("tenant")


def raw(
    server: DockyardServer, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, str, bytes]:
    """One request as sent (header values as latin-1): status, content type, body."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


def operator_key(server: DockyardServer) -> str:
    return (server.data_dir / "operator.key").read_text().strip()


def aws_error(status: int, content_type: str, body: bytes) -> tuple[int, str]:
    """(status, AWS error code) of a JSON error answer; fails on anything else."""
    assert "json" in content_type, (status, body[:300])
    answer = json.loads(body)
    assert answer.get("message"), answer
    return status, answer["__type"]


# -- 1. secrets compared as bytes ------------------------------------------------------

OPERATOR_ROUTES = [
    ("GET", "/_dockyard/clock"),
    ("GET", "/_dockyard/fleet"),
    ("GET", "/_dockyard/quotas/requests"),
    ("POST", "/_dockyard/fleet/health"),
    ("POST", "/_dockyard/quotas/requests/abc"),
]


@pytest.mark.parametrize(("method", "path"), OPERATOR_ROUTES)
def test_a_non_ascii_operator_key_is_refused(live: DockyardServer, method: str, path: str) -> None:
    answer = raw(live, method, path, {"X-Dockyard-Operator-Key": "\xe9", "Content-Length": "0"})
    assert aws_error(*answer) == (403, "AccessDeniedException")


def test_non_ascii_secrets_sign_nobody_in(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    console = httpx.Client(base_url=live.endpoint, timeout=60)
    refused = console.post("/console/signin", data={"kind": "operator", "operator_key": "\xe9"})
    assert refused.status_code == 401 and "That key is not right" in refused.text
    # A signed-in session's CSRF token is compared the same way.
    session, _ = sign_in(live, tenant[1])
    form = {"csrf": "\xe9", "name": "x", "code": "print(1)", "output": "s3://b/o"}
    stale = session.post("/console/jobs/new", data=form)
    assert stale.status_code == 403 and "out of date" in stale.text
    # And a SigV4 signature of a real key.
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    access_key = tenant[1][0]
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{now[:8]}/{REGION}/sagemaker/aws4_request, "
        "SignedHeaders=host;x-amz-date;x-amz-target, Signature=\xe9\xe9"
    )
    headers = {
        "X-Amz-Target": "SageMaker.ListTrainingJobs",
        "X-Amz-Date": now,
        "Authorization": authorization,
    }
    assert aws_error(*raw(live, "POST", "/", headers, b"{}")) == (
        403,
        "InvalidSignatureException",
    )


# -- 2. forged page tokens ---------------------------------------------------------------


def forged(offset: str, query: dict[str, Any], alphabet: str = "url") -> str:
    """A token as the unsealed ones were made: base64 JSON of an offset and a hash of
    the query (the attacker's script reproduced it exactly)."""
    fingerprint = hashlib.sha256(
        json.dumps(
            {k: v for k, v in query.items() if k not in ("NextToken", "MaxResults")},
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    text = f'{{"o": {offset}, "q": "{fingerprint}"}}'.encode()
    if alphabet == "url":
        return base64.urlsafe_b64encode(text).decode().rstrip("=")
    return base64.b64encode(text).decode()


LISTINGS = [
    ("SageMaker.ListTrainingJobs", {}, "sagemaker", "ValidationException"),
    ("SageMaker.ListTrainingPlans", {}, "sagemaker", "ValidationException"),
    ("SageMaker.ListClusters", {}, "sagemaker", "ValidationException"),
    ("SageMaker.ListClusterNodes", {"ClusterName": "c"}, "sagemaker", "ValidationException"),
    (
        "ServiceQuotasV20190624.ListRequestedServiceQuotaChangeHistory",
        {},
        "servicequotas",
        "InvalidPaginationTokenException",
    ),
]


@pytest.mark.parametrize(("target", "query", "service", "code"), LISTINGS)
@pytest.mark.parametrize("offset", ["100000000000000000000", "1e300", "Infinity", "5"])
def test_a_forged_next_token_is_refused(
    live: DockyardServer,
    tenant: tuple[str, tuple[str, str]],
    target: str,
    query: dict[str, Any],
    service: str,
    code: str,
    offset: str,
) -> None:
    alphabet = "standard" if service == "servicequotas" else "url"
    body = json.dumps({**query, "NextToken": forged(offset, query, alphabet)}).encode()
    status, answer = signed_post(live, target, body, key=tenant[1], service=service)
    assert (status, answer.get("__type")) == (400, code), answer
    assert "NextToken is not valid" in answer["message"]


def test_a_next_token_is_good_only_where_it_was_given(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    quotas = live.client("service-quotas", key=tenant[1])
    first = quotas.list_service_quotas(ServiceCode="sagemaker", MaxResults=1)
    token = first["NextToken"]
    second = quotas.list_service_quotas(ServiceCode="sagemaker", MaxResults=1, NextToken=token)
    assert second["Quotas"] != first["Quotas"]
    # Not for another operation, nor for another account.
    with pytest.raises(quotas.exceptions.InvalidPaginationTokenException):
        quotas.list_aws_default_service_quotas(ServiceCode="sagemaker", NextToken=token)
    _, other = live.new_account("other-tenant")
    theirs = live.client("service-quotas", key=other)
    with pytest.raises(theirs.exceptions.InvalidPaginationTokenException):
        theirs.list_service_quotas(ServiceCode="sagemaker", MaxResults=1, NextToken=token)
    # CloudWatch Logs' tokens, in its words.
    logs = live.client("logs", key=tenant[1])
    stream_token = "f/" + base64.urlsafe_b64encode(b"\xc2\xb2:job/algo-1-1").decode()
    for call in (
        lambda: logs.get_log_events(
            logGroupName=GROUP, logStreamName="job/algo-1-1", nextToken=stream_token
        ),
        lambda: logs.describe_log_streams(
            logGroupName=GROUP, nextToken=forged("100000000000000000000", {"logGroupName": GROUP})
        ),
        lambda: logs.filter_log_events(
            logGroupName=GROUP, nextToken=forged('[1e300, "x", 0]', {"logGroupName": GROUP})
        ),
    ):
        with pytest.raises(logs.exceptions.InvalidParameterException):
            call()


# -- 3. strings that are not Unicode -------------------------------------------------------

SURROGATE = "\\ud800"


@pytest.mark.parametrize(
    ("target", "member"),
    [
        ("Logs_20140328.GetLogEvents", f'"logStreamName": "x{SURROGATE}/algo-1-1"'),
        ("Logs_20140328.DescribeLogStreams", f'"logStreamNamePrefix": "x{SURROGATE}/"'),
        ("Logs_20140328.FilterLogEvents", f'"logStreamNames": ["x{SURROGATE}/algo-1-1"]'),
        ("Logs_20140328.FilterLogEvents", f'"filterPattern": "{SURROGATE}"'),
    ],
)
def test_a_lone_surrogate_is_refused_by_the_api(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]], target: str, member: str
) -> None:
    body = f'{{"logGroupName": "{GROUP}", {member}}}'.encode()
    status, answer = signed_post(live, target, body, key=tenant[1], service="logs")
    assert (status, answer.get("__type")) == (400, "ValidationException"), answer
    assert "Member must be valid Unicode" in answer["message"]


@pytest.mark.parametrize(
    "body",
    [
        f'{{"ClusterName": "c", "NodeId": "i-1", "Command": ["a{SURROGATE}"]}}',
        f'{{"ClusterName": "c{SURROGATE}", "NodeId": "i-1", "Command": ["id"]}}',
    ],
)
def test_a_lone_surrogate_is_refused_by_the_exec_endpoint(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]], body: str
) -> None:
    status, answer = post(live, body.encode(), key=tenant[1])
    assert (status, answer["__type"]) == (400, "SerializationException"), answer
    assert "not valid Unicode" in answer["message"]


# -- 4. a terminal's size -----------------------------------------------------------------


def shell_upgrade(server: DockyardServer, key: tuple[str, str], rows: str) -> tuple[int, bytes]:
    """A signed WebSocket upgrade of the shell endpoint: the status and body it gets."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    query = urlencode({"ClusterName": "c", "NodeId": "i-1", "Rows": rows}, quote_via=quote)
    url = f"{server.endpoint}/_dockyard/clusters/shell?{query}"
    request = AWSRequest(
        method="GET", url=url, headers={"X-Dockyard-Nonce": secrets.token_hex(16)}
    )
    SigV4Auth(Credentials(*key), "sagemaker", REGION).add_auth(request)
    headers = dict(request.prepare().headers)
    try:
        with connect("ws" + url.removeprefix("http"), additional_headers=headers, open_timeout=60):
            pass
    except InvalidStatus as refused:
        return refused.response.status_code, refused.response.body or b""
    raise AssertionError(f"a shell opened with Rows={rows[:10]!r}")


@pytest.mark.parametrize("rows", ["\u00b2", "9" * 5000, "-1", "0", "65536", " 30"])
def test_a_terminal_size_is_ascii_digits_in_range(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]], rows: str
) -> None:
    status, body = shell_upgrade(live, tenant[1], rows)
    answer = json.loads(body)
    assert (status, answer["__type"]) == (400, "ValidationException"), answer
    assert answer["message"] == "Rows must be a whole number from 1 to 65535"


# -- 5. bodies no reader can take ---------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/_dockyard/clock", "/_dockyard/fleet/health", "/_dockyard/quotas/requests/x"]
)
@pytest.mark.parametrize(
    ("body", "code"),
    [
        (DEEP, "SerializationException"),
        (b'{"health": "\\ud800"}', "SerializationException"),
        (b"\xff\xfe{}", "SerializationException"),
        (b"[1]", "ValidationException"),
    ],
)
def test_an_operator_body_that_cannot_be_read_is_refused(
    live: DockyardServer, path: str, body: bytes, code: str
) -> None:
    headers = {"X-Dockyard-Operator-Key": operator_key(live), "Content-Type": "application/json"}
    assert aws_error(*raw(live, "POST", path, headers, body)) == (400, code)


def test_the_clock_goes_no_further_than_a_datetime(live: DockyardServer) -> None:
    headers = {"X-Dockyard-Operator-Key": operator_key(live)}
    body = json.dumps({"advance": "99999999999999999999"}).encode()
    assert aws_error(*raw(live, "POST", "/_dockyard/clock", headers, body)) == (
        400,
        "ValidationException",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"health": "Maintenance", "instances": 5},
        {"health": "Maintenance", "instances": [1, 2]},
        {"health": "Maintenance", "instance_type": ["ml.m5.xlarge"]},
    ],
)
def test_fleet_health_takes_only_the_shapes_it_documents(
    live: DockyardServer, body: dict[str, Any]
) -> None:
    headers = {"X-Dockyard-Operator-Key": operator_key(live)}
    answer = raw(live, "POST", "/_dockyard/fleet/health", headers, json.dumps(body).encode())
    assert aws_error(*answer) == (400, "ValidationException")


def test_deep_json_is_refused_by_the_api_and_exec(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    status, answer = signed_post(live, "SageMaker.ListTrainingJobs", DEEP, key=tenant[1])
    assert (status, answer.get("__type")) == (400, "SerializationException"), answer
    status, answer = post(live, DEEP, key=tenant[1])
    assert (status, answer["__type"]) == (400, "SerializationException"), answer


# -- 6. metrics hold no label a client chose --------------------------------------------


def test_targets_nobody_serves_add_no_metrics(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    live.client(key=tenant[1]).list_training_jobs()
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)
    try:
        for index in range(300):  # unauthenticated, as the attack was
            target = f"junk-{index}-" + "A" * 4000
            connection.request("POST", "/", body=b"", headers={"X-Amz-Target": target})
            connection.getresponse().read()
    finally:
        connection.close()
    page = httpx.get(live.endpoint + "/metrics", timeout=60).text
    assert "junk-" not in page
    assert 'operation="unknown"' in page
    assert 'operation="SageMaker.ListTrainingJobs"' in page


# -- 7. an IAM form costs what it holds ----------------------------------------------------


def simulate(server: DockyardServer, key: tuple[str, str], actions: int) -> Any:
    iam = server.client("iam", key=key, read_timeout=30)
    return iam.simulate_principal_policy(
        PolicySourceArn="arn:aws:iam::123456789012:user/x",
        ActionNames=[f"sagemaker:Describe{i}" for i in range(actions)],
        MaxItems=1,
    )


def test_a_long_iam_list_is_read_in_one_pass(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    # 10,000 members took the quadratic decoder about 40 s (8,000: 25 s); one pass over
    # the form answers at once.
    try:
        answer = simulate(live, tenant[1], 10_000)
    except ReadTimeoutError:
        pytest.fail("10,000 ActionNames got no answer within 30 s")
    assert answer["IsTruncated"] and len(answer["EvaluationResults"]) == 1
    # More members than a list may have are refused, with the limit said.
    with pytest.raises(ClientError) as refused:
        simulate(live, tenant[1], 40_000)
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert "more than 10000 members" in refused.value.response["Error"]["Message"]


def test_an_iam_marker_is_ascii_digits(
    live: DockyardServer, tenant: tuple[str, tuple[str, str]]
) -> None:
    iam = live.client("iam", key=tenant[1])
    for marker in ("\u00b2", "9" * 300):
        with pytest.raises(ClientError) as refused:
            iam.simulate_principal_policy(
                PolicySourceArn="arn:aws:iam::123456789012:user/x",
                ActionNames=["sagemaker:ListTrainingJobs"],
                Marker=marker,
            )
        assert refused.value.response["Error"]["Code"] == "InvalidInput"
