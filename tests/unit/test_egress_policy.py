"""The egress decision (takohost/domain/egress.py), pure: what tenant code may connect to."""

from __future__ import annotations

import ipaddress

import pytest

from takohost.domain import egress


def ip(text: str) -> egress.Address:
    return ipaddress.ip_address(text)


def verdict(address: str, port: int | None = 443, *, name: str | None = None, **policy) -> egress.Verdict:
    return egress.decide(egress.Policy(**policy), address=ip(address), port=port, name=name)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback address"),
        ("127.5.6.7", "loopback address"),
        ("::1", "loopback address"),
        ("10.0.0.5", "private address"),
        ("172.16.0.1", "private address"),
        ("192.168.1.1", "private address"),
        ("100.64.0.1", "private address"),
        ("100.127.255.254", "private address"),
        ("169.254.169.254", "link-local address"),
        ("169.254.0.1", "link-local address"),
        ("fe80::1", "link-local address"),
        ("fd00:ec2::254", "private address"),
        ("fc00::1", "private address"),
        ("224.0.0.1", "multicast address"),
        ("239.255.255.250", "multicast address"),
        ("ff02::1", "multicast address"),
        ("255.255.255.255", "broadcast address"),
        ("0.0.0.0", "unspecified address"),
        ("::", "unspecified address"),
        ("0.1.2.3", "private address"),
        ("240.0.0.1", "private address"),
        ("192.0.2.1", "private address"),
        # IPv4-mapped, IPv4-compatible and NAT64 forms stand for the IPv4 address
        ("::ffff:127.0.0.1", "loopback address"),
        ("::ffff:10.0.0.5", "private address"),
        ("::ffff:169.254.169.254", "link-local address"),
        ("::10.0.0.5", "private address"),
        ("64:ff9b::7f00:1", "loopback address"),
        ("64:ff9b::a9fe:a9fe", "link-local address"),
    ],
)
def test_non_public_addresses_are_refused_with_their_kind(address: str, reason: str) -> None:
    assert verdict(address) == egress.Verdict(False, reason)
    assert verdict(address).message(ip(address), 443).endswith("refused: " + reason)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_unicast_addresses_on_the_default_ports_are_allowed(address: str) -> None:
    assert verdict(address, 443).allowed
    assert verdict(address, 80).allowed
    assert verdict(address, 22) == egress.Verdict(False, "port 22 is not allowed")
    assert verdict(address, None).allowed  # a name look-up that produced it


def test_the_message_names_address_port_and_reason() -> None:
    v = verdict("10.0.0.5", 5432)
    assert v.message(ip("10.0.0.5"), 5432) == "egress to 10.0.0.5:5432 refused: private address"
    assert verdict("fe80::1").message(ip("fe80::1"), 443) == "egress to [fe80::1]:443 refused: link-local address"


def test_an_exact_allow_rule_opens_one_non_public_endpoint_and_nothing_else() -> None:
    rules = egress.SpaceRules(rules=(egress.parse_rule("127.0.0.1:3000", action="allow"),))
    assert verdict("127.0.0.1", 3000, space_rules=rules).allowed
    assert verdict("::ffff:127.0.0.1", 3000, space_rules=rules).allowed
    assert not verdict("127.0.0.1", 3001, space_rules=rules).allowed
    assert not verdict("127.0.0.2", 3000, space_rules=rules).allowed
    assert not verdict("127.0.0.1", 443, space_rules=rules).allowed


def test_the_host_s_services_are_never_reachable_even_when_a_rule_names_them() -> None:
    rules = egress.SpaceRules(rules=(egress.parse_rule("127.0.0.1:5432", action="allow"),))
    services = frozenset({egress.Endpoint(ip("127.0.0.1"), 5432)})
    assert verdict("127.0.0.1", 5432, space_rules=rules, services=services) == egress.Verdict(
        False, "a service of the host"
    )
    assert not verdict("::ffff:127.0.0.1", 5432, space_rules=rules, services=services).allowed
    # a public address of the host's API, on an allowed port
    api = frozenset({egress.Endpoint(ip("203.0.113.10"), 443)})
    assert verdict("203.0.113.10", 443, services=api).reason == "a service of the host"


def test_the_host_s_own_public_address_is_refused() -> None:
    own = frozenset({ip("8.8.4.4")})
    assert verdict("8.8.4.4", 443, own_addresses=own) == egress.Verdict(False, "the host's own address")
    assert verdict("8.8.8.8", 443, own_addresses=own).allowed


