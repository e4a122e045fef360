"""`dockyard quotas`: the operator's side of RequestServiceQuotaIncrease.

An account asks for more through the Service Quotas API; the request waits PENDING
until an operator approves it (the account's quota becomes the requested value) or
denies it. These commands ask the running server, with the data dir's operator key.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import typer
from rich.table import Table

from dockyard.cli.common import (
    DEFAULT_DATA,
    DEFAULT_ENDPOINT,
    DataDir,
    EndpointUrl,
    console,
    operator_request,
)

app = typer.Typer(help="Quota increase requests: list them, approve or deny them (operator).")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@app.command("ls")
def ls(
    account: str = typer.Option(None, "--account", help="Only this account (id or name)."),
    pending: bool = typer.Option(False, "--pending", help="Only requests still PENDING."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """List quota increase requests, oldest first."""
    query = {key: value for key, value in (("account", account), ("pending", pending)) if value}
    path = "/_dockyard/quotas/requests"
    if query:
        path += "?" + urllib.parse.urlencode({k: str(v) for k, v in query.items()})
    rows = operator_request(endpoint_url, data_dir, path)["requests"]
    table = Table(
        "Request", "Account", "Region", "Quota", "Code", "Now", "Wanted", "Status", "Asked (UTC)"
    )
    for row in rows:
        table.add_row(
            row["id"],
            row["account_id"],
            row["region"],
            row["quota_name"],
            row["quota_code"],
            _number(row["current_value"]),
            _number(row["desired_value"]),
            row["status"],
            row["created"][:16].replace("T", " "),
        )
    console.print(table)
    noun = "request" if len(rows) == 1 else "requests"
    console.print(f"{len(rows)} {'pending ' if pending else ''}{noun}")


def _decide(request_id: str, decision: str, endpoint_url: str, data_dir: Path) -> None:
    row = operator_request(
        endpoint_url,
        data_dir,
        f"/_dockyard/quotas/requests/{urllib.parse.quote(request_id, safe='')}",
        {"decision": decision},
    )
    if row["status"] == "APPROVED":
        console.print(
            f"Approved {row['id']}: '{row['quota_name']}' is now {_number(row['desired_value'])} "
            f"for account {row['account_id']} in {row['region']}"
        )
    else:
        console.print(
            f"Denied {row['id']}: '{row['quota_name']}' stays "
            f"{_number(row['current_value'])} for account {row['account_id']} in {row['region']}"
        )


@app.command()
def approve(
    request_id: str = typer.Argument(help="The request's id (see `dockyard quotas ls`)."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Approve a PENDING request: the account's quota becomes the requested value."""
    _decide(request_id, "approve", endpoint_url, data_dir)


@app.command()
def deny(
    request_id: str = typer.Argument(help="The request's id (see `dockyard quotas ls`)."),
    endpoint_url: EndpointUrl = DEFAULT_ENDPOINT,
    data_dir: DataDir = DEFAULT_DATA,
) -> None:
    """Deny a PENDING request: the account's quota stays as it is."""
    _decide(request_id, "deny", endpoint_url, data_dir)
