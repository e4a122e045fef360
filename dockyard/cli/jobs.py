"""`dockyard jobs`: run a training script from a directory and follow it, without boto3.

A person with a `train.py` should not have to hand-write a CreateTrainingJob request,
pack and upload their code, and poll DescribeTrainingJob to see what happened. These
commands do what the SageMaker SDK's `Estimator.fit()` does (script mode: the code as a
tar.gz on S3, named by the `sagemaker_program`/`sagemaker_submit_directory`
hyperparameters) and then show the job as it moves, using only the public APIs (the
code goes up through S3's), so everything here works the same against real SageMaker
apart from the role it names.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from rich.markup import escape
from rich.table import Table

from dockyard.cli.client import DEFAULT_REGION, Region, call, sagemaker
from dockyard.cli.common import DEFAULT_DATA, DEFAULT_ENDPOINT, DataDir, EndpointUrl, console, fail
from dockyard.clock import monotonic, wall_now
from dockyard.defaults import DEFAULT_BUCKET
from dockyard.domain.job_paths import sdk_string

app = typer.Typer(help="Training jobs: run a script, follow it, read its logs, stop it.")

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TERMINAL = frozenset({"Completed", "Failed", "Stopped"})
POLL_SECONDS = 0.5
# What a server without CloudWatch Logs answers (routed but unhandled, or not routed).
UNAVAILABLE = frozenset({"NotImplementedException", "UnknownOperationException"})
SKIPPED_DIRS = frozenset({"__pycache__", ".git"})
# RoleArn is required by the API but dockyard does not check it; any valid ARN will do.
ROLE_ARN = "arn:aws:iam::000000000000:role/dockyard"
NAME_MAX = 63


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def default_name(directory: Path, now: datetime) -> str:
    """`<dir name>-<YYYYmmdd-HHMMSS>`, lower-cased, only [a-z0-9-], at most 63 characters."""
    stamp = now.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    base = re.sub(r"[^a-z0-9-]+", "-", directory.resolve().name.lower()).strip("-") or "job"
    return f"{base[: NAME_MAX - len(stamp) - 1].rstrip('-')}-{stamp}"


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values or []:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise fail(f"{what} {value!r} is not KEY=VALUE")
        pairs[key] = rest
    return pairs


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
        raise fail(f"{uri!r} is not an s3://bucket/key URI")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def pack(directory: Path, archive: Path) -> int:
    """Pack DIR's contents (not DIR itself) into a tar.gz, without caches and VCS data."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if SKIPPED_DIRS.intersection(Path(info.name).parts) else info

    archive.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(directory.iterdir()):
            if path.name in SKIPPED_DIRS:
                continue
            tar.add(path, arcname=path.name, filter=keep)
            count += 1
    return count


def _s3_client(endpoint_url: str, s3_endpoint_url: str | None, region: str) -> Any:
    """The S3 service the server's instances read: dockyard's own, on its endpoint and
    with the caller's keys; or, for a server started with --s3-endpoint-url, that one
    (with the DOCKYARD_S3_* keys the server uses too)."""
    import boto3  # here: `dockyard serve` needs none of it

    if s3_endpoint_url:
        return boto3.client(
            "s3",
            endpoint_url=s3_endpoint_url,
            region_name=os.environ.get("DOCKYARD_S3_REGION", "us-east-1"),
            aws_access_key_id=os.environ.get("DOCKYARD_S3_ACCESS_KEY_ID") or None,
            aws_secret_access_key=os.environ.get("DOCKYARD_S3_SECRET_ACCESS_KEY") or None,
        )
    return boto3.session.Session(region_name=region).client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def code_bucket(s3: Any, endpoint_url: str, region: str, external: bool) -> str:
    """The bucket for the caller's code: `dockyard-jobs` when it is theirs (the
    development account's on a new server), else the SageMaker SDK's default bucket of
    their account, `sagemaker-<region>-<account>`, made when missing."""
    buckets = [DEFAULT_BUCKET]
    if not external:
        import boto3  # here: `dockyard serve` needs none of it

        sts = boto3.session.Session(region_name=region).client("sts", endpoint_url=endpoint_url)
        account = call(sts.get_caller_identity)["Account"]
        buckets.append(f"sagemaker-{region}-{account}")
    for bucket in buckets:
        try:
            s3.create_bucket(Bucket=bucket)
            return bucket
        except ClientError as exc:
            if _error_code(exc) == "BucketAlreadyOwnedByYou" or (
                external and _error_code(exc) == "BucketAlreadyExists"
            ):
                return bucket
            if _error_code(exc) not in ("BucketAlreadyExists", "AccessDenied"):
                raise fail(f"cannot create bucket {bucket}: {exc}") from exc
        except BotoCoreError as exc:
            raise fail(f"cannot reach the S3 service: {exc}") from exc
    raise fail(f"no bucket for the code: {', '.join(buckets)} belong to other accounts")


