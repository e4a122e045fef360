"""A tenant's MetricDefinitions regex is evaluated by dockyard, never trusted to be kind.

`(a+)+$` against one printed line of forty `a`s and a `!` takes a backtracking engine
(Python's `re`) 2^40 steps. The instance's agent (root, outside the job's cgroup) scrapes
every line with the job's regexes, and the console charts a job's metrics by running
them over its log in the server: with `re` the first wedged the agent for good (the job
never ended, StopTrainingJob and MaxRuntimeInSeconds did nothing) and the second froze
the whole server. Each test here runs that attack through the public API and checks
what a tenant - and every other tenant - would notice.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from dockyard.domain import s3_addressing as addressing
from tests.e2e.test_console_security import job_form, sign_in
from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer, instance_root

GROUP = "/aws/sagemaker/TrainingJobs"
EVIL = "(a+)+$"
LINE = "a" * 40 + "!"
DEFINITIONS = [{"Name": "evil", "Regex": EVIL}, {"Name": "loss", "Regex": r"loss=([0-9.]+)"}]
# One line: ContainerEntrypoint members must match `.*`, which stops at a newline.
PRINTS = f"[print(l, flush=True) for l in ['loss=0.5', 'loss=0.25', {LINE!r}]]"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockyardServer]:
    instance = DockyardServer(tmp_path_factory.mktemp("regex") / "data")
    # The huge Authorization header below is past the default cap on headers (64 KiB),
    # which alone would refuse it (431) before the credential scope is read.
    instance.extra_env = {"DOCKYARD_MAX_HEADER_BYTES": str(1024 * 1024)}
    instance.start()
    for bucket in ("results", "data"):
        (instance.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    yield instance
    instance.stop()


def start(server: DockyardServer, name: str, code: str, **overrides: Any) -> int:
    """Create a job with the catastrophic regex; answer its agent's pid."""
    request = job_request(name, code, **overrides)
    request["AlgorithmSpecification"]["MetricDefinitions"] = DEFINITIONS
    server.client().create_training_job(**request)
    return int((instance_root(server, name) / "agent.pid").read_text())


def wait_for_line(server: DockyardServer, name: str, line: str) -> None:
    """Until the job's log holds `line`: the agent writes a line before it scrapes it."""
    logs = server.client("logs")
    deadline = time.monotonic() + 120
    while True:
        streams = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=f"{name}/")
        for stream in streams["logStreams"]:
            events = logs.get_log_events(
                logGroupName=GROUP, logStreamName=stream["logStreamName"], startFromHead=True
            )["events"]
            if line in [event["message"] for event in events]:
                return
        assert time.monotonic() < deadline, f"{name} never printed {line!r}"
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 60
    while alive(pid):
        assert time.monotonic() < deadline, f"agent {pid} is still running after its job"
        time.sleep(0.2)


def test_a_catastrophic_regex_neither_wedges_the_agent_nor_loses_the_other_metrics(
    live: DockyardServer,
) -> None:
    agent = start(live, "regex-completes", PRINTS)
    job = wait_for(live.client(), "regex-completes", {"Completed", "Failed", "Stopped"}, 120)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [(m["MetricName"], m["Value"]) for m in job["FinalMetricDataList"]] == [("loss", 0.25)]
    wait_gone(agent)


@pytest.mark.parametrize("ending", ["StopTrainingJob", "MaxRuntimeInSeconds"])
def test_stop_and_max_runtime_end_a_job_whose_line_meets_the_regex(
    live: DockyardServer, ending: str
) -> None:
    name = f"regex-{ending.lower()[:7]}"
    code = f"import time; print({LINE!r}, flush=True); time.sleep(600)"
    stopping = {"MaxRuntimeInSeconds": 15} if ending == "MaxRuntimeInSeconds" else {}
    agent = start(live, name, code, StoppingCondition={"MaxRuntimeInSeconds": 600, **stopping})
    wait_for_line(live, name, LINE)
    client = live.client()
    if ending == "StopTrainingJob":
        client.stop_training_job(TrainingJobName=name)
    job = wait_for(client, name, {"Completed", "Failed", "Stopped"}, 120)
    assert job["TrainingJobStatus"] == "Stopped"
    expected = "MaxRuntimeExceeded" if ending == "MaxRuntimeInSeconds" else "Stopped"
    assert job["SecondaryStatus"] == expected
    wait_gone(agent)


