"""`dockyard accounts` and `dockyard keys`: operators manage identities on the database."""

from __future__ import annotations

import configparser
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
    help="Create, list, disable, enable and delete access keys (works on the database; "
    "no server needed, and a running server on the same data dir stops accepting a "
    "disabled or deleted key at once)."
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
        table = Table("Access key", "Account", "Status", "Policy", "Created")
        for row in account_service.list_access_keys(session, account_id):
            table.add_row(
                row.access_key_id,
                row.account_id,
                row.status,
                "yes" if row.policy else "-",
                row.created_at.isoformat(timespec="seconds"),
            )
    console.print(table)


KeyId = Annotated[str, typer.Argument(help="The access key id (AKIA...).")]


def _development_key(data_dir: Path) -> str | None:
    from dockyard.services.bootstrap import CREDENTIALS_FILE

    credentials = configparser.ConfigParser()
    try:
        credentials.read(Path(data_dir) / CREDENTIALS_FILE)
        return credentials["default"]["aws_access_key_id"]
    except (KeyError, configparser.Error):
        return None


def _set_status(
    access_key_id: str,
    status: account_service.KeyStatus,
    data_dir: Path,
    config: Path | None,
    database_url: str | None,
) -> tuple[Path, account_service.KeyStatus]:
    """Set the key's status; answer the data dir and the status it had."""
    settings, db = _open(data_dir, config, database_url)
    try:
        with db.session() as session:
            before = account_service.set_key_status(session, access_key_id, status)
    except ServiceError as exc:
        raise fail(exc.message) from exc
    if status is account_service.KeyStatus.INACTIVE:
        account_service.announce_revocation(
            settings.data_dir, RealClock().now(), access_key_id, "disabled"
        )
    return settings.data_dir, before


@keys_app.command("disable")
def disable_key(
    access_key_id: KeyId,
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Disable a key (IAM's Inactive): every request it signs is refused at once - the
    API, S3, the console (its sessions end), cluster exec and shells (an open shell
    ends). `dockyard keys enable` makes it work again."""
    where, before = _set_status(
        access_key_id, account_service.KeyStatus.INACTIVE, data_dir, config, database_url
    )
    already = " (it already was)" if before is account_service.KeyStatus.INACTIVE else ""
    console.print(f"disabled {access_key_id}{already}; `dockyard keys enable` undoes it")
    if access_key_id == _development_key(where):
        console.print(
            f"it is the development key in {where / 'credentials'}: what uses that file is "
            "refused until it is enabled again (a restart does not replace it; deleting it "
            "does)"
        )


@keys_app.command("enable")
def enable_key(
    access_key_id: KeyId,
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Enable a disabled key again (IAM's Active)."""
    _, before = _set_status(
        access_key_id, account_service.KeyStatus.ACTIVE, data_dir, config, database_url
    )
    already = " (it already was)" if before is account_service.KeyStatus.ACTIVE else ""
    console.print(f"enabled {access_key_id}{already}")


@keys_app.command("delete")
def delete_key(
    access_key_id: KeyId,
    data_dir: DataDir = DEFAULT_DATA,
    config: ConfigFile = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete a key for good: refused at once everywhere, as a disabled key is, and it
    can never be enabled again. Deleting the development key (<data-dir>/credentials)
    is allowed: the next `dockyard serve` writes a new one there."""
    settings, db = _open(data_dir, config, database_url)
    try:
        with db.session() as session:
            account_id = account_service.delete_access_key(session, access_key_id)
    except ServiceError as exc:
        raise fail(exc.message) from exc
    account_service.announce_revocation(
        settings.data_dir, RealClock().now(), access_key_id, "deleted"
    )
    console.print(f"deleted {access_key_id} (account {account_id})")
    if access_key_id == _development_key(settings.data_dir):
        console.print(
            f"it was the development key in {settings.data_dir / 'credentials'}: the next "
            "`dockyard serve` start writes a new one there (or make one now with "
            f"`dockyard keys create --account {account_id}`)"
        )
