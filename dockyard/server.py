"""The composition root: settings -> database -> clock -> API app -> uvicorn.

This is the one place that wires the layers together; `dockyard serve` calls it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from dockyard.api import connections
from dockyard.api.app import create_app
from dockyard.api.context import ServerState
from dockyard.api.dispatch import Dispatcher
from dockyard.api.s3 import S3Front
from dockyard.clock import ManualClock, make_clock
from dockyard.compute.backends import registry as backends
from dockyard.compute.backends.protocol import fleet_discovery
from dockyard.compute.backends.wakes import Listener
from dockyard.compute.wire import wake
from dockyard.config import Settings, plan_settings
from dockyard.control.clusters import ClustersReconciler
from dockyard.control.jobs import JobsReconciler
from dockyard.control.loop import ControlLoop
from dockyard.control.plans import PlansReconciler
from dockyard.control.pools import PoolsReconciler
from dockyard.control.purges import PurgesReconciler
from dockyard.defaults import DEFAULT_BUCKET
from dockyard.domain import fleet as fleet_rules
from dockyard.domain import instance_types
from dockyard.s3.gateway import S3Gateway
from dockyard.secretbox import SecretBox
from dockyard.services import bootstrap, buckets, clock_state, fleet
from dockyard.services.bootstrap import DevelopmentAccess
from dockyard.services.buckets import BucketStore
from dockyard.services.capacity import CalendarCache
from dockyard.store import migrate
from dockyard.store.db import Database
from dockyard.web.console import Console

log = logging.getLogger("dockyard")


@dataclass
class Server:
    state: ServerState
    app: Starlette
    development: DevelopmentAccess
    # uvicorn's HTTP protocol, with the deadlines and caps for a request's headers.
    http_protocol: type[asyncio.Protocol]
    gateway: S3Gateway | None = None
    wake: Listener | None = None

    def close(self) -> None:
        if self.wake is not None:
            self.wake.close()
        if self.gateway is not None:
            self.gateway.stop()


def secure_data_dir(data_dir: Path) -> None:
    """The data dir is the server's alone: keys, database, logs, every job's files.

    Everything the server (and the agents it starts) writes from here on is readable
    by its owner only, and what an older version left readable is closed now.
    """
    os.umask(0o077)
    path = Path(data_dir)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    for entry in path.iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o600)
        elif entry.is_dir() and not entry.is_symlink():
            os.chmod(entry, 0o700)


def protect_from_oom_killer() -> None:
    """When the host runs out of memory, a job goes before the server (a job's own
    limit is its cgroup's; this is for the host as a whole). Agents inherit it; the
    jobs' interpreters raise theirs again."""
    try:
        Path("/proc/self/oom_score_adj").write_text("-500")
    except OSError:
        pass  # not root: the kernel's default order


def report_sandbox(settings: Settings) -> None:
    if settings.sandbox == "none":
        log.warning(
            "jobs run UNCONFINED (--unsafe-no-sandbox): a job's code can read this "
            "server's files and keys and reach its port; see docs/security.md"
        )
    for problem in backends.problems(settings):
        log.warning("jobs will fail to start: %s", problem)


def open_database(settings: Settings) -> Database:
    """Open the database and bring its schema to the newest migration."""
    secure_data_dir(settings.data_dir)
    db = Database(settings.resolved_database_url)
    migrate.upgrade(db)
    return db


def _console_routes(state: ServerState, dispatcher: Dispatcher) -> list[BaseRoute]:
    return Console(state, dispatcher).routes()


def build(settings: Settings) -> Server:
    db = open_database(settings)
    protect_from_oom_killer()
    report_sandbox(settings)
    clock = make_clock(settings.clock)
    if isinstance(clock, ManualClock):
        # Resume where the manual clock had got to; it never goes back.
        with db.session() as session:
            saved = clock_state.load(session)
        if saved is not None and saved > clock.now():
            clock.set(saved)
        with db.session() as session:
            clock_state.save(session, clock.now())
    plans = plan_settings(settings)
    backend = backends.create(settings, list(plans.fleet))
    discovery = fleet_discovery(backend)
    if discovery is not None:
        kinds = instance_types.catalogue(settings.extra.get("instance_types"))
        discovered = discovery.discover({name: kind.gpus for name, kind in kinds.items()})
        if discovered:
            declared = settings.extra.get("fleet") or []
            plans = replace(plans, fleet=fleet_rules.merged(declared, discovered))
            log.info("fleet from the backend's machines: %s", discovered)
    with db.session() as session:
        fleet.sync_fleet(session, plans.fleet, clock.now())
    box = SecretBox.for_data_dir(settings.data_dir)
    # The calendar in memory, shared by searches and on-demand placement.
    calendars = CalendarCache()
    jobs = JobsReconciler(db, clock, backend, settings, plans, calendars)
    control = ControlLoop(
        [
            ("plans", PlansReconciler(db, clock, plans)),
            ("jobs", jobs),
            ("clusters", ClustersReconciler(db, clock, backend, settings, box)),
            ("pools", PoolsReconciler(db, clock, backend, plans)),
            ("purges", PurgesReconciler(db, backend)),
        ],
        interval_seconds=settings.reconcile_interval_seconds,
    )
    # A manual clock's jump wakes the reconcilers at once; so does an agent's report.
    clock.subscribe(lambda _now: control.nudge())

    def woken(keys: set[str]) -> None:
        jobs.woken(keys)
        control.nudge(first="jobs")

    listener = Listener(wake.socket_path(settings.data_dir), woken)
    listener.start()
    development = bootstrap.ensure_development_access(
        db, box, settings.data_dir, clock.now(), settings.default_region, plans
    )
    state = ServerState(
        settings=settings,
        db=db,
        clock=clock,
        box=box,
        operator_token=bootstrap.operator_token(settings.data_dir),
        plans=plans,
        control=control,
        calendars=calendars,
        backend=backend,
    )
    gateway = None
    if not settings.s3_endpoint_url:
        # The embedded S3 service, on the same endpoint (docs/s3.md).
        gateway = S3Gateway(Path(settings.data_dir), settings.resolved_database_url)
        gateway.start()
        # A new server has its jobs' bucket, so the README's examples run as written.
        (gateway.store / DEFAULT_BUCKET).mkdir(exist_ok=True)
        state.s3_store = BucketStore(gateway.store, development.account_id)
        with db.read_session() as session:
            buckets.mark_all(session, state.s3_store)
        state.s3 = S3Front(state, state.s3_store, gateway.socket)
    return Server(
        state=state,
        app=create_app(
            state, console=lambda state, dispatcher: Console(state, dispatcher).routes()
        ),
        development=development,
        http_protocol=connections.http_protocol(connections.ConnectionLimits.of(settings)),
        gateway=gateway,
        wake=listener,
    )
