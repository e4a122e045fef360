"""One typed settings object, read from a TOML file, then the environment, then flags.

Layering (later wins): built-in defaults < `--config FILE` < `DOCKYARD_*` environment
variables < command-line flags. Nothing here touches the database or the network.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

DEFAULT_ENDPOINT_URL = "http://127.0.0.1:8080"
DEFAULT_DATA_DIR = "./.dockyard"


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    # Empty means SQLite at <data_dir>/dockyard.db.
    database_url: str = ""
    clock: str = "real"
    # Region answered when a request is not otherwise scoped (CLI defaults, ARNs in docs).
    default_region: str = "us-east-1"
    # How far a request's signing time may be from the server's clock (AWS uses 15 minutes).
    max_clock_skew_seconds: int = 900
    log_level: str = "info"
    # An S3-compatible service for s3:// URIs; empty means directories under <data_dir>/s3.
    s3_endpoint_url: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    s3_region: str = "us-east-1"
    # The container registry's address as clients reach it (`http://host:port`, the API's
    # own endpoint), which repository URIs and GetAuthorizationToken's proxyEndpoint
    # name; empty means http://<host>:<port> (127.0.0.1 where host is a wildcard).
    # docs/images.md.
    registry_url: str = ""
    # How jobs are confined: "bwrap" (the sandbox, docs/security.md) or "none"
    # (--unsafe-no-sandbox: jobs run as plain processes of the server's user).
    sandbox: str = "bwrap"
    # How often the reconcilers look again on their own, at the latest. They are woken
    # at once by API calls, by the agents' reports, by manual clock jumps and by the
    # deadlines they keep (a warm pool's, a plan block's); the tick is a safety net.
    reconcile_interval_seconds: int = 10
    # Where instances run: "local" (this host's processes) or "ray" (a Ray cluster's
    # nodes, at ray_address; compute/backends/ray_cluster.py).
    backend: str = "local"
    ray_address: str = ""
    # The reverse proxies (addresses or networks, comma-separated; "*" any) whose
    # X-Forwarded-For and X-Forwarded-Proto are believed: who the client is, and whether
    # it came over https (the console's cookie is then Secure). Empty: none, the headers
    # are ignored and the client is whoever connected.
    forwarded_allow_ips: str = ""
    # Slow and idle clients (api/connections.py, docs/security.md): a request's headers
    # are due within header_timeout_seconds of the connection's start or the previous
    # answer, and may be max_header_bytes at most; while the server waits for a body,
    # it must bring body_min_rate_bytes a second over each body_timeout_seconds of
    # waiting. Bodies being received (but S3 uploads, streamed on) hold body_budget_mib
    # at most across the server; past it a request is answered 503.
    header_timeout_seconds: int = 20
    max_header_bytes: int = 65536
    body_timeout_seconds: int = 20
    body_min_rate_bytes: int = 1024
    body_budget_mib: int = 256
    # Sections later issues read (fleet, prices, quotas ...) are kept whole.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'dockyard.db').resolve()}"


_ENV_PREFIX = "DOCKYARD_"


def _coerce(name: str, value: Any) -> Any:
    target = {f.name: f for f in fields(Settings)}[name]
    try:
        if target.type in ("int", int):
            return int(value)
        if target.type in ("Path", Path):
            return Path(str(value)).expanduser()
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name!r} must be a {target.type} (got {value!r})") from exc


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from the file, the environment and explicit overrides (None = unset)."""
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    known = {f.name for f in fields(Settings)} - {"extra"}
    if config_file is not None:
        try:
            raw = tomllib.loads(Path(config_file).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {config_file} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from exc
        server = raw.pop("server", {})
        if not isinstance(server, dict):
            raise ConfigError("[server] in the config file must be a table")
        for key, value in server.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ConfigError(f"unknown setting [server].{key} in {config_file}")
            values[name] = _coerce(name, value)
        extra = raw
    for name in known:
        env = os.environ.get(_ENV_PREFIX + name.upper())
        if env is not None and env != "":
            values[name] = _coerce(name, env)
    for name, value in overrides.items():
        if value is not None:
            values[name] = _coerce(name, value)
    settings = replace(Settings(), **values, extra=extra)
    if settings.clock not in ("real", "manual"):
        raise ConfigError(f"clock must be real or manual (got {settings.clock!r})")
    if settings.sandbox not in ("bwrap", "none"):
        raise ConfigError(f"sandbox must be bwrap or none (got {settings.sandbox!r})")
    # The backend's own settings are checked by its registry entry
    # (`compute.backends.registry.check`).
    _check_proxies(settings.forwarded_allow_ips)
    _check_connection_limits(settings)
    try:
        from dockyard.domain.instance_types import catalogue

        catalogue(settings.extra.get("instance_types"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return settings


def trusted_proxies(value: str) -> list[str]:
    """`forwarded_allow_ips` as a list (empty: trust no proxy's headers)."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _check_connection_limits(settings: Settings) -> None:
    # The API takes bodies of up to 4 MiB: a smaller budget would refuse the largest.
    least = {
        "header_timeout_seconds": 1,
        "max_header_bytes": 8192,
        "body_timeout_seconds": 1,
        "body_min_rate_bytes": 0,
        "body_budget_mib": 8,
    }
    for name, minimum in least.items():
        value = getattr(settings, name)
        if value < minimum:
            raise ConfigError(f"{name} must be at least {minimum} (got {value})")


def _check_proxies(value: str) -> None:
    import ipaddress

    for item in trusted_proxies(value):
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError as exc:
            raise ConfigError(
                "forwarded_allow_ips must list IP addresses or networks (10.0.0.5, "
                f'10.0.0.0/24), or be "*" (got {item!r})'
            ) from exc


@dataclass(frozen=True)
class PlanSettings:
    """Fleet, prices, quotas and budgets: the config's [[fleet]], [prices], [quotas], [billing]."""

    fleet: tuple[dict[str, Any], ...]
    prices: dict[str, Decimal]
    currency: str
    reserved_instance_quota: int
    reserved_instance_quotas: dict[str, int]
    training_instance_quota: int
    training_instance_quotas: dict[str, int]
    warm_pool_instance_quota: int
    warm_pool_instance_quotas: dict[str, int]
    cluster_instance_quota: int
    cluster_instance_quotas: dict[str, int]
    # The development account's applied warm-pool quota per type, set when it is created.
    development_warm_pool_instances: int
    default_budget: Decimal | None
    budgets: dict[str, Decimal | None]
    offering_ttl_seconds: int


def _money(value: Any, where: str) -> Decimal | None:
    if isinstance(value, str) and value.lower() == "unlimited":
        return None
    try:
        amount = Decimal(str(value))
    except ArithmeticError as exc:
        raise ConfigError(f'{where} must be an amount or "unlimited" (got {value!r})') from exc
    if amount < 0 or not amount.is_finite():
        raise ConfigError(f"{where} must not be negative (got {value!r})")
    return amount


def plan_settings(settings: Settings) -> PlanSettings:
    from dockyard import defaults

    extra = settings.extra
    fleet = extra.get("fleet") or defaults.demo_fleet()
    if not isinstance(fleet, list) or not all(isinstance(g, dict) for g in fleet):
        raise ConfigError("[[fleet]] must be a list of tables")
    prices = dict(defaults.PRICES)
    for instance_type, price in dict(extra.get("prices", {})).items():
        amount = _money(price, f"[prices].{instance_type}")
        if amount is None:
            raise ConfigError(f"[prices].{instance_type} must be an amount")
        prices[instance_type] = amount
    quotas = dict(extra.get("quotas", {}))
    per_type = quotas.get("reserved_instances", {})
    billing = dict(extra.get("billing", {}))
    plans = dict(extra.get("plans", {}))
    try:
        return PlanSettings(
            fleet=tuple(fleet),
            prices=prices,
            currency=str(billing.get("currency", defaults.CURRENCY)),
            reserved_instance_quota=int(
                quotas.get("reserved_instances_per_type", defaults.DEFAULT_RESERVED_INSTANCE_QUOTA)
            ),
            reserved_instance_quotas={str(k): int(v) for k, v in dict(per_type).items()},
            training_instance_quota=int(
                quotas.get("training_instances_per_type", defaults.DEFAULT_TRAINING_INSTANCE_QUOTA)
            ),
            training_instance_quotas={
                str(k): int(v) for k, v in dict(quotas.get("training_instances", {})).items()
            },
            warm_pool_instance_quota=int(
                quotas.get(
                    "warm_pool_instances_per_type", defaults.DEFAULT_WARM_POOL_INSTANCE_QUOTA
                )
            ),
            warm_pool_instance_quotas={
                str(k): int(v) for k, v in dict(quotas.get("warm_pool_instances", {})).items()
            },
            cluster_instance_quota=int(
                quotas.get("cluster_instances_per_type", defaults.DEFAULT_CLUSTER_INSTANCE_QUOTA)
            ),
            cluster_instance_quotas={
                str(k): int(v) for k, v in dict(quotas.get("cluster_instances", {})).items()
            },
            development_warm_pool_instances=int(
                quotas.get(
                    "development_warm_pool_instances", defaults.DEVELOPMENT_WARM_POOL_INSTANCES
                )
            ),
            default_budget=_money(billing.get("budget", "unlimited"), "[billing].budget"),
            budgets={
                str(account): _money(amount, f"[billing.budgets].{account}")
                for account, amount in dict(billing.get("budgets", {})).items()
            },
            offering_ttl_seconds=int(plans.get("offering_ttl_seconds", 600)),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid [quotas]/[plans] setting: {exc}") from exc
