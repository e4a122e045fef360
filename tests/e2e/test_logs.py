"""CloudWatch Logs over a real job's output, and the metrics scraped from it."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.e2e.test_training_jobs import job_request, wait_for
from tests.harness import DockyardServer

GROUP = "/aws/sagemaker/TrainingJobs"
JOB = "logs-and-metrics"
LINES = ["starting", "epoch 1 loss=0.5", "epoch 2 loss=0.25", "accuracy: 0.9", "done"]
# One line: ContainerEntrypoint members must match `.*`, which stops at a newline.
CODE = f"[print(line, flush=True) for line in {LINES!r}]"
DEFINITIONS = [
    {"Name": "loss", "Regex": "loss=([0-9.]+)"},
    {"Name": "acc", "Regex": "accuracy: ([0-9.]+)"},
]


@pytest.fixture(scope="module")
def finished(server: DockyardServer) -> dict[str, Any]:
    """One completed job with MetricDefinitions, shared by this module's tests."""
    for bucket in ("results", "data"):
        (server.data_dir / "s3" / bucket).mkdir(parents=True, exist_ok=True)
    return completed_with_metrics(server, JOB, CODE)


def completed_with_metrics(server: DockyardServer, name: str, code: str) -> dict[str, Any]:
    client = server.client()
    request = job_request(name, code)
    request["AlgorithmSpecification"]["MetricDefinitions"] = DEFINITIONS
    client.create_training_job(**request)
    job = wait_for(client, name, {"Completed", "Failed", "Stopped"})
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    return job


def stream_name(job: dict[str, Any]) -> str:
    return f"{JOB}/algo-1-{int(job['CreationTime'].timestamp())}"


def messages(events: list[dict[str, Any]]) -> list[str]:
    return [event["message"] for event in events]


def test_describe_log_streams_shows_the_instance(
    server: DockyardServer, finished: dict[str, Any]
) -> None:
    logs = server.client("logs")
    streams = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=f"{JOB}/")[
        "logStreams"
    ]
    assert [s["logStreamName"] for s in streams] == [stream_name(finished)]
    stream = streams[0]
    assert stream["firstEventTimestamp"] <= stream["lastEventTimestamp"]
    assert stream["arn"].endswith(f":log-group:{GROUP}:log-stream:{stream_name(finished)}")
    everything = logs.describe_log_streams(
        logGroupName=GROUP, orderBy="LastEventTime", descending=True
    )["logStreams"]
    assert stream_name(finished) in [s["logStreamName"] for s in everything]


def test_get_log_events_returns_the_lines_in_order(
    server: DockyardServer, finished: dict[str, Any]
) -> None:
    logs = server.client("logs")
    name = stream_name(finished)
    page = logs.get_log_events(logGroupName=GROUP, logStreamName=name, startFromHead=True)
    assert messages(page["events"]) == LINES
    again = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, nextToken=page["nextForwardToken"]
    )
    assert again["events"] == [] and again["nextForwardToken"] == page["nextForwardToken"]

    seen: list[str] = []
    token = None
    for _ in range(10):
        kwargs = {"nextToken": token} if token else {"startFromHead": True}
        page = logs.get_log_events(logGroupName=GROUP, logStreamName=name, limit=2, **kwargs)
        seen += messages(page["events"])
        if page["nextForwardToken"] == token:
            break
        token = page["nextForwardToken"]
    assert seen == LINES

    tail = logs.get_log_events(logGroupName=GROUP, logStreamName=name, limit=2)
    assert messages(tail["events"]) == LINES[-2:]
    before = logs.get_log_events(
        logGroupName=GROUP, logStreamName=name, nextToken=tail["nextBackwardToken"], limit=2
    )
    assert messages(before["events"]) == LINES[1:3]


def test_aws_cli_prints_the_log(server: DockyardServer, finished: dict[str, Any]) -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "aws"),
            "logs",
            "get-log-events",
            "--log-group-name",
            GROUP,
            "--log-stream-name",
            stream_name(finished),
            "--start-from-head",
            "--endpoint-url",
            server.endpoint,
            "--output",
            "json",
        ],
        env=server.aws_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert messages(json.loads(result.stdout)["events"]) == LINES


def test_filter_log_events_finds_the_loss_lines(
    server: DockyardServer, finished: dict[str, Any]
) -> None:
    logs = server.client("logs")
    found = logs.filter_log_events(
        logGroupName=GROUP, logStreamNamePrefix=f"{JOB}/", filterPattern="loss"
    )["events"]
    assert messages(found) == ["epoch 1 loss=0.5", "epoch 2 loss=0.25"]
    assert {event["logStreamName"] for event in found} == {stream_name(finished)}
    assert len({event["eventId"] for event in found}) == 2
    phrase = logs.filter_log_events(
        logGroupName=GROUP, logStreamNames=[stream_name(finished)], filterPattern='"epoch 2"'
    )["events"]
    assert messages(phrase) == ["epoch 2 loss=0.25"]
    paged = logs.get_paginator("filter_log_events").paginate(
        logGroupName=GROUP,
        logStreamNames=[stream_name(finished)],
        filterPattern="epoch loss",
        PaginationConfig={"PageSize": 1},
    )
    assert [m for page in paged for m in messages(page["events"])] == LINES[1:3]
    with pytest.raises(ClientError) as error:
        logs.filter_log_events(logGroupName=GROUP, filterPattern="{ $.level = 1 }")
    assert error.value.response["Error"]["Code"] == "InvalidParameterException"


