"""Network namespaces made in-process are those `ip netns` makes: named, up, removable."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from dockyard.compute import sandbox_netns as netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def name() -> Iterator[str]:
    found = f"dockyard-test-{uuid.uuid4().hex[:12]}"
    yield found
    netns.delete(found)


def test_a_namespace_is_named_up_and_apart_from_the_caller(name: str) -> None:
    own = os.readlink("/proc/self/ns/net")
    path = netns.add(name)
    assert path == f"/run/netns/{name}"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert name in listed.split()
    inside = subprocess.run(
        ["nsenter", f"--net={path}", "--", "ip", "-o", "link", "show"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(inside) == 1 and ": lo:" in inside[0] and ",UP," in inside[0]  # only loopback
    # Neither this process nor any of its threads moved into it.
    assert os.readlink("/proc/self/ns/net") == own
    for task in os.listdir("/proc/self/task"):
        assert os.readlink(f"/proc/self/task/{task}/ns/net") == own

    netns.delete(name)
    assert (
        name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    )
    assert not os.path.exists(path)
    netns.delete(name)  # safe to repeat


def test_a_name_in_use_is_refused(name: str) -> None:
    netns.add(name)
    with pytest.raises(netns.NetnsError, match="File exists"):
        netns.add(name)
    assert name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