def test_the_console_page_of_such_a_job_answers_and_so_does_the_server(
    live: DockyardServer,
) -> None:
    agent = start(live, "regex-console", PRINTS)
    wait_for_line(live, "regex-console", LINE)
    browser, _ = sign_in(live, live.credentials())
    answers: dict[str, Any] = {}

    def open_page() -> None:
        try:
            answers["page"] = browser.get("/console/jobs/regex-console", timeout=120)
        except httpx.HTTPError as exc:
            answers["page"] = exc

    page = threading.Thread(target=open_page, daemon=True)
    page.start()
    # While the page is being made, the server answers everyone else.
    while page.is_alive():
        with urllib.request.urlopen(live.endpoint + "/healthz", timeout=15) as health:
            assert health.status == 200
        time.sleep(0.1)
    page.join()
    answer = answers["page"]
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 200
    assert "loss: last 0.25 (min 0.25, max 0.5, 2 values)" in answer.text
    job = wait_for(live.client(), "regex-console", {"Completed", "Failed", "Stopped"}, 120)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    wait_gone(agent)


@pytest.mark.parametrize(
    "regex",
    [
        r"loss=(?=\d)([0-9.]+)",  # lookahead
        r"(?<=loss=)[0-9.]+",  # lookbehind
        r"(['\"])loss\1: ([0-9.]+)",  # backreference
        r"loss=([0-9.]++)",  # possessive quantifier
        "(" * 300 + ")" * 200,  # unbalanced
        r"(?:\S+\s+){900}x",  # linear for RE2, but too costly a program for every line
    ],
)
def test_create_training_job_refuses_a_regex_re2_cannot_run(
    live: DockyardServer, regex: str
) -> None:
    request = job_request("regex-refused", "print('never runs')")
    request["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "loss", "Regex": r"loss=([0-9.]+)"},
        {"Name": "val:loss", "Regex": regex},
    ]
    with pytest.raises(ClientError) as refused:
        live.client().create_training_job(**request)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "MetricDefinitions[1]" in error["Message"] and "'val:loss'" in error["Message"]
    with pytest.raises(ClientError) as missing:
        live.client().describe_training_job(TrainingJobName="regex-refused")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFound"


def test_the_console_form_says_which_regex_it_refused(live: DockyardServer) -> None:
    browser, csrf = sign_in(live, live.credentials())
    live.own_bucket("dockyard-jobs")
    form = {**job_form(csrf, "regex-form"), "metric_name": "acc"}
    form["metric_regex"] = r"acc=(?=\d)([0-9.]+)"
    answer = browser.post("/console/jobs/new", data=form)
    assert answer.status_code == 400
    assert "ValidationException" in answer.text and "MetricDefinitions[0]" in answer.text


def test_a_policy_simulation_of_many_actions_and_resources_answers_in_pages(
    live: DockyardServer,
) -> None:
    """2,000 actions x 2,000 resources (a 200 KB request) asked 4 million evaluations at
    once, for minutes, of one worker and the GIL; now each call answers one page."""
    account_id, key = live.new_account("regex-iam")
    limited = live.new_key(
        account_id,
        json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {"Effect": "Allow", "Action": "iam:*", "Resource": "*"},
                    {
                        "Effect": "Allow",
                        "Action": "sagemaker:Describe*",
                        "Resource": "arn:aws:sagemaker:*:*:*a*a*a*b*",
                    },
                ],
            }
        ),
    )
    iam = live.client("iam", key=limited, read_timeout=60)
    actions = [f"sagemaker:DescribeX{i}" for i in range(2000)]
    resources = [
        f"arn:aws:sagemaker:us-east-1:{account_id}:training-job/{'a' * 40}{i}" for i in range(2000)
    ]
    ask = {"PolicySourceArn": f"arn:aws:iam::{account_id}:user/x", "ActionNames": actions}
    first = iam.simulate_principal_policy(**ask, ResourceArns=resources)
    assert len(first["EvaluationResults"]) == 100 and first["IsTruncated"]
    pairs = [(r["EvalActionName"], r["EvalResourceName"]) for r in first["EvaluationResults"]]
    assert pairs == [(actions[0], resource) for resource in resources[:100]]
    last = iam.simulate_principal_policy(
        **ask, ResourceArns=resources, Marker=str(2000 * 2000 - 3), MaxItems=1000
    )
    assert len(last["EvaluationResults"]) == 3 and not last["IsTruncated"]
    # boto3's paginator walks the pages (three actions x three resources, two at a time).
    pages = iam.get_paginator("simulate_principal_policy").paginate(
        **{**ask, "ActionNames": actions[:3]},
        ResourceArns=resources[:3],
        PaginationConfig={"PageSize": 2},
    )
    decisions = [r["EvalDecision"] for page in pages for r in page["EvaluationResults"]]
    assert decisions == ["implicitDeny"] * 9
    with pytest.raises(ClientError) as refused:
        iam.simulate_principal_policy(**ask, Marker="not-ours")
    assert refused.value.response["Error"]["Code"] == "InvalidInput"


