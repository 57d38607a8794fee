"""Egress policy of tenant code: which address, port and name a context may connect to (pure).

The contract (docs/spec/host-limits.md#hl-decisions "Egress"): by default tenant code reaches **public unicast** addresses on
the allowed ports (80 and 443), and nothing else — never loopback, private (RFC 1918, 100.64/10,
ULA ``fc00::/7``), link-local (``169.254/16`` with the cloud metadata address, ``fe80::/10``),
multicast, broadcast, unspecified, the host's own addresses, or the host's own services (its
Postgres, Redis, broker, API and metrics endpoints). An operator may name exceptions: one exact
``address:port`` that would otherwise be refused (a local mock API in development), extra ports,
and deny rules by host-name pattern, CIDR or port, for every Space or for one.

:func:`decide` is the one decision, used by the host's egress proxy (the enforcement point, on the
address actually connected to) and, for a clear error message only, by the sandbox runtime
before a ``connect`` (``takohost.runtime.egress_hook``); the runtime's copy of the policy leaves
out what tenant code must not learn (the host's own addresses and services). Nothing here does
I/O: the host side builds a :class:`Policy` from its configuration.

Standard library only: this module runs in the sandbox too.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Address",
    "DEFAULT_PORTS",
    "Endpoint",
    "Policy",
    "Rule",
    "SpaceRules",
    "Verdict",
    "classify",
    "decide",
    "decide_name",
    "parse_endpoint",
    "parse_rule",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Ports a public address may be reached on unless the operator says otherwise.
DEFAULT_PORTS = (80, 443)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: Never treated as public, whatever a test setting says (docs/spec/host-limits.md#hl-decisions: "127.0.0.1 and the host's
#: services stay refused while it is set").
_NEVER_PUBLIC = frozenset(
    {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"), ipaddress.ip_address("0.0.0.0")}
)


@dataclass(frozen=True)
class Endpoint:
    """One exact ``address:port`` (``port`` 1–65535)."""

    address: Address
    port: int

    def __str__(self) -> str:
        return f"[{self.address}]:{self.port}" if self.address.version == 6 else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Rule:
    """One operator rule. ``action`` is ``"allow"`` or ``"deny"``; it matches by exactly one of
    ``endpoint`` (an exact address and port: the only way to allow a non-public address),
    ``network`` (a CIDR) or ``host`` (a host-name pattern, ``fnmatch`` style on the lower-case
    name: ``*.example.com``), optionally narrowed to ``ports`` (``None``: any port). ``text`` is the
    rule as written, quoted in refusals."""

    action: str
    text: str
    endpoint: Endpoint | None = None
    network: Network | None = None
    host: str | None = None
    ports: frozenset[int] | None = None

    def matches(self, address: Address | None, port: int | None, name: str | None) -> bool:
        """True when the rule covers this connection (``port`` ``None``: a name look-up, which
        any port-narrowed rule also covers, since the port is not known yet)."""
        if self.ports is not None and port is not None and port not in self.ports:
            return False
        if self.endpoint is None and self.network is None and self.host is None:
            return self.ports is not None and port is not None  # a port rule: any address
        if self.endpoint is not None:
            return address == self.endpoint.address and port == self.endpoint.port
        if self.network is not None:
            return address is not None and address.version == self.network.version and address in self.network
        if self.host is not None:
            return name is not None and fnmatch.fnmatchcase(name.lower().rstrip("."), self.host)
        return False


@dataclass(frozen=True)
class SpaceRules:
    """The rules in force for one Space: ``ports`` (public addresses are reached on these),
    ``rules`` (the operator's, every-Space ones first), ``only_hosts`` (when not empty, an
    allow-list: only names matching one of these patterns may be resolved and reached)."""

    ports: frozenset[int] = frozenset(DEFAULT_PORTS)
    rules: tuple[Rule, ...] = ()
    only_hosts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The rules as a JSON value (what the sandbox runtime receives in its job)."""
        return {
            "ports": sorted(self.ports),
            "rules": [rule.text if rule.action == "deny" else "allow " + rule.text for rule in self.rules],
            "onlyHosts": list(self.only_hosts),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SpaceRules:
        """Inverse of :meth:`to_json`; ``ValueError`` for anything else."""
        rules = []
        for text in value.get("rules", []):
            action, _, rest = text.partition(" ") if text.startswith("allow ") else ("deny", "", text)
            rules.append(parse_rule(rest, action=action))
        return cls(
            ports=frozenset(int(p) for p in value.get("ports", DEFAULT_PORTS)),
            rules=tuple(rules),
            only_hosts=tuple(str(h).lower() for h in value.get("onlyHosts", [])),
        )


@dataclass(frozen=True)
class Policy:
    """Everything :func:`decide` needs.

    Attributes:
        space_rules: the rules of the Space whose code connects.
        services: the host's own services (``Endpoint``); never reachable, whatever a rule says.
        own_addresses: the host's own interface addresses; refused unless an ``allow`` rule names
            the exact address and port.
        test_public: test-only (``TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS``): networks treated as public;
            never ``127.0.0.1``, ``::1`` or ``0.0.0.0``, and never a host service.
    """

    space_rules: SpaceRules = field(default_factory=SpaceRules)
    services: frozenset[Endpoint] = frozenset()
    own_addresses: frozenset[Address] = frozenset()
    test_public: tuple[Network, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """``allowed`` and, when refused, ``reason`` (e.g. ``"private address"``)."""

    allowed: bool
    reason: str = ""

    def message(self, address: Address | str, port: int | None) -> str:
        """``egress to 10.0.0.5:5432 refused: private address`` (the text tenant code sees)."""
        where = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        return f"egress to {where}{'' if port is None else f':{port}'} refused: {self.reason}"


_ALLOW = Verdict(True)


def unwrap(address: Address) -> Address:
    """The IPv4 address an IPv6 form stands for (IPv4-mapped ``::ffff:a.b.c.d``, the deprecated
    IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``), else ``address`` itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        packed = int(address)
        if packed >> 32 == 0 and packed > 1:  # ::a.b.c.d (not :: or ::1)
            return ipaddress.IPv4Address(packed)
    return address


def classify(address: Address, *, test_public: tuple[Network, ...] = ()) -> str | None:
    """``None`` for a public unicast address, else why it is not one: ``"loopback address"``,
    ``"private address"``, ``"link-local address"``, ``"multicast address"``, ``"broadcast
    address"``, ``"unspecified address"`` or ``"reserved address"``."""
    address = unwrap(address)
    if test_public and address not in _NEVER_PUBLIC:
        if any(address.version == net.version and address in net for net in test_public):
            return None
    if address.is_unspecified:
        return "unspecified address"
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address"
    if address.is_multicast:
        return "multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address == ipaddress.IPv4Address("255.255.255.255"):
        return "broadcast address"
    if address.is_private or (
        isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10")
    ):
        return "private address"
    if not address.is_global or address.is_reserved:
        return "reserved address"
    return None


def decide(policy: Policy, *, address: Address, port: int | None, name: str | None = None) -> Verdict:
    """May code of ``policy``'s Space connect to ``address`` on ``port`` (a name look-up that
    produced ``address`` when ``port`` is ``None``)? ``name`` is the host name it was resolved
    from, when known. Order: the host's services (never); an ``allow`` rule naming this exact
    address and port (yes); ``deny`` rules; not public (the host's own addresses included); the
    port; the Space's allow-list of names."""
    unwrapped = unwrap(address)
    rules = policy.space_rules
    if port is not None and any(
        unwrap(s.address) == unwrapped and s.port == port for s in policy.services
    ):
        return Verdict(False, "a service of the host")
    for rule in rules.rules:
        if rule.action == "allow" and rule.endpoint is not None and rule.matches(unwrapped, port, name):
            return _ALLOW
    for rule in rules.rules:
        if rule.action == "deny" and rule.matches(unwrapped, port, name):
            return Verdict(False, f"denied by the rule {rule.text!r}")
    reason = classify(unwrapped, test_public=policy.test_public)
    if unwrapped in policy.own_addresses and reason is None and not _made_public(policy, unwrapped):
        return Verdict(False, "the host's own address")
    if reason is not None:
        return Verdict(False, reason)
    if port is not None and port not in rules.ports and not any(
        rule.action == "allow" and rule.matches(unwrapped, port, name) for rule in rules.rules
    ):
        return Verdict(False, f"port {port} is not allowed")
    if rules.only_hosts and not _only(rules, name, unwrapped, port):
        return Verdict(False, "not in the Space's allow-list")
    return _ALLOW


def _made_public(policy: Policy, address: Address) -> bool:
    """True when only a test setting makes ``address`` public (a test server on a loopback alias
    is one of the machine's own addresses, yet must be reachable as a stand-in for the internet)."""
    return bool(policy.test_public) and classify(address) is not None


def _only(rules: SpaceRules, name: str | None, address: Address, port: int | None) -> bool:
    if name is not None and any(fnmatch.fnmatchcase(name.lower().rstrip("."), h) for h in rules.only_hosts):
        return True
    return any(rule.action == "allow" and rule.matches(address, port, name) for rule in rules.rules)


def parse_endpoint(text: str) -> Endpoint:
    """``"10.0.0.5:5432"`` or ``"[fd00::1]:8443"`` → :class:`Endpoint`; ``ValueError`` otherwise
    (a name is not an endpoint: exceptions name addresses)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not ADDRESS:PORT")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r}: {host!r} is not an IP address") from None
    return Endpoint(unwrap(address), int(port))


def parse_rule(text: str, *, action: str) -> Rule:
    """One rule as an operator writes it, for ``action`` ``"allow"`` or ``"deny"``:

    * ``10.0.0.5:5432``, ``[fd00::1]:8443`` — an exact endpoint;
    * ``203.0.113.0/24`` or ``203.0.113.0/24:25`` — a CIDR, optionally one port;
    * ``*.example.com`` or ``api.example.com:8443`` — a host-name pattern, optionally one port;
    * ``:25`` — a port, on any address.

    Only an endpoint may ``allow`` a non-public address; an ``allow`` of a pattern or CIDR with a
    port opens that port for public addresses it covers. ``ValueError`` for anything else."""
    if action not in ("allow", "deny"):
        raise ValueError(f"a rule is allow or deny, not {action!r}")
    raw = text.strip()
    if not raw:
        raise ValueError("an empty egress rule")
    try:
        return Rule(action=action, text=raw, endpoint=parse_endpoint(raw))
    except ValueError:
        pass
    body, ports = raw, None
    head, sep, tail = raw.rpartition(":")
    if sep and tail.isascii() and tail.isdigit() and "]" not in tail and head.count(":") == 0:
        if not 1 <= int(tail) <= 65535:
            raise ValueError(f"{raw!r}: port {tail} is out of range")
        body, ports = head, frozenset({int(tail)})
    if body == "":
        if ports is None:
            raise ValueError(f"{raw!r} names nothing")
        return Rule(action=action, text=raw, ports=ports)
    if "/" in body:
        try:
            network = ipaddress.ip_network(body, strict=False)
        except ValueError:
            raise ValueError(f"{raw!r}: {body!r} is not a CIDR") from None
        return Rule(action=action, text=raw, network=network, ports=ports)
    try:
        ipaddress.ip_address(body)
    except ValueError:
        pass
    else:
        bits = 32 if ":" not in body else 128
        return Rule(action=action, text=raw, network=ipaddress.ip_network(f"{body}/{bits}"), ports=ports)
    pattern = body.lower().rstrip(".")
    if not pattern or any(c.isspace() for c in pattern) or not all(
        c.isalnum() or c in "-._*?" for c in pattern
    ):
        raise ValueError(f"{raw!r} is not a host-name pattern")
    return Rule(action=action, text=raw, host=pattern, ports=ports)


def decide_name(policy: Policy, *, name: str) -> Verdict:
    """May code of ``policy``'s Space look ``name`` up at all? Refused when a ``deny`` rule's
    host-name pattern (without a port) matches it, or when the Space has an allow-list of names
    and it is not on it. (Each address the look-up returns is then decided by :func:`decide`.)"""
    lowered = name.lower().rstrip(".")
    for rule in policy.space_rules.rules:
        if rule.action == "deny" and rule.host is not None and rule.ports is None and rule.matches(None, None, lowered):
            return Verdict(False, f"denied by the rule {rule.text!r}")
    rules = policy.space_rules
    if rules.only_hosts and not any(fnmatch.fnmatchcase(lowered, h) for h in rules.only_hosts):
        if not any(r.action == "allow" and r.host is not None and r.matches(None, None, lowered) for r in rules.rules):
            return Verdict(False, "not in the Space's allow-list")
    return _ALLOW
