"""Clear errors for refused egress, inside the sandbox (docs/spec/host-limits.md#hl-decisions: "a refused connection fails
fast ... with a message that says why").

The host's egress proxy is the enforcement point (``workers.egress.proxy``): whatever tenant code
does, a refused connection is reset there. But a reset says nothing; so the runtime, before any
tenant code runs, wraps ``socket.socket.connect``/``connect_ex`` and ``socket.getaddrinfo`` with the
same decision (``takohost.domain.egress.decide`` on the Space's rules): a refused endpoint raises
``ConnectionRefusedError`` with ``egress to 10.0.0.5:5432 refused: private address`` (and a
refused name ``socket.gaierror`` with the rule), before a packet is sent. Tenant code that removes
the wrappers gains nothing but the plain reset. The wrappers know only what the Space may know:
its rules, never the host's own addresses or services.

A connection to a loopback address on a port the proxy does not listen on stays inside the
context's own network namespace (a server the tenant started itself may be there): it is tried,
and only when nothing answers does the error say that egress to it is refused.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any

from takohost.domain import egress

__all__ = ["install"]


def install(*, rules: egress.SpaceRules, listen_ports: tuple[int, ...], test_public: tuple[str, ...] = ()) -> None:
    """Wrap ``socket`` for ``rules`` (the Space's), where ``listen_ports`` are the ports the host's
    proxy listens on in this context's namespace and ``test_public`` the test-only public CIDRs."""
    policy = egress.Policy(
        space_rules=rules, test_public=tuple(ipaddress.ip_network(c, strict=False) for c in test_public)
    )
    ports = frozenset(listen_ports)
    base = socket.socket
    plain_connect = base.connect
    plain_connect_ex = base.connect_ex
    plain_getaddrinfo = socket.getaddrinfo

    def refusal(sock: Any, address: Any) -> tuple[egress.Verdict | None, bool]:
        """(the refusal or ``None``, whether the connection stays in the context: try it first)."""
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type & 0xF != socket.SOCK_STREAM:
            return None, False
        try:
            host, port = address[0], int(address[1])
            ip = egress.unwrap(ipaddress.ip_address(str(host).split("%")[0]))
        except (TypeError, ValueError, IndexError):
            return None, False  # a name (resolved by the kernel's caller) or a bad address: the call says
        verdict = egress.decide(policy, address=ip, port=port)
        if verdict.allowed:
            return None, False
        return verdict, ip.is_loopback and port not in ports

    def connect(self: socket.socket, address: Any) -> None:
        verdict, local = refusal(self, address)
        if verdict is None:
            return plain_connect(self, address)
        if local:
            try:
                return plain_connect(self, address)
            except ConnectionRefusedError:
                pass  # nothing of the context's own listens there
        raise ConnectionRefusedError(errno.ECONNREFUSED, verdict.message(_ip(address[0]), int(address[1])))

    def connect_ex(self: socket.socket, address: Any) -> int:
        verdict, local = refusal(self, address)
        if verdict is None or local:
            return plain_connect_ex(self, address)
        return errno.ECONNREFUSED

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, (str, bytes)):
            name = host.decode("idna", "replace") if isinstance(host, bytes) else host
            if name and not _is_address(name):
                verdict = egress.decide_name(policy, name=name)
                if not verdict.allowed:
                    raise socket.gaierror(socket.EAI_NONAME, f"egress to {name} refused: {verdict.reason}")
        return plain_getaddrinfo(host, port, *args, **kwargs)

    connect.__doc__ = plain_connect.__doc__
    connect_ex.__doc__ = plain_connect_ex.__doc__
    getaddrinfo.__doc__ = plain_getaddrinfo.__doc__
    base.connect = connect  # type: ignore[method-assign,assignment]
    base.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = getaddrinfo


def _ip(host: Any) -> egress.Address | str:
    try:
        return egress.unwrap(ipaddress.ip_address(str(host).split("%")[0]))
    except ValueError:
        return str(host)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        return False
    return True
