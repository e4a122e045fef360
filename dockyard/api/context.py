"""What a handler knows about the request it serves and the server it runs in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from dockyard.clock import Clock
from dockyard.compute.backends.protocol import Backend
from dockyard.config import PlanSettings, Settings
from dockyard.control.loop import ControlLoop
from dockyard.secretbox import SecretBox
from dockyard.services.buckets import BucketStore
from dockyard.services.capacity import CalendarCache
from dockyard.store.db import Database


@dataclass
class ServerState:
    """Everything long-lived the API needs, built once by `dockyard serve`."""

    settings: Settings
    db: Database
    clock: Clock
    box: SecretBox
    operator_token: str
    plans: PlanSettings
    control: ControlLoop
    # The embedded S3 service's front door (api/s3.py), when the server has one; its
    # store, and the account owning a bucket directory made outside the API.
    s3: Callable[[Request], Awaitable[Response]] | None = None
    s3_store: BucketStore | None = None
    # The capacity calendar in memory for offering searches (services.capacity).
    calendars: CalendarCache = field(default_factory=CalendarCache)
    # Where instances run: a cluster node's commands are handed to its agent through it.
    backend: Backend | None = None


@dataclass(frozen=True)
class RequestContext:
    state: ServerState
    account_id: str
    region: str
    access_key_id: str
    policy: str | None
    request_id: str

    @property
    def backend(self) -> Backend:
        """Where instances run, and so what they report (logs, metrics)."""
        if self.state.backend is None:
            raise RuntimeError("this server was built without a backend")
        return self.state.backend

    @property
    def db(self) -> Database:
        return self.state.db

    @property
    def clock(self) -> Clock:
        return self.state.clock


Handler = Callable[[RequestContext, dict[str, Any]], dict[str, Any]]
