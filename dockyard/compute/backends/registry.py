"""The backends a server can run on, by the name `--backend` gives: a new backend is a
module with a `create(settings, fleet)` (and optionally `check(settings)` and
`problems(settings)`) plus one line here.

A backend's module is imported only when it is chosen (Ray's import takes seconds).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from dockyard.compute.backends.protocol import Backend
from dockyard.config import ConfigError, Settings

BACKENDS = {
    "local": "dockyard.compute.backends.local",
    "ray": "dockyard.compute.backends.ray_cluster",
}


def _module(name: str) -> ModuleType:
    if name not in BACKENDS:
        choices = " or ".join(sorted(BACKENDS))
        raise ConfigError(f"backend must be {choices} (got {name!r})")
    return importlib.import_module(BACKENDS[name])


def check(settings: Settings) -> None:
    """ConfigError if the settings cannot make the chosen backend (before anything
    starts)."""
    module = _module(settings.backend)
    checker = getattr(module, "check", None)
    if checker is not None:
        checker(settings)


def problems(settings: Settings) -> list[str]:
    """What will keep jobs from starting on the chosen backend (its sandbox's tools
    missing, say), for the server's start-up report; nothing if none."""
    module = _module(settings.backend)
    reporter = getattr(module, "problems", None)
    return list(reporter(settings)) if reporter is not None else []


def create(settings: Settings, fleet: list[dict[str, Any]]) -> Backend:
    """The chosen backend, for the declared fleet (config `[[fleet]]` groups)."""
    check(settings)
    backend: Backend = _module(settings.backend).create(settings, fleet)
    return backend
