"""The backend seam stays small (issue 26): `Backend` is the lifecycle only, and every
registered backend has all of it; node access and fleet discovery are capabilities a
backend declares by having them."""

from __future__ import annotations

import importlib
import inspect
import logging

import pytest

from dockyard.compute.backends import registry
from dockyard.compute.backends.protocol import (
    Backend,
    FleetDiscovery,
    InstanceRecords,
    NodeAccess,
    fleet_discovery,
    node_access,
)
from dockyard.compute.wire.spec import JobSpec


def _members(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def test_a_backend_is_ten_members_at_most() -> None:
    assert len(_members(Backend)) <= 10


def test_every_registered_backend_has_the_whole_protocol() -> None:
    for name, module_name in registry.BACKENDS.items():
        module = importlib.import_module(module_name)
        made = inspect.signature(module.create).return_annotation
        cls = getattr(module, made) if isinstance(made, str) else made
        for protocol in (Backend, InstanceRecords, NodeAccess):
            missing = _members(protocol) - set(dir(cls))
            assert not missing, f"{name} lacks {sorted(missing)} of {protocol.__name__}"


def test_capabilities_are_what_a_backend_has() -> None:
    class Bare:
        pass

    assert node_access(Bare()) is None and fleet_discovery(Bare()) is None
    from dockyard.compute.backends.ray_cluster import RayBackend

    assert issubclass(RayBackend, FleetDiscovery) and issubclass(RayBackend, NodeAccess)


def test_a_spec_with_keys_an_agent_does_not_know_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Unknown keys (a newer control plane's) are ignored, not silently: the agent's log
    names them."""
    with caplog.at_level(logging.WARNING, logger="dockyard.compute.wire.spec"):
        spec = JobSpec.from_dict({"job_name": "j", "from_the_future": 1})
    assert spec == JobSpec(job_name="j")
    assert "from_the_future" in caplog.text