def test_a_filter_pattern_of_hundreds_of_terms_costs_each_call_a_bounded_search(
    live: DockyardServer,
) -> None:
    """filterPattern allows 1,024 characters: 300 two-letter terms. Each was re-encoded
    for each stored line, so one FilterLogEvents call over 8 MB of short lines took
    minutes; now a call searches fewer lines the more terms it has, and the pages still
    find every match."""
    terms = [f"{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(300)]
    # The last line holds every term (a ContainerEntrypoint member is at most 256 long).
    code = (
        "[print('x') for _ in range(100000)]; "
        "print(' '.join(chr(97 + i // 26) + chr(97 + i % 26) for i in range(300)))"
    )
    live.client().create_training_job(**job_request("regex-filter", code))
    job = wait_for(live.client(), "regex-filter", {"Completed", "Failed", "Stopped"}, 120)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    logs = live.client("logs", read_timeout=60)
    ask = {"logGroupName": GROUP, "logStreamNamePrefix": "regex-filter/"}
    found, token, calls = [], None, 0
    while True:
        page = logs.filter_log_events(
            **ask, filterPattern=" ".join(terms), **({"nextToken": token} if token else {})
        )
        calls += 1
        found += [event["message"] for event in page["events"]]
        token = page.get("nextToken")
        if not token:
            break
    assert found == [" ".join(terms)]
    assert calls > 1  # a plain one-term search of the same log takes one call
    plain = logs.filter_log_events(**ask, filterPattern=terms[0])
    assert len(plain["events"]) == 1 and not plain.get("nextToken")


@pytest.mark.parametrize(
    ("operation", "params"),
    [
        ("update_pipeline", {"PipelineName": "p", "PipelineDefinition": " " * 40 + "\u2028"}),
        (
            "update_compute_quota",
            {
                "ComputeQuotaId": "q",
                "TargetVersion": 1,
                "ComputeQuotaTarget": {"TeamName": "a" * 40 + "!"},
            },
        ),
        (
            "update_space",
            {
                "DomainId": "d-x",
                "SpaceName": "s",
                "SpaceSettings": {
                    "JupyterLabAppSettings": {
                        "CodeRepositories": [{"RepositoryUrl": "https://" + "a" * 40 + "!"}]
                    }
                },
            },
        ),
    ],
)
def test_a_value_crafted_against_a_models_pattern_is_refused_at_once(
    live: DockyardServer, operation: str, params: dict[str, Any]
) -> None:
    """Every request is validated against the model first - operations dockyard does not
    implement too - and three of the model's own patterns are exponential for `re`: one
    41-character value held the whole server (even /healthz) for good."""
    client = live.client(read_timeout=60)
    with pytest.raises(ClientError) as refused:
        getattr(client, operation)(**params)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Member must satisfy regular expression pattern" in str(refused.value)
    with urllib.request.urlopen(live.endpoint + "/healthz", timeout=15) as health:
        assert health.status == 200


@pytest.mark.parametrize("path", ["/", "/some-bucket"])
def test_an_unsigned_request_with_a_huge_authorization_header_costs_nothing(
    live: DockyardServer, path: str
) -> None:
    """The credential scope is read from the Authorization header before anything is
    verified (to choose S3 or the API): a regex that split it was quadratic, so anyone
    could send 200 KB of "Credential=" and hold the event loop for over a minute."""
    header = "AWS4-HMAC-SHA256 " + "Credential=" * 20_000
    answers: list[int] = []

    def send() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=120)
        connection.request(
            "POST" if path == "/" else "GET", path, headers={"Authorization": header}
        )
        answers.append(connection.getresponse().status)

    senders = [threading.Thread(target=send, daemon=True) for _ in range(3)]
    for sender in senders:
        sender.start()
    with urllib.request.urlopen(live.endpoint + "/healthz", timeout=15) as health:
        assert health.status == 200
    for sender in senders:
        sender.join(120)
    assert len(answers) == 3 and all(400 <= status < 500 for status in answers)


_OLD_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/[^/]+/([^/]+)/aws4_request")
_HEADER_PARTS = st.sampled_from(
    ["Credential=", "Credential", "=", "/", "//", ",", " ", "\xa0", "a", "K", "s3"]
    + ["aws4_request", "aws4_reques"]
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(_HEADER_PARTS, max_size=30).map("".join))
def test_the_s3_credential_scope_reads_as_its_old_regex_did(header: str) -> None:
    """`addressing.credential_scope` (is it S3? asked of every request but `POST /`,
    before anything is verified) was that regex's search: quadratic where no slash
    follows (a 220 KB header of "Credential=", 50 s). Its one pass answers the same."""
    match = _OLD_CREDENTIAL.search(header)
    assert addressing.credential_scope(header) == (match.groups() if match else None)
