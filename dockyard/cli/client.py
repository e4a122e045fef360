"""boto3 clients for the people's commands, with the data dir's credentials by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from dockyard.cli.common import fail

Region = Annotated[
    str,
    typer.Option("--region", envvar="AWS_DEFAULT_REGION", help="The region to work in."),
]
DEFAULT_REGION = "us-east-1"


def sagemaker(endpoint_url: str, data_dir: Path, region: str) -> Any:
    """A SageMaker client for dockyard: AWS credentials from the environment or profile if
    set, else the development credentials in the data dir."""
    credentials = Path(data_dir) / "credentials"
    explicit = any(
        os.environ.get(name)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE")
    )
    if not explicit and credentials.exists():
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials.resolve())
    import boto3  # here: `dockyard serve` needs none of it

    session = boto3.session.Session(region_name=region)
    return session.client(
        "sagemaker",
        endpoint_url=endpoint_url,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )


def call(method: Any, **kwargs: Any) -> Any:
    """Call a boto3 method; an AWS error becomes a one-line message and exit status 1."""
    try:
        return method(**kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(f"{error.get('Code')}: {error.get('Message')}") from exc
    except BotoCoreError as exc:
        raise fail(str(exc)) from exc