def test_describe_reports_final_metrics(server: DockyardServer, finished: dict[str, Any]) -> None:
    job = server.client().describe_training_job(TrainingJobName=JOB)
    values = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert values == {"loss": 0.25, "acc": 0.9}
    slack = timedelta(seconds=1)
    for metric in job["FinalMetricDataList"]:
        assert job["CreationTime"] - slack <= metric["Timestamp"] <= job["TrainingEndTime"] + slack


def test_other_accounts_and_unknown_streams_are_not_found(
    server: DockyardServer, finished: dict[str, Any]
) -> None:
    _, key = server.new_account("logs-stranger")
    stranger = server.client("logs", key=key)
    with pytest.raises(stranger.exceptions.ResourceNotFoundException) as error:
        stranger.get_log_events(logGroupName=GROUP, logStreamName=stream_name(finished))
    assert error.value.response["Error"]["Message"] == "The specified log stream does not exist."
    assert stranger.describe_log_streams(logGroupName=GROUP)["logStreams"] == []

    logs = server.client("logs")
    with pytest.raises(logs.exceptions.ResourceNotFoundException):
        logs.get_log_events(logGroupName=GROUP, logStreamName=f"{JOB}/algo-2-1")
    with pytest.raises(logs.exceptions.ResourceNotFoundException) as error:
        logs.describe_log_streams(logGroupName="/aws/sagemaker/Endpoints")
    assert error.value.response["Error"]["Message"] == "The specified log group does not exist."
    with pytest.raises(logs.exceptions.InvalidParameterException):
        logs.get_log_events(
            logGroupName=GROUP, logStreamName=stream_name(finished), nextToken="f/garbage"
        )
    with pytest.raises(ClientError) as error:
        logs.create_log_group(logGroupName="/mine")
    assert error.value.response["Error"]["Code"] == "NotImplementedException"


BIG_JOB = "a-big-log"
BIG_LINE = 64000
BIG_LINES = 750  # 48 MB
BIG_CODE = (
    "print('epoch 0 loss=1.0', flush=True); "
    f"[print('x' * {BIG_LINE}) for _ in range({BIG_LINES})]; "
    "print('epoch 9 loss=0.125', flush=True)"
)


def bytes_read(server: DockyardServer) -> int:
    """What the server process has read so far, from files and sockets alike."""
    assert server.process is not None
    io = Path(f"/proc/{server.process.pid}/io").read_text()
    return next(int(line.split()[1]) for line in io.splitlines() if line.startswith("rchar:"))


def test_a_big_log_costs_a_reader_only_what_it_reads(
    server: DockyardServer, finished: dict[str, Any]
) -> None:
    """Issue 12 (3): with a 48 MB log, GetLogEvents and a Describe with MetricDefinitions
    read the whole file on every call (one tenant's log stalled every request)."""
    client = server.client()
    job = completed_with_metrics(server, BIG_JOB, BIG_CODE)
    name = f"{BIG_JOB}/algo-1-{int(job['CreationTime'].timestamp())}"
    logs = server.client("logs")
    budget = 4 * 1024 * 1024  # a page is at most 1 MB; the log is 48

    def costs(call: Any, **kwargs: Any) -> tuple[int, Any]:
        before = bytes_read(server)
        result = call(**kwargs)
        return bytes_read(server) - before, result

    cost, described = costs(client.describe_training_job, TrainingJobName=BIG_JOB)
    assert cost < budget
    assert {m["MetricName"]: m["Value"] for m in described["FinalMetricDataList"]} == {
        "loss": 0.125
    }
    cost, head = costs(
        logs.get_log_events, logGroupName=GROUP, logStreamName=name, startFromHead=True
    )
    assert cost < budget
    assert head["events"][0]["message"] == "epoch 0 loss=1.0"
    assert 1 < len(head["events"]) < BIG_LINES  # 1 MB of events, as CloudWatch pages them
    cost, tail = costs(logs.get_log_events, logGroupName=GROUP, logStreamName=name, limit=1)
    assert cost < budget
    assert messages(tail["events"]) == ["epoch 9 loss=0.125"]
    cost, streams = costs(logs.describe_log_streams, logGroupName=GROUP, logStreamNamePrefix=name)
    assert cost < budget and streams["logStreams"][0]["logStreamName"] == name
    # A search reads a bounded amount per call and says where to go on from.
    cost, first = costs(
        logs.filter_log_events, logGroupName=GROUP, logStreamNames=[name], filterPattern="loss"
    )
    assert cost < budget + 8 * 1024 * 1024
    assert messages(first["events"]) == ["epoch 0 loss=1.0"] and first["nextToken"]
    found = [
        message
        for page in logs.get_paginator("filter_log_events").paginate(
            logGroupName=GROUP, logStreamNames=[name], filterPattern="loss"
        )
        for message in messages(page["events"])
    ]
    assert found == ["epoch 0 loss=1.0", "epoch 9 loss=0.125"]
    # Every event is still there, page by page.
    count, token = 0, None
    while True:
        page = logs.get_log_events(
            logGroupName=GROUP,
            logStreamName=name,
            startFromHead=True,
            **({"nextToken": token} if token else {}),
        )
        count += len(page["events"])
        if page["nextForwardToken"] == token:
            break
        token = page["nextForwardToken"]
    assert count == BIG_LINES + 2
    # The metrics were kept when the job ended: a Describe reads no instance files.
    for scraped in (server.data_dir / "instances").glob(f"*-{BIG_JOB}-*/algo-*/logs/metrics.json"):
        scraped.unlink()
    again = client.describe_training_job(TrainingJobName=BIG_JOB)["FinalMetricDataList"]
    assert again == described["FinalMetricDataList"]
