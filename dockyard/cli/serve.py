"""`dockyard serve`: run the API server."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from dockyard.cli.common import DEFAULT_ENDPOINT, console, fail
from dockyard.config import ConfigError, Settings, load_settings, trusted_proxies


def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on [default: 127.0.0.1].")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [default: 8080].")] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Where the database, keys and credentials live [default: ./.dockyard]."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="A TOML config file (see docs/configuration.md)."),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db "
            "[default: SQLite in the data dir]."
        ),
    ] = None,
    s3_endpoint_url: Annotated[
        str | None,
        typer.Option(
            help="An S3-compatible endpoint for s3:// URIs (keys from DOCKYARD_S3_ACCESS_KEY_ID "
            "and DOCKYARD_S3_SECRET_ACCESS_KEY) [default: directories under <data-dir>/s3]."
        ),
    ] = None,
    clock: Annotated[
        str | None,
        typer.Option(
            help="real, or manual: time moves only with `dockyard clock` [default: real]."
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="Where instances run: local (this host's processes) or ray (a Ray "
            "cluster's nodes, see --ray-address and docs/ray.md) [default: local]."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster's address (HOST:PORT) for --backend ray."),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="Reverse proxies (IP addresses or networks, comma-separated) whose "
            "X-Forwarded-For and X-Forwarded-Proto are believed, e.g. a TLS-terminating "
            "proxy's address: the console's cookie is then Secure for https clients "
            "(docs/operations.md) [default: none].",
        ),
    ] = None,
    header_timeout: Annotated[
        int | None,
        typer.Option(
            help="Seconds a client has to send a request's headers, from its connection's "
            "start or the previous answer; then 408 and closed [default: 20].",
        ),
    ] = None,
    body_timeout: Annotated[
        int | None,
        typer.Option(
            help="Seconds of waiting over which a request's body must bring "
            "--body-min-rate bytes a second; then 408 and closed [default: 20].",
        ),
    ] = None,
    body_min_rate: Annotated[
        int | None,
        typer.Option(help="Bytes a second a request's body must come at [default: 1024]."),
    ] = None,
    body_budget_mib: Annotated[
        int | None,
        typer.Option(
            help="MiB the request bodies being received may hold across the server (S3 "
            "uploads, streamed, hold none); past it 503 [default: 256].",
        ),
    ] = None,
    unsafe_no_sandbox: Annotated[
        bool,
        typer.Option(
            "--unsafe-no-sandbox",
            help="Run jobs as plain processes of this server's user, without the sandbox "
            "(bubblewrap). A job's code can then read the server's keys and every other "
            "job's files: only for a machine where every job is trusted (docs/security.md).",
        ),
    ] = False,
) -> None:
    """Serve the SageMaker API (POST /), /healthz and /metrics."""
    import uvicorn

    from dockyard.domain.fleet import FleetError
    from dockyard.server import build

    try:
        settings = load_settings(
            config,
            host=host,
            port=port,
            data_dir=data_dir,
            database_url=database_url,
            clock=clock,
            s3_endpoint_url=s3_endpoint_url,
            backend=backend,
            ray_address=ray_address,
            forwarded_allow_ips=forwarded_allow_ips,
            header_timeout_seconds=header_timeout,
            body_timeout_seconds=body_timeout,
            body_min_rate_bytes=body_min_rate,
            body_budget_mib=body_budget_mib,
            sandbox="none" if unsafe_no_sandbox else None,
        )
        from dockyard.compute.backends import registry

        registry.check(settings)
    except ConfigError as exc:
        raise fail(str(exc)) from exc
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        server = build(settings)
    except (ConfigError, FleetError, RuntimeError) as exc:
        raise fail(str(exc)) from exc
    dev = server.development
    endpoint = f"http://{settings.host}:{settings.port}"
    console.print(f"[bold]dockyard[/bold] listening on {endpoint} ({settings.clock} clock)")
    console.print(f"database: {_redact(settings.resolved_database_url)}")
    console.print(_sandbox_line(settings))
    console.print(
        f"development account {dev.account_id}: credentials in {dev.credentials_file}"
        + (" (new)" if dev.created else "")
    )
    console.print(f"  aws_access_key_id     = {dev.access_key_id}")
    console.print(f"  aws_secret_access_key = {dev.secret_access_key}")
    # Lines to paste are never wrapped at the terminal's width.
    console.print("use them with:")
    console.print(
        f"  export AWS_SHARED_CREDENTIALS_FILE={dev.credentials_file.resolve()}", soft_wrap=True
    )
    console.print(f"  export AWS_CONFIG_FILE={dev.config_file.resolve()}", soft_wrap=True)
    console.print(f"  aws sagemaker list-training-jobs --endpoint-url {endpoint}", soft_wrap=True)
    console.print("or point boto3, the aws CLI and the SageMaker SDK here with:")
    options = "" if endpoint == DEFAULT_ENDPOINT else f" --endpoint-url {endpoint}"
    if settings.data_dir != Path(".dockyard"):
        options += f" --data-dir {settings.data_dir}"
    console.print(f'  eval "$({_dockyard_command()} env{options})"', soft_wrap=True)
    console.print(f"or sign in to the web console with them: {endpoint}/console", soft_wrap=True)
    proxies = trusted_proxies(settings.forwarded_allow_ips)
    if proxies:
        console.print(f"behind a proxy: X-Forwarded-For/-Proto believed from {', '.join(proxies)}")
    try:
        uvicorn.run(
            server.app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=False,
            # Deadlines and a size cap for requests' headers (api/connections.py).
            http=server.http_protocol,
            # Only the configured proxies' X-Forwarded-* (uvicorn would believe any
            # local process's by default).
            proxy_headers=bool(proxies),
            forwarded_allow_ips=proxies or None,
        )
    finally:
        server.close()


def _dockyard_command() -> str:
    """How this shell reaches the `dockyard` being run: `make run` does not put .venv/bin
    on the PATH, so the line to paste names the venv's script unless PATH finds it."""
    script = Path(sys.executable).parent / "dockyard"
    if not script.exists():
        return "dockyard"
    found = shutil.which("dockyard")
    if found and Path(found).resolve() == script.resolve():
        return "dockyard"
    relative = os.path.relpath(script)  # .venv/bin/dockyard, as after `make run`
    return str(script) if relative.startswith("..") else relative


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _sandbox_line(settings: Settings) -> str:
    from dockyard.compute.backends import registry

    if settings.sandbox == "none":
        return (
            "[bold red]jobs run unconfined[/bold red] (--unsafe-no-sandbox): see docs/security.md"
        )
    problems = registry.problems(settings)
    if not problems:
        return "jobs run sandboxed (bubblewrap; docs/security.md)"
    return f"[bold red]jobs cannot start[/bold red]: {'; '.join(problems)}"