def upload_source(s3: Any, bucket: str, directory: Path, name: str) -> str:
    """Pack DIR and upload it for the job to read; returns its s3:// URI."""
    key = f"code/{name}/source.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "source.tar.gz"
        pack(directory, archive)
        try:
            s3.upload_file(str(archive), bucket, key)
        except (ClientError, BotoCoreError) as exc:
            raise fail(f"cannot upload the code to s3://{bucket}/{key}: {exc}") from exc
    return f"s3://{bucket}/{key}"


def _check_output_bucket(s3: Any, output: str, endpoint_url: str) -> None:
    bucket, _ = _split_s3(output)
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        raise fail(
            f"cannot write to bucket {bucket!r} ({_error_code(exc) or exc}); make one of "
            f"yours with: aws s3 mb s3://{bucket} --endpoint-url {endpoint_url}"
        ) from exc


def _channels(values: list[str] | None) -> list[dict[str, Any]]:
    channels = []
    for name, uri in _pairs(values, "--channel").items():
        _split_s3(uri)
        channels.append(
            {
                "ChannelName": name,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": uri,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
            }
        )
    return channels


def new_transitions(job: dict[str, Any], seen: set[tuple[str, str]]) -> list[str]:
    """Lines for transitions (or updated messages of one) not printed yet, oldest first."""
    lines = []
    for transition in job.get("SecondaryStatusTransitions", []):
        pair = (transition["Status"], transition.get("StatusMessage", ""))
        if pair not in seen:
            seen.add(pair)
            lines.append(f"{pair[0]} — {pair[1]}" if pair[1] else pair[0])
    return lines


def follow(client: Any, name: str, reader: LogReader | None) -> dict[str, Any]:
    """Print each new secondary-status transition, and the job's log lines where the
    server has CloudWatch Logs, until the job ends; returns its last view."""
    seen: set[tuple[str, str]] = set()
    while True:
        job = call(client.describe_training_job, TrainingJobName=name)
        for line in new_transitions(job, seen):
            console.print(f"{_when(wall_now())[11:]}  {escape(line)}")
        # Read after the describe, so a job seen ended has had all its lines shown.
        reader = _read_quietly(reader)
        if job["TrainingJobStatus"] in TERMINAL:
            return job
        time.sleep(POLL_SECONDS)


def _read_quietly(reader: LogReader | None) -> LogReader | None:
    """Read new log lines; a server without Logs (or any Logs error) just means no logs."""
    if reader is None:
        return None
    try:
        reader.read()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code not in UNAVAILABLE:
            console.print(f"[dim]not showing logs: {escape(str(code))}[/dim]")
        return None
    except BotoCoreError as exc:
        console.print(f"[dim]not showing logs: {escape(str(exc))}[/dim]")
        return None
    return reader


