"""The composition root: settings -> database -> clock -> API app -> uvicorn.

This is the one place that wires the layers together; `dockyard serve` calls it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette

from dockyard.api.app import create_app
from dockyard.api.context import ServerState
from dockyard.clock import ManualClock, make_clock
from dockyard.compute.local import LocalBackend
from dockyard.config import Settings, plan_settings
from dockyard.control.jobs import JobsReconciler
from dockyard.control.loop import ControlLoop
from dockyard.control.plans import PlansReconciler
from dockyard.control.pools import PoolsReconciler
from dockyard.secretbox import SecretBox
from dockyard.services import bootstrap, clock_state, fleet
from dockyard.services.bootstrap import DevelopmentAccess
from dockyard.store import migrate
from dockyard.store.db import Database

log = logging.getLogger("dockyard")


@dataclass
class Server:
    state: ServerState
    app: Starlette
    development: DevelopmentAccess


def open_database(settings: Settings) -> Database:
    """Open the database and bring its schema to the newest migration."""
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url)
    migrate.upgrade(db)
    return db


def build(settings: Settings) -> Server:
    db = open_database(settings)
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
    with db.session() as session:
        fleet.sync_fleet(session, plans.fleet, clock.now())
    backend = LocalBackend(settings.data_dir)
    control = ControlLoop(
        [
            ("plans", PlansReconciler(db, clock, plans)),
            ("jobs", JobsReconciler(db, clock, backend, settings, plans)),
            ("pools", PoolsReconciler(db, clock, backend, plans)),
        ]
    )
    # A manual clock's jump wakes the reconcilers at once.
    clock.subscribe(lambda _now: control.nudge())
    box = SecretBox.for_data_dir(settings.data_dir)
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
    )
    return Server(state=state, app=create_app(state), development=development)
