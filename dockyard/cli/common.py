"""Options and helpers shared by the client-side commands."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dockyard.config import DEFAULT_DATA_DIR, DEFAULT_ENDPOINT_URL

console = Console()
err_console = Console(stderr=True)

EndpointUrl = Annotated[
    str,
    typer.Option(
        "--endpoint-url",
        envvar="DOCKYARD_ENDPOINT_URL",
        help="Where the dockyard server listens.",
    ),
]
DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="DOCKYARD_DATA_DIR",
        help="The server's data directory (database, keys, credentials).",
    ),
]
DEFAULT_ENDPOINT = DEFAULT_ENDPOINT_URL
DEFAULT_DATA = Path(DEFAULT_DATA_DIR)


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def operator_request(
    endpoint_url: str, data_dir: Path, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Call one of the server's operator endpoints with the data dir's operator key."""
    from dockyard.api.operator import OPERATOR_HEADER
    from dockyard.services.bootstrap import OPERATOR_KEY_FILE

    key_file = data_dir / OPERATOR_KEY_FILE
    if not key_file.exists():
        raise fail(f"no operator key at {key_file}; pass the server's --data-dir")
    request = urllib.request.Request(
        endpoint_url.rstrip("/") + path,
        data=json.dumps(body).encode() if body is not None else None,
        method="POST" if body is not None else "GET",
        headers={
            OPERATOR_HEADER: key_file.read_text().strip(),
            "content-type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("message", str(exc))
        except ValueError:
            message = str(exc)
        raise fail(message) from exc
    except urllib.error.URLError as exc:
        raise fail(f"cannot reach dockyard at {endpoint_url}: {exc.reason}") from exc
