"""The fake backend is a Backend and nothing more: the control-plane tests that run on it
prove the ten required members are enough (issue 26)."""

from __future__ import annotations

import inspect

from dockyard.clock import ManualClock
from dockyard.compute.backends.protocol import Backend, fleet_discovery, node_access
from dockyard.compute.wire.spec import JobSpec
from tests.control.fake_backend import FakeBackend, FakeInstances
from tests.control.world import START


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")}


def test_the_fake_has_exactly_the_protocols_members() -> None:
    assert _public(FakeBackend) == _public(Backend)
    assert len(_public(Backend)) == 10
    backend = FakeInstances(ManualClock(START)).backend
    # No optional capability: the control plane runs without them.
    assert node_access(backend) is None and fleet_discovery(backend) is None
    for name in _public(Backend) - {"records"}:
        ours = inspect.signature(getattr(FakeBackend, name))
        theirs = inspect.signature(getattr(Backend, name))
        assert list(ours.parameters) == list(theirs.parameters), name


def test_a_second_launch_of_an_attempt_is_a_no_op_and_a_later_attempt_is_fresh() -> None:
    instances = FakeInstances(ManualClock(START))
    backend = instances.backend
    spec = JobSpec(job_name="j")
    first = backend.launch("key", [spec])
    assert backend.launch("key", [spec]) == first and len(instances.launched) == 1
    instances.report("key", phase="training")
    instances.report("key", phase="stopped", stop_reason="stop")
    assert not backend.alive(first[0])  # no keep-alive: its agent went
    again = backend.launch("key", [JobSpec(job_name="j", attempt=2)])
    assert again == first and len(instances.launched) == 2
    assert backend.poll(again[0]) == {"phase": "launching"} and backend.alive(again[0])


def test_assign_needs_a_home_and_release_answers_once_none_runs() -> None:
    instances = FakeInstances(ManualClock(START))
    backend = instances.backend
    try:
        backend.assign("nowhere", "next", [JobSpec(job_name="next")])
    except FileNotFoundError:
        pass
    else:
        raise AssertionError("assign to a missing home must fail")
    backend.launch("home", [JobSpec(job_name="first", keep_alive_seconds=60)])
    instances.report("home", phase="training")
    instances.finish("home")
    assert backend.healthy("home", ["algo-1"])  # parked, waiting for the next job
    (run,) = backend.assign("home", "next", [JobSpec(job_name="next")])
    assert backend.alive(run) and backend.poll(run) == {"phase": "launching"}
    instances.report("next", phase="training")
    instances.finish("next")
    assert not backend.healthy("home", ["algo-1"])  # the next job kept nothing
    assert backend.release("home", ["algo-1"]) is True
    assert backend.purge("next") and backend.records.launched_spec("next", "algo-1") is None
