"""The operator's egress configuration: ports, exceptions and per-Space rules, the upstream DNS
resolver, and what the host must never let tenant code reach (docs/spec/host-limits.md#hl-decisions "Egress";
docs/egress.md).

Read from the environment (:func:`load`):

* ``TAKOHOST_EGRESS_PORTS`` — ports public addresses are reached on (default ``80,443``);
* ``TAKOHOST_EGRESS_ALLOW`` — exact ``ADDRESS:PORT`` exceptions for every Space, comma-separated
  (``takohost dev --egress-allow 127.0.0.1:3000`` sets it: a local mock API);
* ``TAKOHOST_EGRESS_RULES_FILE`` — a TOML file of rules for every Space (``[all]``) and for one
  (``[spaces.NAME]``): ``allow`` / ``deny`` lists of rules (``takohost.domain.egress.parse_rule``),
  ``only`` (host-name patterns: an allow-list) and ``ports`` (replaces the default ports);
* ``TAKOHOST_EGRESS_RESOLVER`` — the upstream DNS servers, ``HOST[:PORT]`` comma-separated
  (default: the host's ``/etc/resolv.conf``);
* ``TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS`` — test-only: CIDRs treated as public.

The host's services (:func:`host_services`: its Postgres, Redis and broker, the metrics port, the
API given by ``TAKOHOST_API_URL``) and its own addresses (:func:`own_addresses`) are added to every
Space's :class:`takohost.domain.egress.Policy` on the host only; the sandbox's copy of the rules
(:meth:`EgressConfig.space_rules`) never carries them.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from takohost.domain import egress

__all__ = ["EgressConfig", "current", "host_services", "load", "own_addresses"]

#: Most ports the sandbox listens on for the proxy (one listener each, in every context).
MAX_PORTS = 32
_SERVICE_DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379, "amqp": 5672}


@dataclass(frozen=True)
class EgressConfig:
    """The parsed configuration (see the module docstring). ``listen_ports`` is every port any
    Space may reach (the sandbox listens on all of them; each connection is then decided for its
    own Space)."""

    default: egress.SpaceRules = field(default_factory=egress.SpaceRules)
    spaces: Mapping[str, egress.SpaceRules] = field(default_factory=dict)
    resolvers: tuple[tuple[str, int], ...] = ()
    test_public: tuple[egress.Network, ...] = ()

    def space_rules(self, space: str) -> egress.SpaceRules:
        """The rules of ``space`` (its own section merged over ``[all]``)."""
        return self.spaces.get(space, self.default)

    @property
    def listen_ports(self) -> tuple[int, ...]:
        ports: set[int] = set()
        for rules in (self.default, *self.spaces.values()):
            ports |= rules.ports
            for rule in rules.rules:
                if rule.action == "allow":
                    if rule.endpoint is not None:
                        ports.add(rule.endpoint.port)
                    elif rule.ports:
                        ports |= rule.ports
        ports.discard(53)  # the DNS responder's
        return tuple(sorted(ports))

    def policy(
        self,
        space: str,
        *,
        services: frozenset[egress.Endpoint] = frozenset(),
        own: frozenset[egress.Address] = frozenset(),
    ) -> egress.Policy:
        """The whole policy of ``space`` on the host (with its services and own addresses)."""
        return egress.Policy(
            space_rules=self.space_rules(space), services=services, own_addresses=own, test_public=self.test_public
        )


def _ports(name: str, text: str) -> frozenset[int]:
    ports = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isascii() or not part.isdigit() or not 1 <= int(part) <= 65535:
            raise ValueError(f"{name} must be TCP ports separated by commas, not {text!r}")
        ports.add(int(part))
    if not ports:
        raise ValueError(f"{name} names no port")
    return frozenset(ports)


def _rules(name: str, values: object, *, action: str) -> list[egress.Rule]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{name}: {action} must be a list of strings")
    rules = []
    for text in values:
        try:
            rules.append(egress.parse_rule(text, action=action))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return rules


def _section(name: str, section: object, base: egress.SpaceRules) -> egress.SpaceRules:
    if not isinstance(section, dict):
        raise ValueError(f"{name} must be a table")
    unknown = set(section) - {"allow", "deny", "only", "ports"}
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {', '.join(sorted(unknown))}")
    ports = base.ports
    if "ports" in section:
        raw = section["ports"]
        if not isinstance(raw, list) or not raw or not all(type(p) is int and 1 <= p <= 65535 for p in raw):
            raise ValueError(f"{name}: ports must be a list of TCP ports")
        ports = frozenset(raw)
    rules = [*base.rules]
    rules += _rules(name, section.get("allow", []), action="allow")
    rules += _rules(name, section.get("deny", []), action="deny")
    only = section.get("only", [])
    if not isinstance(only, list) or not all(isinstance(v, str) and v.strip() for v in only):
        raise ValueError(f"{name}: only must be a list of host-name patterns")
    for pattern in only:
        if egress.parse_rule(pattern, action="allow").host is None:
            raise ValueError(f"{name}: only takes host-name patterns, not {pattern!r}")
    return egress.SpaceRules(
        ports=ports,
        rules=tuple(rules),
        only_hosts=tuple(dict.fromkeys([*base.only_hosts, *(p.lower().rstrip(".") for p in only)])),
    )


def _resolvers(text: str) -> tuple[tuple[str, int], ...]:
    found = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("["):
            host, _, port = part[1:].partition("]")
            port = port.lstrip(":")
        elif part.count(":") == 1:
            host, _, port = part.partition(":")
        else:
            host, port = part, ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"TAKOHOST_EGRESS_RESOLVER: {host!r} is not an IP address") from None
        if port and (not port.isdigit() or not 1 <= int(port) <= 65535):
            raise ValueError(f"TAKOHOST_EGRESS_RESOLVER: bad port in {part!r}")
        found.append((host, int(port or 53)))
    return tuple(found)


def load(environ: Mapping[str, str] | None = None) -> EgressConfig:
    """Read the configuration; ``ValueError`` naming the setting for anything wrong."""
    env = os.environ if environ is None else environ
    ports = _ports("TAKOHOST_EGRESS_PORTS", env.get("TAKOHOST_EGRESS_PORTS") or "80,443")
    allow = [p for p in (env.get("TAKOHOST_EGRESS_ALLOW") or "").split(",") if p.strip()]
    rules: list[egress.Rule] = []
    for text in allow:
        try:
            endpoint = egress.parse_endpoint(text)
        except ValueError as exc:
            raise ValueError(f"TAKOHOST_EGRESS_ALLOW: {exc}") from None
        rules.append(egress.Rule(action="allow", text=str(endpoint), endpoint=endpoint))
    default = egress.SpaceRules(ports=ports, rules=tuple(rules))
    spaces: dict[str, egress.SpaceRules] = {}
    path = env.get("TAKOHOST_EGRESS_RULES_FILE")
    if path:
        try:
            with open(path, "rb") as f:
                document = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"TAKOHOST_EGRESS_RULES_FILE {path}: {exc}") from None
        unknown = set(document) - {"all", "spaces"}
        if unknown:
            raise ValueError(f"TAKOHOST_EGRESS_RULES_FILE: unknown table(s) {', '.join(sorted(unknown))}")
        default = _section("[all]", document.get("all", {}), default)
        per_space = document.get("spaces", {})
        if not isinstance(per_space, dict):
            raise ValueError("TAKOHOST_EGRESS_RULES_FILE: spaces must be a table of Spaces")
        for space, section in per_space.items():
            spaces[space] = _section(f"[spaces.{space}]", section, default)
    test_public = []
    for text in (env.get("TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS") or "").split(","):
        if text.strip():
            try:
                test_public.append(ipaddress.ip_network(text.strip(), strict=False))
            except ValueError:
                raise ValueError(f"TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS: {text!r} is not a CIDR") from None
    config = EgressConfig(
        default=default,
        spaces=spaces,
        resolvers=_resolvers(env.get("TAKOHOST_EGRESS_RESOLVER") or ""),
        test_public=tuple(test_public),
    )
    if len(config.listen_ports) > MAX_PORTS:
        raise ValueError(f"the egress rules name {len(config.listen_ports)} ports; at most {MAX_PORTS}")
    return config


def host_services(environ: Mapping[str, str] | None = None) -> frozenset[egress.Endpoint]:
    """The endpoints of the host's own services, resolved: the database, Redis and broker URLs
    (their defaults too), ``TAKOHOST_API_URL`` and, on every own address, the metrics port."""
    env = os.environ if environ is None else environ
    redis_url = env.get("TAKOHOST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    urls = [
        env.get("TAKOHOST_DATABASE_URL") or "postgresql://127.0.0.1:5432/takohost",
        redis_url,
        env.get("TAKOHOST_BROKER_URL") or redis_url,
    ]
    if env.get("TAKOHOST_API_URL"):
        urls.append(env["TAKOHOST_API_URL"])
    found: set[egress.Endpoint] = set()
    for url in urls:
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.split("+")[0]
            port = parts.port or _SERVICE_DEFAULT_PORTS.get(scheme) or (443 if scheme == "https" else 80)
            host = parts.hostname
        except ValueError:
            continue
        if not host:  # a Unix socket: not reachable over the network
            continue
        for address in _resolve(host):
            found.add(egress.Endpoint(address, port))
    metrics = (env.get("TAKOHOST_METRICS_PORT") or "").strip()
    if metrics.isascii() and metrics.isdigit() and 1 <= int(metrics) <= 65535:
        for address in own_addresses() | {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}:
            found.add(egress.Endpoint(address, int(metrics)))
    return frozenset(found)


def _resolve(host: str) -> set[egress.Address]:
    try:
        return {egress.unwrap(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return set()
    return {egress.unwrap(ipaddress.ip_address(str(info[4][0]).split("%")[0])) for info in infos}


def own_addresses() -> frozenset[egress.Address]:
    """Every address of this machine's interfaces (IPv4 and IPv6, loopback included)."""
    import psutil

    found: set[egress.Address] = set()
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(egress.unwrap(ipaddress.ip_address(address.address.split("%")[0])))
                except ValueError:
                    continue
    return frozenset(found)


_current: EgressConfig | None = None


def current() -> EgressConfig:
    """This process's configuration, read from the environment once (settings do not change
    while a process runs). Raises ``ValueError`` like :func:`load`."""
    global _current
    if _current is None:
        _current = load()
    return _current


def reset() -> None:
    """Forget :func:`current` (tests that change the environment of their own process)."""
    global _current
    _current = None
