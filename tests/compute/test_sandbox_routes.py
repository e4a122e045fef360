"""The rules that keep a job's way out off the host and link-local addresses
(`sandbox.routes`), set in a namespace made in-process; tests/e2e/test_sandbox_host.py
attacks them from inside a real job."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket

import pytest

from dockyard.compute.sandbox import netns, routes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def test_the_host_is_every_local_address_but_loopback() -> None:
    found = routes.host_addresses()
    assert not any(network.is_loopback for network in found)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))  # only asks the routing: the host's own address
        own = ipaddress.ip_address(probe.getsockname()[0])
    if not own.is_loopback:
        assert any(own in network for network in found)


def test_what_is_refused() -> None:
    host = [ipaddress.ip_network(n) for n in ("192.0.2.2/32", "10.0.2.15/32", "169.254.3.4/32")]
    refused = routes.refused(host)
    assert ipaddress.ip_network("169.254.0.0/16") in refused
    assert ipaddress.ip_network("fe80::/10") in refused
    assert ipaddress.ip_network("192.0.2.2/32") in refused
    # slirp4netns's own virtual network, and what a link-local prefix holds already.
    assert ipaddress.ip_network("10.0.2.15/32") not in refused
    assert ipaddress.ip_network("169.254.3.4/32") not in refused


def test_a_namespace_refuses_them_and_keeps_its_loopback() -> None:
    fd = netns.new()
    path = f"/proc/{os.getpid()}/fd/{fd}"
    try:
        refused = routes.refused([ipaddress.ip_network("192.0.2.77/32")])
        netns.enter(path, lambda: routes.prohibit(refused))
        netns.enter(path, lambda: routes.prohibit(refused))  # again: harmless

        def probe() -> dict[str, int]:
            # (Without the rules: ENETUNREACH, the namespace has only its loopback.)
            answers = {}
            for address in ("169.254.169.254", "192.0.2.77", "127.0.0.1"):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    answers[address] = sock.connect_ex((address, 9))
            return answers

        got = netns.enter(path, probe)
        assert got["169.254.169.254"] == errno.EACCES and got["192.0.2.77"] == errno.EACCES
        assert got["127.0.0.1"] == 0
    finally:
        os.close(fd)
