"""`dockyard env`: the shell exports that point AWS tools and the SageMaker SDK here.

    eval "$(dockyard env)"

writes two files beside the credentials in the data dir and prints the exports that
name them: an AWS config whose profile sends every service dockyard answers
(SageMaker, S3, STS, IAM, CloudWatch Logs, Service Quotas) to the endpoint - boto3,
the aws CLI and both SageMaker SDKs then need no `endpoint_url` - and a SageMaker SDK
config with the default bucket (the SDK otherwise derives `sagemaker-<region>-<account>`
and would create it) and telemetry off (its calls home have nowhere to go).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from dockyard.cli.common import DEFAULT_DATA, DEFAULT_ENDPOINT, DataDir, EndpointUrl, fail
from dockyard.config import load_settings
from dockyard.defaults import DEFAULT_BUCKET
from dockyard.secretbox import write_private

AWS_CONFIG = "aws-config"
SDK_CONFIG = "sagemaker-config.yaml"
# Each service's key in an AWS config `services` section (its botocore service id,
# lower-case with underscores).
SERVICES = ("sagemaker", "s3", "sts", "iam", "cloudwatch_logs", "service_quotas")


def aws_config(endpoint_url: str, region: str) -> str:
    lines = [
        "[default]",
        f"region = {region}",
        "services = dockyard",
        "s3 =",
        "    addressing_style = path",
        "",
        "[services dockyard]",
    ]
    for service in SERVICES:
        lines += [f"{service} =", f"    endpoint_url = {endpoint_url}"]
    return "\n".join(lines) + "\n"


def sdk_config(bucket: str) -> str:
    return (
        "SchemaVersion: '1.0'\n"
        "SageMaker:\n"
        "  PythonSDK:\n"
        "    Modules:\n"
        "      TelemetryOptOut: true\n"
        "      Session:\n"
        f"        DefaultS3Bucket: {bucket}\n"
    )


def env(
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
    region: Annotated[
        str | None, typer.Option(help="The region clients use [default: the server's].")
    ] = None,
    bucket: Annotated[
        str, typer.Option(help="The SageMaker SDK's default bucket.")
    ] = DEFAULT_BUCKET,
) -> None:
    """Print shell exports that point boto3, the aws CLI and the SageMaker SDK here."""
    data = Path(data_dir).resolve()
    credentials = data / "credentials"
    if not credentials.is_file():
        raise fail(f"{credentials} does not exist: start the server (`make run`) first")
    chosen = region or load_settings().default_region
    write_private(data / AWS_CONFIG, aws_config(endpoint_url.rstrip("/"), chosen))
    write_private(data / SDK_CONFIG, sdk_config(bucket))
    exports = {
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_CONFIG_FILE": str(data / AWS_CONFIG),
        "AWS_DEFAULT_REGION": chosen,
        "SAGEMAKER_USER_CONFIG_OVERRIDE": str(data / SDK_CONFIG),
        # No instance metadata service to ask for credentials or a region.
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for name, value in exports.items():
        typer.echo(f"export {name}={shlex.quote(value)}")
