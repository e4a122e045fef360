"""`dockyard clock`: read or move a manual-clock server's time."""

from __future__ import annotations

import typer

from dockyard.cli.common import (
    DEFAULT_DATA,
    DEFAULT_ENDPOINT,
    DataDir,
    EndpointUrl,
    console,
    operator_request,
)

app = typer.Typer(help="Read or move the server's clock (moving needs --clock manual).")


def _show(view: dict[str, str]) -> None:
    console.print(f"{view['now']}  ({view['kind']} clock)")


@app.command()
def show(endpoint_url: EndpointUrl = DEFAULT_ENDPOINT, data_dir: DataDir = DEFAULT_DATA) -> None:
    """Print the server's current time."""
    _show(operator_request(endpoint_url, data_dir, "/_dockyard/clock"))


@app.command()
def advance(
    duration: str = typer.Argument(help="How far to move, e.g. 30s, 90m, 2h, 1d12h, 1w."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Move the manual clock forward."""
    _show(operator_request(endpoint_url, data_dir, "/_dockyard/clock", {"advance": duration}))


@app.command("set")
def set_(
    instant: str = typer.Argument(
        help="ISO 8601 instant, e.g. 2026-12-01T11:30:00Z, or seconds since the epoch."
    ),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Move the manual clock to an instant (never backwards)."""
    _show(operator_request(endpoint_url, data_dir, "/_dockyard/clock", {"set": instant}))
