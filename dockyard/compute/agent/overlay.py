"""The job network across machines: `algo-1..N` on different nodes as one network.

Locally a job's instances share one network namespace and meet on its loopback. On the
Ray backend each instance runs on a node of its own, in a network namespace of its own,
so its agent joins them the way WireGuard-style overlays do: a TUN device `dy0` in the
instance's namespace holds the job's address of that host (`algo-N` is 10.254.x.y,
`address`), and the agent, outside the sandbox, carries each IP packet the instance sends
to another host's address in a UDP datagram to that host's agent (its node address and
port), which writes it into its own `dy0`. Every protocol works over it (TCP, UDP, any
port), as on a VPC, and the sandbox's `/etc/hosts` names each host by its address.

A datagram carries a keyed BLAKE2s tag of the job's own secret (given to its agents in
`job.json`, never to the code): a datagram from anyone else - another job's instance
reaching the node's address through its way out - is dropped, as is one whose inner
source is not the address of the peer it came from, or whose destination is not this
host. Packets are IPv4 and at most `MTU` bytes, so a datagram fits a 1500-byte network.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import select
import socket
import struct
import threading
from collections.abc import Mapping
from typing import Any

from dockyard.compute.sandbox.netns import enter

DEVICE = b"dy0"
MTU = 1400
TAG_BYTES = 16
_TUNSETIFF = 0x400454CA
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_SIOCSIFADDR = 0x8916
_SIOCSIFNETMASK = 0x891C
_SIOCSIFMTU = 0x8922
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


class OverlayError(Exception):
    """The job network could not be brought up; str() says why."""


def address(rank: int) -> str:
    """The job address of the host at `rank` (algo-1 is rank 0): 10.254.0.1 and on."""
    number = rank + 1
    if not 0 < number < 65535:
        raise OverlayError(f"a job network holds at most 65534 hosts (rank {rank})")
    return f"10.254.{number >> 8}.{number & 0xFF}"


def addresses(hosts: list[str]) -> dict[str, str]:
    return {host: address(rank) for rank, host in enumerate(hosts)}


def _ifreq_address(value: str) -> bytes:
    return struct.pack("16sH2s4s8s", DEVICE, socket.AF_INET, b"\0\0", socket.inet_aton(value), b"")


def _make_device(own: str) -> int:
    """In the instance's namespace (the calling thread is in it): `dy0` with the host's
    address on the job's /16, up; answer its descriptor."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", DEVICE, _IFF_TUN | _IFF_NO_PI))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock, _SIOCSIFADDR, _ifreq_address(own))
            fcntl.ioctl(sock, _SIOCSIFNETMASK, _ifreq_address("255.255.0.0"))
            fcntl.ioctl(sock, _SIOCSIFMTU, struct.pack("16si", DEVICE, MTU))
            request = struct.pack("16sH", DEVICE, 0)
            (flags,) = struct.unpack_from("H", fcntl.ioctl(sock, _SIOCGIFFLAGS, request), 16)
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH", DEVICE, flags | _IFF_UP))
    except OSError:
        os.close(fd)
        raise
    return fd


class Overlay:
    """This host's end of its job's network, carried by two threads until `close`."""

    def __init__(self, namespace: str, host: str, hosts: list[str], config: Mapping[str, Any]):
        self.host = host
        try:
            self._key = bytes.fromhex(str(config["key"]))
            peers = {str(h): (str(e[0]), int(e[1])) for h, e in dict(config["peers"]).items()}
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise OverlayError(f"job.json's overlay is malformed: {exc!r}") from exc
        if len(self._key) < 16 or set(peers) != set(hosts):
            raise OverlayError("job.json's overlay must give a 16-byte key and every host")
        self._own = socket.inet_aton(address(hosts.index(host)))
        # Job address (4 bytes) -> the peer's node endpoint; this host's own is bound.
        self._peers = {
            socket.inet_aton(address(rank)): peers[h] for rank, h in enumerate(hosts) if h != host
        }
        self._stopping = threading.Event()
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._udp.bind(peers[host])
        except OSError as exc:
            self._udp.close()
            raise OverlayError(f"cannot listen on {peers[host]}: {exc}") from exc
        try:
            self._tun = enter(namespace, lambda: _make_device(socket.inet_ntoa(self._own)))
        except Exception as exc:
            self._udp.close()
            raise OverlayError(f"cannot make the job's network device: {exc}") from exc
        self._threads = [
            threading.Thread(target=self._outbound, name="overlay-out", daemon=True),
            threading.Thread(target=self._inbound, name="overlay-in", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _tag(self, packet: bytes) -> bytes:
        return hashlib.blake2s(packet, key=self._key, digest_size=TAG_BYTES).digest()

    def _outbound(self) -> None:
        while not self._stopping.is_set():
            ready, _, _ = select.select([self._tun], [], [], 0.5)
            if not ready:
                continue
            try:
                packet = os.read(self._tun, 65535)
            except OSError:
                return
            if len(packet) < 20 or packet[0] >> 4 != 4:
                continue  # IPv4 only (the kernel's IPv6 chatter goes nowhere)
            peer = self._peers.get(packet[16:20])
            if peer is not None:
                try:
                    self._udp.sendto(self._tag(packet) + packet, peer)
                except OSError:
                    continue  # a lost datagram: TCP inside sends it again

    def _inbound(self) -> None:
        senders = {endpoint: source for source, endpoint in self._peers.items()}
        while not self._stopping.is_set():
            ready, _, _ = select.select([self._udp], [], [], 0.5)
            if not ready:
                continue
            try:
                datagram, sender = self._udp.recvfrom(65535)
            except OSError:
                return
            tag, packet = datagram[:TAG_BYTES], datagram[TAG_BYTES:]
            if len(packet) < 20 or not hmac.compare_digest(tag, self._tag(packet)):
                continue
            if senders.get(sender) != packet[12:16] or packet[16:20] != self._own:
                continue
            try:
                os.write(self._tun, packet)
            except OSError:
                continue

    def close(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._udp.close()
        os.close(self._tun)
