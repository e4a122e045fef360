"""Network namespaces made in-process: apart from the caller, loopback up, never mounted."""

from __future__ import annotations

import os
import subprocess

import pytest

from dockyard.compute.sandbox import netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _links(path: str) -> list[str]:
    return subprocess.run(
        ["nsenter", f"--net={path}", "--", "ip", "-o", "link", "show"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


def test_a_namespace_is_up_apart_from_the_caller_and_held_by_its_descriptor() -> None:
    own = os.readlink("/proc/self/ns/net")
    mounts = open("/proc/self/mountinfo").read()
    fd = netns.new()
    try:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        assert netns.is_network_namespace(fd)
        assert os.readlink(path) != own and os.readlink(path) == f"net:[{netns.inode(fd)}]"
        links = _links(path)
        assert len(links) == 1 and ": lo:" in links[0] and ",UP," in links[0]  # only loopback
        # Neither this process nor any of its threads moved into it.
        assert os.readlink("/proc/self/ns/net") == own
        for task in os.listdir("/proc/self/task"):
            assert os.readlink(f"/proc/self/task/{task}/ns/net") == own
        # Nothing mounted for it (a mount would be copied into every sandbox), and no
        # child process gets the descriptor.
        assert open("/proc/self/mountinfo").read() == mounts
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


def test_deleting_a_namespace_that_is_not_there_is_harmless() -> None:
    netns.delete("dockyard-test-never-made")
