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


def _session(data_dir: Path, region: str) -> Any:
    """A boto3 session: AWS credentials from the environment or profile if set, else the
    development credentials in the data dir."""
    credentials = Path(data_dir) / "credentials"
    explicit = any(
        os.environ.get(name)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE")
    )
    if not explicit and credentials.exists():
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials.resolve())
    import boto3  # here: `dockyard serve` needs none of it

    return boto3.session.Session(region_name=region)


def sagemaker(endpoint_url: str, data_dir: Path, region: str) -> Any:
    """A SageMaker client for dockyard, with `_session`'s credentials."""
    session = _session(data_dir, region)
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


def signed_headers(
    data_dir: Path, region: str, method: str, url: str, data: bytes = b"", **headers: str
) -> dict[str, str]:
    """The headers that sign a request to one of dockyard's own endpoints with SigV4
    (service `sagemaker`), as a SageMaker client signs (the Host header is the URL's).
    A random X-Dockyard-Nonce is signed too: the server accepts each signature of a
    node command or shell once, and two of the same request in one second would
    otherwise be signed alike."""
    import secrets

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = _session(data_dir, region).get_credentials()
    if credentials is None:
        raise fail("no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or pass --data-dir")
    headers = {**headers, "X-Dockyard-Nonce": secrets.token_hex(16)}
    request = AWSRequest(method=method, url=url, data=data, headers=headers)
    SigV4Auth(credentials.get_frozen_credentials(), "sagemaker", region).add_auth(request)
    return dict(request.prepare().headers)


def signed_post(
    endpoint_url: str,
    data_dir: Path,
    region: str,
    path: str,
    body: dict[str, Any],
    timeout: float = 3700,
) -> tuple[int, dict[str, Any]]:
    """POST JSON to one of dockyard's own endpoints (`/_dockyard/...`), signed with SigV4
    (service `sagemaker`) as a SageMaker client signs; answer (status, JSON answer)."""
    import json
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode()
    url = endpoint_url.rstrip("/") + path
    headers = signed_headers(
        data_dir, region, "POST", url, data, **{"Content-Type": "application/json"}
    )
    prepared = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(prepared, timeout=timeout) as response:
            return response.status, dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            answer = dict(json.loads(exc.read()))
        except ValueError:
            answer = {"__type": f"HTTP {exc.code}", "message": str(exc)}
        return exc.code, answer
    except urllib.error.URLError as exc:
        raise fail(f"cannot reach dockyard at {endpoint_url}: {exc.reason}") from exc
