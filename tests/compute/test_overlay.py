"""The job network across machines (`agent.overlay`): two hosts in two network
namespaces, joined only by their agents' UDP datagrams, meet by their job addresses -
and a datagram that is not a peer agent's own, with the job's key, gets nowhere."""

from __future__ import annotations

import os
import secrets
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dockyard.compute.agent.overlay import TAG_BYTES, Overlay, OverlayError, address
from dockyard.compute.sandbox import netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/net/tun"),
    reason="needs root and /dev/net/tun",
)
HOSTS = ["algo-1", "algo-2"]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def pair() -> Iterator[tuple[list[str], list[Overlay], dict[str, Any]]]:
    fds = [netns.new(), netns.new()]
    paths = [f"/proc/{os.getpid()}/fd/{fd}" for fd in fds]
    config = {
        "key": secrets.token_hex(16),
        "peers": {host: ["127.0.0.1", free_udp_port()] for host in HOSTS},
    }
    overlays = [Overlay(p, host, HOSTS, config) for p, host in zip(paths, HOSTS, strict=True)]
    yield paths, overlays, config
    for overlay in overlays:
        overlay.close()
    for fd in fds:
        os.close(fd)


def test_two_namespaces_talk_over_tcp_by_job_address(pair: Any) -> None:
    paths, _, _ = pair
    server = netns.listen(paths[0], address(0), 7001, 1)
    client = netns.enter(paths[1], lambda: socket.create_connection((address(0), 7001), 10))
    client.settimeout(60)
    conn, (peer, _) = server.accept()
    assert peer == address(1) == "10.254.0.2"
    payload = os.urandom(2_000_000)  # many packets of at most the MTU
    sending = threading.Thread(target=client.sendall, args=(payload,))
    sending.start()
    received = b""
    conn.settimeout(60)
    while len(received) < len(payload):
        received += conn.recv(1 << 20)
    sending.join()
    assert received == payload
    conn.sendall(b"back")
    client.settimeout(10)
    assert client.recv(4) == b"back"
    for sock in (client, conn, server):
        sock.close()


def udp_packet(source: str, destination: str, port: int, body: bytes) -> bytes:
    """An IPv4 datagram as a TUN device carries it (UDP checksum 0: none)."""
    udp = struct.pack("!HHHH", 40000, port, 8 + len(body), 0) + body
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
        socket.inet_aton(source), socket.inet_aton(destination),
    )  # fmt: skip
    words = sum(struct.unpack("!10H", header))
    while words > 0xFFFF:
        words = (words & 0xFFFF) + (words >> 16)
    return header[:10] + struct.pack("!H", ~words & 0xFFFF) + header[12:] + udp


def test_only_a_peer_agent_with_the_job_key_gets_a_packet_in(pair: Any) -> None:
    import hashlib

    paths, _, config = pair
    target = tuple(config["peers"]["algo-1"])
    inbox = netns.enter(paths[0], lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    inbox.bind((address(0), 9999))
    inbox.settimeout(1.5)
    packet = udp_packet(address(1), address(0), 9999, b"forged")

    def tagged(key: bytes) -> bytes:
        return hashlib.blake2s(packet, key=key, digest_size=TAG_BYTES).digest() + packet

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as outsider:
        # Another job's way out reaches the node's address: a wrong key, then the right
        # key from an endpoint that is not algo-2's agent.
        outsider.sendto(tagged(secrets.token_bytes(16)), target)
        outsider.sendto(tagged(bytes.fromhex(config["key"])), target)
        with pytest.raises(TimeoutError):
            inbox.recv(64)
    # The control: the same datagram sent by algo-2's code arrives.
    sender = netns.enter(paths[1], lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    sender.sendto(b"genuine", (address(0), 9999))
    assert inbox.recv(64) == b"genuine"
    sender.close()
    inbox.close()


def test_a_malformed_overlay_is_refused() -> None:
    fd = netns.new()
    try:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        with pytest.raises(OverlayError, match="every host"):
            only_one = {"algo-1": ["127.0.0.1", 1]}
            Overlay(path, "algo-1", HOSTS, {"key": "00" * 16, "peers": only_one})
        with pytest.raises(OverlayError, match="malformed"):
            Overlay(path, "algo-1", HOSTS, {"key": "zz", "peers": {}})
    finally:
        os.close(fd)
