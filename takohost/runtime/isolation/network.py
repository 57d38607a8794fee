"""The network of a context with public egress: an empty network namespace whose only way out is
the host's egress proxy (docs/spec/host-limits.md#hl-decisions "Egress"; docs/egress.md).

A context's network namespace has no interface but its loopback. :func:`configure` (in the child,
right after ``unshare(CLONE_NEWNET)``, while it still may; over route netlink, with requests
packed once in the zygote) brings ``lo`` up and makes **every**
address local to the namespace (``local 0.0.0.0/0 dev lo`` and ``local ::/0 dev lo`` in the local
routing table: the kernel's "AnyIP"). :func:`listeners` then opens, in the namespace, one TCP
listener per egress port and one UDP socket on port 53; the child hands them to the host (its
``hello`` frame carries them) and closes its own copies before any tenant code runs.

So a ``connect`` to any address and port of the internet lands, inside the namespace, on a
listener that the host's proxy accepts from: the accepted socket's local address is the address
and port the tenant asked for (the proxy checks *that*, connects out from the host's namespace
and relays), and a name look-up lands on the proxy's DNS responder. Nothing else leaves the
namespace by construction — there is no route, interface or address that leads out: TCP Fast Open
(``sendto`` with ``MSG_FASTOPEN``), raw and UDP sockets, ``listen()`` without ``bind()``, IPv6 and
abstract Unix names all stay inside the namespace, which only this context (and the proxy's
listeners) are in. A port nobody listens on answers with a reset at once.

Standard library only: this runs in the sandbox child before its hardening.
"""

from __future__ import annotations

import os
import socket
import struct

__all__ = [
    "DNS_PORT",
    "LOOPBACK_INDEX",
    "NetworkUnavailable",
    "configure",
    "link_up_message",
    "listeners",
    "local_route_message",
]

DNS_PORT = 53

_RTM_NEWLINK, _RTM_NEWROUTE = 16, 24
_IFF_UP = 0x1
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_NLMSG_ERROR = 2
_RT_TABLE_LOCAL = 255
_RTPROT_STATIC = 4
_RT_SCOPE_HOST = 254
_RTN_LOCAL = 2
_RTA_OIF, _RTA_TABLE = 4, 15
#: The loopback's interface index: the kernel gives ``lo`` this number in every network
#: namespace (``LOOPBACK_IFINDEX``, Linux 3.9 and later).
LOOPBACK_INDEX = 1


class NetworkUnavailable(OSError):
    """The namespace's network could not be set up (the kernel refused a request)."""


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack("IHHII", 16 + len(body), kind, _NLM_F_REQUEST | _NLM_F_ACK | flags, seq, 0) + body


def link_up_message(index: int = LOOPBACK_INDEX, *, seq: int = 1) -> bytes:
    """``ip link set <index> up`` as one route-netlink request (pure): ``RTM_NEWLINK`` whose
    ``ifinfomsg`` sets ``IFF_UP`` in ``ifi_change``/``ifi_flags``, asking for an acknowledgement."""
    return _message(_RTM_NEWLINK, 0, seq, struct.pack("BxHiII", socket.AF_UNSPEC, 0, index, _IFF_UP, _IFF_UP))


def local_route_message(family: int, index: int = LOOPBACK_INDEX, *, seq: int) -> bytes:
    """``ip route add local <family's whole space> dev <index> table local`` as one route-netlink
    request (pure), asking for an acknowledgement."""
    attrs = _attr(_RTA_OIF, struct.pack("I", index)) + _attr(_RTA_TABLE, struct.pack("I", _RT_TABLE_LOCAL))
    body = struct.pack(
        "BBBBBBBBI", family, 0, 0, 0, _RT_TABLE_LOCAL, _RTPROT_STATIC, _RT_SCOPE_HOST, _RTN_LOCAL, 0
    )
    return _message(_RTM_NEWROUTE, _NLM_F_CREATE | _NLM_F_EXCL, seq, body + attrs)


#: What :func:`configure` sends, packed once (in the zygote, at import): ``lo`` up, then the
#: IPv4 and the IPv6 route. A child only sends them.
_CONFIGURE = (
    link_up_message(seq=1),
    local_route_message(socket.AF_INET, seq=2),
    local_route_message(socket.AF_INET6, seq=3),
)


def configure() -> bool:
    """Bring ``lo`` up and route every IPv4 and IPv6 address to it, over one route-netlink socket
    with requests packed in advance (:data:`_CONFIGURE`). Returns whether IPv6 is routed too
    (``False`` on a kernel without IPv6). Raises :class:`NetworkUnavailable`."""
    link_up, route4, route6 = _CONFIGURE
    kind = socket.SOCK_RAW | socket.SOCK_CLOEXEC
    with socket.socket(socket.AF_NETLINK, kind, socket.NETLINK_ROUTE) as netlink:
        _request(netlink, link_up, "bringing lo up")
        _request(netlink, route4, "adding the local route (family 2)")
        try:
            _request(netlink, route6, "adding the local route (family 10)")
        except NetworkUnavailable:
            return False
    return True


def _request(netlink: socket.socket, message: bytes, what: str) -> None:
    """Send one request and read its acknowledgement; :class:`NetworkUnavailable` naming ``what``
    and the kernel's reason when refused."""
    netlink.send(message)
    reply = netlink.recv(4096)
    length, kind = struct.unpack_from("IH", reply)
    if kind != _NLMSG_ERROR or length < 20:
        raise NetworkUnavailable(0, f"{what}: unexpected netlink answer {kind}")
    (error,) = struct.unpack_from("i", reply, 16)
    if error != 0:
        raise NetworkUnavailable(-error, f"{what}: {os.strerror(-error)}")


def listeners(ports: tuple[int, ...], *, ipv6: bool, backlog: int = 64) -> list[socket.socket]:
    """In this namespace: one TCP listener on every address for each of ``ports`` and one UDP
    socket on port 53 (last), dual-stack when ``ipv6``. Close-on-exec, blocking. Raises
    ``OSError``."""
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    wildcard = "::" if ipv6 else "0.0.0.0"
    made: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(family, socket.SOCK_STREAM)
            made.append(sock)
            if ipv6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((wildcard, port))
            sock.listen(backlog)
        udp = socket.socket(family, socket.SOCK_DGRAM)
        made.append(udp)
        if ipv6:
            udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        udp.bind((wildcard, DNS_PORT))
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made
