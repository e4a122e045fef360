"""The `dockyard` command."""

from __future__ import annotations

import typer

from dockyard import __version__
from dockyard.cli import (
    accounts,
    clock,
    clusters,
    env,
    fleet,
    jobs,
    maintenance,
    plans,
    pools,
    quotas,
    serve,
)

app = typer.Typer(
    help="dockyard: GPU training capacity behind the SageMaker API.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve.serve)
app.add_typer(accounts.accounts_app, name="accounts")
app.add_typer(accounts.keys_app, name="keys")
app.add_typer(clock.app, name="clock")
app.add_typer(plans.app, name="plans")
app.add_typer(jobs.app, name="jobs")
app.add_typer(pools.app, name="pools")
app.add_typer(clusters.app, name="clusters")
app.add_typer(fleet.app, name="fleet")
app.command("env")(env.env)
app.add_typer(maintenance.app, name="maintenance")
app.add_typer(quotas.app, name="quotas")


@app.command()
def version() -> None:
    """Print dockyard's version."""
    typer.echo(__version__)


if __name__ == "__main__":
    app()
