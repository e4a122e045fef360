"""`dockyard accounts` and `dockyard keys`: operators manage identities on the database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dockyard.cli.common import DEFAULT_DATA, DataDir, console, fail
from dockyard.clock import RealClock
from dockyard.config import load_settings
from dockyard.secretbox import SecretBox
from dockyard.services import accounts as account_service
from dockyard.services.errors import ServiceError

accounts_app = typer.Typer(
    help="Create and list accounts (works on the database; no server needed)."
)
keys_app = typer.Typer(
    help="Create and list access keys (works on the database; no server needed)."
)

ConfigFile = Annotated[
    Path | None,
    typer.Option("--config", help="The server's config file.", envvar="DOCKYARD_CONFIG"),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="Defaults to SQLite in the data dir.",
        envvar="DOCKYARD_DATABASE_URL",
    ),
]


def _open(data_dir: Path, config: Path | None, database_url: str | None):  # type: ignore[no-untyped-def]
    settings = load_settings(config, data_dir=data_dir, database_url=database_url)
    # Here, not at the top: every `dockyard` command imports this module, and the server
    # module brings in all of the API.
    from dockyard.server import open_database

    return settings, open_database(settings)


@accounts_app.command("create")
def create_account(
    name: str = typer.Argument(help="A unique name for the account."),
    account_id: str | None = typer.Option(None, "--id", help="12 digits; random when omitted."),
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an account."""
    _, db = _open(data_dir, config, database_url)
    try:
        with db.session() as session:
            account = account_service.create_account(session, RealClock().now(), name, account_id)
    except ServiceError as exc:
        raise fail(exc.message) from exc
    console.print(f"created account {account.id} ({account.name})")
    console.print(f"give it a key with: dockyard keys create --account {account.id}")


@accounts_app.command("ls")
def list_accounts(
    data_dir: DataDir = DEFAULT_DATA, config: ConfigFile = None, database_url: DatabaseUrl = None
) -> None:
    """List accounts."""
    _, db = _open(data_dir, config, database_url)
    with db.session() as session:
        rows = account_service.list_accounts(session)
        table = Table("Account", "Name", "Created")
        for row in rows:
            table.add_row(row.id, row.name, row.created_at.isoformat(timespec="seconds"))
    console.print(table)


@keys_app.command("create")
def create_key(
    account: str = typer.Option(..., "--account", help="Account id or name."),
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="An IAM-style policy document (JSON file) limiting what the key may do; "
            "without one the key may do everything in its account.",
        ),
    ] = None,
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create an access key; its secret is shown once and stored encrypted."""
    policy_text: str | None = None
    if policy is not None:
        try:
            policy_text = policy.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read the policy file {policy}: {exc}") from exc
    settings, db = _open(data_dir, config, database_url)
    box = SecretBox.for_data_dir(settings.data_dir)
    try:
        with db.session() as session:
            created = account_service.create_access_key(
                session, RealClock().now(), box, account, policy=policy_text
            )
    except ServiceError as exc:
        raise fail(exc.message) from exc
    console.print(f"account:               {created.account_id}")
    console.print(f"aws_access_key_id:     {created.access_key_id}")
    console.print(f"aws_secret_access_key: {created.secret_access_key}")
    if policy is not None:
        console.print(f"policy:                {policy}")
    console.print("the secret is not shown again.")


@keys_app.command("ls")
def list_keys(
    account: str | None = typer.Option(None, "--account", help="Only this account's keys."),
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """List access keys (never their secrets)."""
    _, db = _open(data_dir, config, database_url)
    with db.session() as session:
        account_id = account_service.find_account(session, account).id if account else None
        table = Table("Access key", "Account", "Policy", "Created")
        for row in account_service.list_access_keys(session, account_id):
            table.add_row(
                row.access_key_id,
                row.account_id,
                "yes" if row.policy else "-",
                row.created_at.isoformat(timespec="seconds"),
            )
    console.print(table)