def _summary(job: dict[str, Any]) -> None:
    status = job["TrainingJobStatus"]
    colour = {"Completed": "green", "Failed": "red", "Stopped": "yellow"}.get(status, "white")
    console.print(f"[{colour}]{job['TrainingJobName']}: {status}[/{colour}]")
    if job.get("FailureReason"):
        console.print(f"  reason: {escape(job['FailureReason'])}")
    artifacts = job.get("ModelArtifacts", {}).get("S3ModelArtifacts")
    if artifacts:
        console.print(f"  artifacts: {artifacts}")


@app.command()
def run(
    directory: Annotated[
        Path,
        typer.Argument(exists=True, file_okay=False, dir_okay=True, help="The code to run."),
    ],
    entry_point: str = typer.Option(..., "--entry-point", help="The script in DIR, e.g. train.py"),
    name: str = typer.Option(None, "--name", help="Default: <dir name>-<YYYYmmdd-HHMMSS>."),
    instance_type: str = typer.Option("ml.m5.xlarge", "--instance-type"),
    instance_count: int = typer.Option(1, "--instance-count", min=1),
    hyperparameter: Annotated[
        list[str] | None,
        typer.Option(
            "--hyperparameter", help="KEY=VALUE, repeatable; passed to the script as --KEY VALUE."
        ),
    ] = None,
    channel: Annotated[
        list[str] | None,
        typer.Option(
            "--channel", help="NAME=s3://bucket/prefix, repeatable; read via SM_CHANNEL_NAME."
        ),
    ] = None,
    output: str = typer.Option(
        None,
        "--output",
        help="S3OutputPath [default: output/ in the bucket the code goes to].",
        show_default=False,
    ),
    max_runtime: int = typer.Option(3600, "--max-runtime", min=1, help="Seconds."),
    no_follow: bool = typer.Option(False, "--no-follow", help="Start the job and return."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
    s3_endpoint_url: str | None = typer.Option(
        None,
        "--s3-endpoint-url",
        envvar="DOCKYARD_S3_ENDPOINT_URL",
        help="The S3 service the server uses (its --s3-endpoint-url); keys from "
        "DOCKYARD_S3_ACCESS_KEY_ID / DOCKYARD_S3_SECRET_ACCESS_KEY. Default: dockyard's "
        "own S3, on --endpoint-url.",
    ),
) -> None:
    """Pack DIR, upload it and run ENTRY_POINT as a training job; follow it to the end."""
    if not (directory / entry_point).is_file():
        raise fail(f"no {entry_point} in {directory}")
    name = name or default_name(directory, wall_now())
    hyperparameters = _pairs(hyperparameter, "--hyperparameter")
    channels = _channels(channel)
    client = sagemaker(endpoint_url, data_dir, region)  # settles the credentials first
    s3 = _s3_client(endpoint_url, s3_endpoint_url, region)
    bucket = code_bucket(s3, endpoint_url, region, external=bool(s3_endpoint_url))
    if output is None:
        output = f"s3://{bucket}/output"
    else:
        _check_output_bucket(s3, output, s3_endpoint_url or endpoint_url)
    source = upload_source(s3, bucket, directory, name)
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": "python:3.11", "TrainingInputMode": "File"},
        "RoleArn": ROLE_ARN,
        # The SageMaker SDK JSON-encodes its own hyperparameters; the toolkit decodes them.
        "HyperParameters": {
            **hyperparameters,
            "sagemaker_program": json.dumps(entry_point),
            "sagemaker_submit_directory": json.dumps(source),
        },
        "OutputDataConfig": {"S3OutputPath": output},
        "ResourceConfig": {
            "InstanceType": instance_type,
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 30,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime},
    }
    if channels:
        request["InputDataConfig"] = channels
    arn = call(client.create_training_job, **request)["TrainingJobArn"]
    console.print(f"started {arn}")
    console.print(f"  code: {source}")
    if no_follow:
        console.print(
            f"follow it with: dockyard jobs show {name}  (or: dockyard jobs logs {name})"
        )
        return
    try:
        job = follow(client, name, LogReader(_logs_client(endpoint_url, data_dir, region), name))
    except KeyboardInterrupt:
        console.print(f"\nstopped following; {name} keeps running (dockyard jobs stop {name})")
        raise typer.Exit(130) from None
    _summary(job)
    if job["TrainingJobStatus"] != "Completed":
        raise typer.Exit(1)