def test_deny_rules_by_name_pattern_cidr_and_port() -> None:
    rules = egress.SpaceRules(
        rules=(
            egress.parse_rule("*.blocked.example", action="deny"),
            egress.parse_rule("198.51.100.0/24", action="deny"),
            egress.parse_rule(":80", action="deny"),
        )
    )
    assert verdict("93.184.216.34", 443, name="api.blocked.example", space_rules=rules).reason == (
        "denied by the rule '*.blocked.example'"
    )
    assert not verdict("93.184.216.34", None, name="API.Blocked.Example.", space_rules=rules).allowed
    assert verdict("93.184.216.34", 443, name="api.example.com", space_rules=rules).allowed
    assert not verdict("198.51.100.7", 443, space_rules=rules).allowed
    assert not verdict("93.184.216.34", 80, space_rules=rules).allowed
    assert verdict("93.184.216.34", None, space_rules=rules).allowed  # a port rule is no look-up matter


def test_an_allow_list_of_names_admits_only_those() -> None:
    rules = egress.SpaceRules(only_hosts=("*.stripe.com",))
    assert verdict("93.184.216.34", 443, name="api.stripe.com", space_rules=rules).allowed
    assert verdict("93.184.216.34", 443, name="evil.example", space_rules=rules).reason == (
        "not in the Space's allow-list"
    )
    assert not verdict("93.184.216.34", 443, space_rules=rules).allowed  # an address literal


def test_an_allow_rule_with_a_port_opens_that_port_for_public_addresses_it_covers() -> None:
    rules = egress.SpaceRules(rules=(egress.parse_rule("api.partner.example:8443", action="allow"),))
    assert verdict("93.184.216.34", 8443, name="api.partner.example", space_rules=rules).allowed
    assert not verdict("93.184.216.34", 8443, name="other.example", space_rules=rules).allowed
    assert not verdict("10.0.0.5", 8443, name="api.partner.example", space_rules=rules).allowed


def test_test_public_cidrs_make_those_addresses_public_and_nothing_else() -> None:
    test_public = (ipaddress.ip_network("127.0.0.5/32"), ipaddress.ip_network("127.0.0.0/8"))
    own = frozenset({ip("127.0.0.5"), ip("127.0.0.1")})
    services = frozenset({egress.Endpoint(ip("127.0.0.5"), 6379)})
    kwargs = {"test_public": test_public, "own_addresses": own, "services": services}
    assert verdict("127.0.0.5", 80, **kwargs).allowed
    assert verdict("127.0.0.1", 80, **kwargs).reason == "loopback address"
    assert verdict("127.0.0.5", 6379, **kwargs).reason == "a service of the host"
    assert verdict("10.0.0.5", 80, **kwargs).reason == "private address"
    assert verdict("127.0.0.5", 22, **kwargs).reason == "port 22 is not allowed"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.5:5432", {"endpoint": egress.Endpoint(ip("10.0.0.5"), 5432)}),
        ("[fd00::1]:8443", {"endpoint": egress.Endpoint(ip("fd00::1"), 8443)}),
        ("[::ffff:127.0.0.1]:3000", {"endpoint": egress.Endpoint(ip("127.0.0.1"), 3000)}),
        ("203.0.113.0/24", {"network": ipaddress.ip_network("203.0.113.0/24")}),
        ("203.0.113.0/24:25", {"network": ipaddress.ip_network("203.0.113.0/24"), "ports": frozenset({25})}),
        ("2001:db8::/32", {"network": ipaddress.ip_network("2001:db8::/32")}),
        ("198.51.100.7", {"network": ipaddress.ip_network("198.51.100.7/32")}),
        ("*.Example.COM", {"host": "*.example.com"}),
        ("api.example.com:8443", {"host": "api.example.com", "ports": frozenset({8443})}),
        (":25", {"ports": frozenset({25})}),
    ],
)
def test_rules_parse(text: str, expected: dict) -> None:
    rule = egress.parse_rule(text, action="deny")
    for key, value in expected.items():
        assert getattr(rule, key) == value
    assert egress.SpaceRules.from_json(egress.SpaceRules(rules=(rule,)).to_json()).rules == (rule,)


@pytest.mark.parametrize("text", ["", "   ", ":0", ":70000", "10.0.0.5:99999", "a b", "host/x", "10.0.0.0/33", ":"])
def test_bad_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        egress.parse_rule(text, action="deny")


def test_only_an_endpoint_is_an_endpoint() -> None:
    with pytest.raises(ValueError):
        egress.parse_endpoint("localhost:3000")
    with pytest.raises(ValueError):
        egress.parse_endpoint("127.0.0.1")
    assert str(egress.parse_endpoint("[::1]:80")) == "[::1]:80"
