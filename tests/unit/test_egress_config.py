"""The operator's egress configuration (workers/egress/config.py): settings and the rules file."""

from __future__ import annotations

import ipaddress

import pytest

from takohost.domain import egress
from workers.egress import config


def test_defaults_are_public_ports_80_and_443_for_every_space() -> None:
    loaded = config.load({})
    assert loaded.space_rules("any").ports == frozenset({80, 443})
    assert loaded.space_rules("any").rules == ()
    assert loaded.listen_ports == (80, 443)
    assert loaded.resolvers == ()


def test_allow_exceptions_ports_and_resolver_from_the_environment() -> None:
    loaded = config.load(
        {
            "TAKOHOST_EGRESS_PORTS": "443, 8443",
            "TAKOHOST_EGRESS_ALLOW": "127.0.0.1:3000,[::1]:3001",
            "TAKOHOST_EGRESS_RESOLVER": "1.1.1.1, [2606:4700::1111]:5353,127.0.0.1:5300",
            "TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS": "127.0.0.5/32",
        }
    )
    rules = loaded.space_rules("dev")
    assert rules.ports == frozenset({443, 8443})
    assert [str(r.endpoint) for r in rules.rules] == ["127.0.0.1:3000", "[::1]:3001"]
    assert loaded.listen_ports == (443, 3000, 3001, 8443)
    assert loaded.resolvers == (("1.1.1.1", 53), ("2606:4700::1111", 5353), ("127.0.0.1", 5300))
    assert loaded.test_public == (ipaddress.ip_network("127.0.0.5/32"),)
    policy = loaded.policy("dev")
    assert egress.decide(policy, address=ipaddress.ip_address("127.0.0.1"), port=3000).allowed


def test_a_rules_file_with_every_space_and_one_space(tmp_path) -> None:
    path = tmp_path / "egress.toml"
    path.write_text(
        """
[all]
deny = ["*.internal.example", "203.0.113.0/24"]

[spaces.acme]
allow = ["10.1.2.3:5432", "api.partner.example:8443"]
only = ["*.stripe.com", "api.partner.example"]
ports = [443]
"""
    )
    loaded = config.load({"TAKOHOST_EGRESS_RULES_FILE": str(path)})
    other, acme = loaded.space_rules("other"), loaded.space_rules("acme")
    assert [r.text for r in other.rules] == ["*.internal.example", "203.0.113.0/24"]
    assert other.ports == frozenset({80, 443})
    assert [r.text for r in acme.rules] == [
        "*.internal.example",
        "203.0.113.0/24",
        "10.1.2.3:5432",
        "api.partner.example:8443",
    ]
    assert acme.ports == frozenset({443}) and acme.only_hosts == ("*.stripe.com", "api.partner.example")
    assert loaded.listen_ports == (80, 443, 5432, 8443)
    decide = egress.decide
    p = loaded.policy("acme")
    assert decide(p, address=ipaddress.ip_address("10.1.2.3"), port=5432).allowed
    assert decide(p, address=ipaddress.ip_address("8.8.8.8"), port=443, name="api.stripe.com").allowed
    assert not decide(p, address=ipaddress.ip_address("8.8.8.8"), port=80, name="api.stripe.com").allowed
    assert not decide(p, address=ipaddress.ip_address("8.8.8.8"), port=443, name="x.example").allowed


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({"TAKOHOST_EGRESS_PORTS": "80,http"}, "TAKOHOST_EGRESS_PORTS"),
        ({"TAKOHOST_EGRESS_PORTS": ""}, None),
        ({"TAKOHOST_EGRESS_ALLOW": "localhost:3000"}, "TAKOHOST_EGRESS_ALLOW"),
        ({"TAKOHOST_EGRESS_ALLOW": "127.0.0.1"}, "TAKOHOST_EGRESS_ALLOW"),
        ({"TAKOHOST_EGRESS_RESOLVER": "dns.google"}, "TAKOHOST_EGRESS_RESOLVER"),
        ({"TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS": "nope"}, "TAKOHOST_TEST_EGRESS_PUBLIC_CIDRS"),
        ({"TAKOHOST_EGRESS_RULES_FILE": "/nonexistent/egress.toml"}, "TAKOHOST_EGRESS_RULES_FILE"),
    ],
)
def test_bad_settings_name_the_setting(environ: dict, needle: str | None) -> None:
    if needle is None:
        assert config.load(environ).listen_ports == (80, 443)
        return
    with pytest.raises(ValueError, match=needle):
        config.load(environ)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[spaces.a]\nallow = 'x'\n", "allow must be a list"),
        ("[spaces.a]\nfoo = []\n", "unknown key"),
        ("[other]\n", "unknown table"),
        ("[spaces.a]\nonly = ['10.0.0.0/8']\n", "host-name patterns"),
        ("[spaces.a]\nports = [0]\n", "ports must be"),
        ("[all]\ndeny = ['a b']\n", "not a host-name pattern"),
        ("[all\n", "TAKOHOST_EGRESS_RULES_FILE"),
    ],
)
def test_bad_rules_files_say_where(tmp_path, text: str, needle: str) -> None:
    path = tmp_path / "egress.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=needle):
        config.load({"TAKOHOST_EGRESS_RULES_FILE": str(path)})


def test_host_services_are_resolved_from_the_urls() -> None:
    services = config.host_services(
        {
            "TAKOHOST_DATABASE_URL": "postgresql+psycopg://u:p@127.0.0.1:6543/db",
            "TAKOHOST_REDIS_URL": "redis://localhost/0",
            "TAKOHOST_API_URL": "https://127.0.0.9",
        }
    )
    endpoints = {str(e) for e in services}
    assert {"127.0.0.1:6543", "127.0.0.1:6379", "127.0.0.9:443"} <= endpoints
