"""First start: the development account, its key, and the operator token.

`make run` must leave a person one copy-paste away from a working boto3 or `aws`
call, so the development credentials are written in the AWS shared-credentials
format (mode 0600) beside an AWS config file naming the default region.
"""

from __future__ import annotations

import configparser
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from dockyard.config import PlanSettings
from dockyard.domain.quotas import QuotaKind
from dockyard.secretbox import SecretBox, write_private
from dockyard.services import accounts, quotas
from dockyard.store.db import Database
from dockyard.store.tables import AccessKey, Account

CREDENTIALS_FILE = "credentials"
AWS_CONFIG_FILE = "config"
OPERATOR_KEY_FILE = "operator.key"


@dataclass(frozen=True)
class DevelopmentAccess:
    account_id: str
    access_key_id: str
    secret_access_key: str
    credentials_file: Path
    config_file: Path
    created: bool


def operator_token(data_dir: Path) -> str:
    """The operator token, created on first use; clients read the same file."""
    path = Path(data_dir) / OPERATOR_KEY_FILE
    if not path.exists():
        write_private(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def _read_credentials(path: Path) -> tuple[str, str] | None:
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
        section = parser["default"]
        return section["aws_access_key_id"], section["aws_secret_access_key"]
    except (KeyError, configparser.Error):
        return None


def write_credentials(path: Path, access_key_id: str, secret: str) -> None:
    write_private(
        path,
        f"[default]\naws_access_key_id = {access_key_id}\naws_secret_access_key = {secret}\n",
    )


def _grant_development_quotas(
    session: Session, now: datetime, account_id: str, region: str, settings: PlanSettings
) -> None:
    # AWS starts every account at a warm-pool quota of 0; the development account gets
    # some at once so that trying warm pools after `make run` needs no operator step.
    for quota in quotas.quota_catalog(settings):
        if quota.kind is QuotaKind.WARM_POOL:
            quotas.set_value(
                session,
                now,
                account_id,
                region,
                quota.code,
                settings.development_warm_pool_instances,
            )


def ensure_development_access(
    db: Database,
    box: SecretBox,
    data_dir: Path,
    now: datetime,
    region: str,
    settings: PlanSettings,
) -> DevelopmentAccess:
    data_dir = Path(data_dir)
    credentials_file = data_dir / CREDENTIALS_FILE
    config_file = data_dir / AWS_CONFIG_FILE
    if not config_file.exists():
        write_private(config_file, f"[default]\nregion = {region}\n")
    with db.session() as session:
        account = session.scalar(
            select(Account).where(Account.name == accounts.DEVELOPMENT_ACCOUNT)
        )
        if account is None:
            account = accounts.create_account(session, now, accounts.DEVELOPMENT_ACCOUNT)
            _grant_development_quotas(session, now, account.id, region, settings)
        existing = _read_credentials(credentials_file) if credentials_file.exists() else None
        if existing is not None:
            key = session.get(AccessKey, existing[0])
            if key is not None and key.account_id == account.id:
                return DevelopmentAccess(
                    account.id, existing[0], existing[1], credentials_file, config_file, False
                )
        created = accounts.create_access_key(session, now, box, account.id)
    write_credentials(credentials_file, created.access_key_id, created.secret_access_key)
    return DevelopmentAccess(
        created.account_id,
        created.access_key_id,
        created.secret_access_key,
        credentials_file,
        config_file,
        True,
    )