@app.command("ls")
def list_jobs(
    status: str = typer.Option(None, "--status", help="e.g. InProgress, Completed, Failed."),
    name_contains: str = typer.Option(None, "--name-contains"),
    max_items: int = typer.Option(50, "--max", min=1, help="At most this many jobs."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """List training jobs, newest first."""
    client = sagemaker(endpoint_url, data_dir, region)
    request: dict[str, Any] = {"SortBy": "CreationTime", "SortOrder": "Descending"}
    if status:
        request["StatusEquals"] = status
    if name_contains:
        request["NameContains"] = name_contains
    table = Table("Name", "Status", "Secondary", "Created (UTC)", "Ended (UTC)")
    pages = client.get_paginator("list_training_jobs").paginate(
        **request, PaginationConfig={"MaxItems": max_items, "PageSize": min(max_items, 100)}
    )
    for job in _items(pages, "TrainingJobSummaries"):
        table.add_row(
            job["TrainingJobName"],
            job["TrainingJobStatus"],
            job.get("SecondaryStatus", "-"),
            _when(job.get("CreationTime")),
            _when(job.get("TrainingEndTime")),
        )
    console.print(table)


def _items(pages: Any, key: str) -> Iterator[dict[str, Any]]:
    try:
        for page in pages:
            yield from page[key]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(f"{error.get('Code')}: {error.get('Message')}") from exc
    except BotoCoreError as exc:
        raise fail(str(exc)) from exc


@app.command()
def show(
    name: str = typer.Argument(help="The job's name."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Show a job: its status, times, resources, results and status transitions."""
    client = sagemaker(endpoint_url, data_dir, region)
    job = call(client.describe_training_job, TrainingJobName=name)
    resources = job["ResourceConfig"]
    console.print(f"[bold]{job['TrainingJobName']}[/bold]  {job['TrainingJobArn']}")
    rows = [
        ("status", f"{job['TrainingJobStatus']} / {job.get('SecondaryStatus', '-')}"),
        ("instances", f"{resources.get('InstanceType')} × {resources.get('InstanceCount')}"),
        ("created", _when(job.get("CreationTime"))),
        ("started", _when(job.get("TrainingStartTime"))),
        ("ended", _when(job.get("TrainingEndTime"))),
        ("training seconds", str(job.get("TrainingTimeInSeconds", "-"))),
        ("billable seconds", str(job.get("BillableTimeInSeconds", "-"))),
        ("max runtime", f"{job['StoppingCondition'].get('MaxRuntimeInSeconds', '-')} s"),
        ("failure reason", job.get("FailureReason", "-")),
        ("artifacts", job.get("ModelArtifacts", {}).get("S3ModelArtifacts", "-")),
        ("output", job["OutputDataConfig"].get("S3OutputPath", "-")),
    ]
    for label, value in rows:
        console.print(f"  {label + ':':<18}{escape(str(value))}")
    hyperparameters = job.get("HyperParameters", {})
    if hyperparameters:
        console.print("  hyperparameters:")
        for key, value in sorted(hyperparameters.items()):
            console.print(f"    {escape(key)} = {escape(sdk_string(value))}")
    table = Table("Status", "Start (UTC)", "End (UTC)", "Message")
    for transition in job.get("SecondaryStatusTransitions", []):
        table.add_row(
            transition["Status"],
            _when(transition.get("StartTime")),
            _when(transition.get("EndTime")),
            escape(transition.get("StatusMessage", "")),
        )
    console.print(table)


@app.command()
def stop(
    name: str = typer.Argument(help="The job's name."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Stop a running job: SIGTERM, a grace period, then SIGKILL; it ends Stopped."""
    client = sagemaker(endpoint_url, data_dir, region)
    call(client.stop_training_job, TrainingJobName=name)
    job = call(client.describe_training_job, TrainingJobName=name)
    console.print(f"asked {name} to stop; it is {job['TrainingJobStatus']} now")
    console.print(f"follow it with: dockyard jobs show {name}")


def _logs_client(endpoint_url: str, data_dir: Path, region: str) -> Any:
    # sagemaker() settles which credentials to use (it points boto3 at the data dir's
    # development credentials unless the environment names others); reuse that choice.
    sagemaker(endpoint_url, data_dir, region)
    import boto3  # here: `dockyard serve` needs none of it

    return boto3.session.Session(region_name=region).client(
        "logs",
        endpoint_url=endpoint_url,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )


def _label(stream: str) -> str:
    """`job/algo-2-1700000000` -> `algo-2`."""
    host = stream.split("/", 1)[-1]
    return re.sub(r"-\d+$", "", host)


class LogReader:
    """Reads every stream of a job from where it last stopped (GetLogEvents tokens)."""

    def __init__(self, logs: Any, name: str) -> None:
        self.logs = logs
        self.name = name
        self.tokens: dict[str, str | None] = {}

    def streams(self) -> list[str]:
        pages = self.logs.get_paginator("describe_log_streams").paginate(
            logGroupName=LOG_GROUP, logStreamNamePrefix=f"{self.name}/"
        )
        return sorted(s["logStreamName"] for page in pages for s in page["logStreams"])

    def read(self) -> int:
        """Print the events that arrived since the last read; returns how many.

        AWS errors are raised as they are: `jobs logs` reports them, `jobs run` carries
        on without logs."""
        streams = self.streams()
        for stream in streams:
            self.tokens.setdefault(stream, None)
        prefixed = len(self.tokens) > 1
        printed = 0
        for stream in sorted(self.tokens):
            while True:
                request: dict[str, Any] = {
                    "logGroupName": LOG_GROUP,
                    "logStreamName": stream,
                    "startFromHead": True,
                }
                token = self.tokens[stream]
                if token is not None:
                    request["nextToken"] = token
                page = self.logs.get_log_events(**request)
                for event in page["events"]:
                    message = event["message"].rstrip("\n")
                    line = f"[{_label(stream)}] {message}" if prefixed else message
                    console.print(line, markup=False, highlight=False, soft_wrap=True)
                    printed += 1
                self.tokens[stream] = page.get("nextForwardToken")
                if not page["events"] or page.get("nextForwardToken") in (None, token):
                    break
        return printed


def _read_or_fail(reader: LogReader) -> int:
    try:
        return reader.read()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(f"{error.get('Code')}: {error.get('Message')}") from exc
    except BotoCoreError as exc:
        raise fail(str(exc)) from exc


@app.command()
def logs(
    name: str = typer.Argument(help="The job's name."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Keep reading until it ends."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Region = DEFAULT_REGION,
) -> None:
    """Print a job's log events from CloudWatch Logs (/aws/sagemaker/TrainingJobs)."""
    client = sagemaker(endpoint_url, data_dir, region)
    call(client.describe_training_job, TrainingJobName=name)
    reader = LogReader(_logs_client(endpoint_url, data_dir, region), name)
    if not follow_:
        if _read_or_fail(reader) == 0 and not reader.tokens:
            console.print(f"no log streams for {name} yet")
        return
    try:
        while True:
            # Read the status first: a job that had ended before this read, and showed
            # nothing new in it, has nothing more to say.
            status = call(client.describe_training_job, TrainingJobName=name)["TrainingJobStatus"]
            started = monotonic()
            if _read_or_fail(reader) == 0 and status in TERMINAL:
                return
            time.sleep(max(0.0, POLL_SECONDS - (monotonic() - started)))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
