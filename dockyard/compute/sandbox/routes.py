"""What a job's way out may not reach: the host itself, and link-local addresses.

slirp4netns connects, from the host, to wherever a job's packets are addressed, with the
host's loopback switched off (`--disable-host-loopback`: 127.0.0.1, and its gateway and
DNS addresses' other ports). That still left two kinds of address that reach more than
the outside world would:

- link-local ones (169.254.0.0/16, fe80::/10): on a cloud host, 169.254.169.254 is the
  instance metadata service, which hands out the instance role's credentials;
- the host's own addresses (its `local` routes: every address of every interface, and
  any local prefix), which reach every service the host listens with on 0.0.0.0.

So the job's network namespace gets routing rules, set by its agent (root) as it makes
the namespace, that refuse both (`prohibit`: a connect fails with EACCES at once); the
job has no capability in the namespace to remove them. The host's addresses are those
it has when the namespace is made. Addresses inside slirp4netns's own network
(10.0.2.0/24) are its virtual hosts there, never the host's, and are left alone.

Python has no netlink API; the messages are those `ip rule add to PREFIX prohibit`
sends, built here (as `sandbox.netns` does for the namespace itself).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable, Iterator

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LINK_LOCAL: tuple[Network, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
)
# slirp4netns's network inside the namespace (its default --cidr).
SLIRP_NETWORK = ipaddress.ip_network("10.0.2.0/24")
# Before the main table's (32766), after the local table's (0): the namespace's own
# addresses (its loopback, algo-1..N) are still its own.
RULE_PRIORITY = 100

# linux/netlink.h, linux/rtnetlink.h, linux/fib_rules.h
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_RTM_NEWRULE = 32
_RTM_GETROUTE = 26
_NLM_F_REQUEST = 0x1
_NLM_F_ACK = 0x4
_NLM_F_EXCL = 0x200
_NLM_F_CREATE = 0x400
_NLM_F_DUMP = 0x300
_FR_ACT_PROHIBIT = 8
_FRA_DST = 1
_FRA_PRIORITY = 6
_RTA_DST = 1
_RTN_LOCAL = 2
_HEADER = "=IHHII"  # struct nlmsghdr
_RTMSG = "=BBBBBBBBI"  # struct rtmsg / struct fib_rule_hdr (the same layout)


class RoutesError(Exception):
    """The rules could not be set; str() says why."""


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack(_HEADER, 16 + len(body), kind, flags, seq, 0) + body


def _replies(sock: socket.socket) -> Iterator[tuple[int, int, bytes]]:
    """(type, seq, payload) of each message the kernel answers, until its last."""
    while True:
        data = sock.recv(1 << 16)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _, seq, _ = struct.unpack_from(_HEADER, data, offset)
            if length < 16:
                return
            yield kind, seq, data[offset + 16 : offset + length]
            offset += (length + 3) & ~3


def host_addresses() -> list[Network]:
    """This network namespace's local prefixes (every address of every interface, and
    any `local` route), but loopback."""
    found: list[Network] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        body = struct.pack(_RTMSG, socket.AF_UNSPEC, 0, 0, 0, 0, 0, 0, 0, 0)
        sock.send(_message(_RTM_GETROUTE, _NLM_F_REQUEST | _NLM_F_DUMP, 1, body))
        for kind, _, payload in _replies(sock):
            if kind == _NLMSG_DONE:
                break
            if kind == _NLMSG_ERROR:
                (code,) = struct.unpack_from("=i", payload)
                raise RoutesError(f"cannot read the host's addresses: {os.strerror(-code)}")
            family, dst_len, _, _, _, _, _, route_type, _ = struct.unpack_from(_RTMSG, payload)
            if route_type != _RTN_LOCAL or family not in (socket.AF_INET, socket.AF_INET6):
                continue
            for attribute_kind, value in _attributes(payload[12:]):
                if attribute_kind == _RTA_DST:
                    address = ipaddress.ip_address(value)
                    network = ipaddress.ip_network(f"{address}/{dst_len}", strict=False)
                    if not network.is_loopback and network not in found:
                        found.append(network)
    return found


def _attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            return
        yield kind, data[offset + 4 : offset + length]
        offset += (length + 3) & ~3


def refused(host: Iterable[Network]) -> list[Network]:
    """What a job's namespace refuses: link-local prefixes and the host's (`host`),
    without those inside slirp4netns's own network."""
    found: list[Network] = list(LINK_LOCAL)
    for network in host:
        if _within(network, SLIRP_NETWORK):
            continue
        if not any(_within(network, known) for known in found):
            found.append(network)
    return found


def _within(network: Network, other: Network) -> bool:
    if isinstance(network, ipaddress.IPv4Network) and isinstance(other, ipaddress.IPv4Network):
        return network.subnet_of(other)
    if isinstance(network, ipaddress.IPv6Network) and isinstance(other, ipaddress.IPv6Network):
        return network.subnet_of(other)
    return False


def prohibit(networks: Iterable[Network]) -> None:
    """In this thread's network namespace: a rule refusing each of `networks`. IPv6's
    are skipped where the kernel has no IPv6 (nothing of it can be reached either)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        for seq, network in enumerate(networks, start=1):
            family = socket.AF_INET if network.version == 4 else socket.AF_INET6
            body = struct.pack(
                _RTMSG, family, network.prefixlen, 0, 0, 0, 0, 0, _FR_ACT_PROHIBIT, 0
            )
            body += _attribute(_FRA_DST, network.network_address.packed)
            body += _attribute(_FRA_PRIORITY, struct.pack("=I", RULE_PRIORITY))
            flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
            sock.send(_message(_RTM_NEWRULE, flags, seq, body))
            code = _acknowledgement(sock, seq)
            if code == 0 or code == errno.EEXIST:
                continue
            if family == socket.AF_INET6 and code in (errno.EAFNOSUPPORT, errno.EOPNOTSUPP):
                continue
            raise RoutesError(f"cannot refuse {network} to the job: {os.strerror(code)}")


def _acknowledgement(sock: socket.socket, seq: int) -> int:
    """The kernel's answer to request `seq`: 0, or the errno it failed with."""
    for kind, answered, payload in _replies(sock):
        if kind == _NLMSG_ERROR and answered == seq:
            (code,) = struct.unpack_from("=i", payload)
            return -code
    raise RoutesError("the kernel did not answer")
