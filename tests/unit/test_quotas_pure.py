"""The pure parts of the quotas (docs/spec/host-features.md#hf-neighbours): the decision, the error, the marker text, code
bytes, and the CLI's and console's renderings."""

from __future__ import annotations

import pytest

from core import config
from host_api.ui import usage as console_usage
from host_cli import spaces as cli_spaces
from models.errors import DomainError
from services import quotas


def test_check_refuses_past_the_limit_and_zero_is_no_limit():
    quotas.check(quotas.LIVE_INSTANCES, current=9, adding=1, limit=10)
    quotas.check(quotas.LOG_BYTES, current=10**15, adding=1, limit=0)
    with pytest.raises(DomainError) as caught:
        quotas.check(quotas.VERSION_CODE_BYTES, current=90, adding=11, limit=100)
    assert caught.value.code == "quota_exceeded"
    assert caught.value.details == {"quota": "versionCodeBytes", "current": 90, "limit": 100}
    assert "Version code bytes" in caught.value.message and "90 of 100 bytes" in caught.value.message


def test_marker_text_and_code_bytes():
    assert quotas.dropped_text(1) == "1 line dropped: the Space's log quota"
    assert quotas.dropped_text(700) == "700 lines dropped: the Space's log quota"
    assert quotas.code_bytes({"modules": {"a.py": "é", "b.py": "xy"}}) == 4


def test_settings_defaults_and_bad_values(monkeypatch):
    for name in ("LIVE_INSTANCES", "STORED_EVENTS", "LOG_BYTES", "VERSION_CODE_BYTES", "LAYER_BYTES"):
        monkeypatch.delenv(f"TAKOHOST_QUOTA_{name}", raising=False)
    assert quotas.limits(config.load_settings()) == quotas.Limits(10_000, 100_000, 512 << 20, 256 << 20, 2 << 30)
    monkeypatch.setenv("TAKOHOST_QUOTA_LOG_BYTES", "-1")
    with pytest.raises(ValueError, match="TAKOHOST_QUOTA_LOG_BYTES"):
        config.load_settings()


def test_renderings():
    usage = {
        "space": "s",
        "quotas": {
            "liveInstances": {"used": 10, "limit": 10},
            "storedEvents": {"used": 1234, "limit": 0},
            "logBytes": {"used": 1536, "limit": 512 << 20},
            "versionCodeBytes": {"used": 0, "limit": 256 << 20},
            "layerBytes": {"used": 5 << 30, "limit": 2 << 30},
        },
    }
    assert cli_spaces.rows(usage) == [
        ("live instances", "10", "10", "100%"),
        ("stored events", "1,234", "none", "-"),
        ("log bytes (retained)", "1.5 KiB", "512.0 MiB", "0%"),
        ("Version code bytes", "0 B", "256.0 MiB", "0%"),
        ("package layer bytes", "5.0 GiB", "2.0 GiB", "250%"),
    ]
    rows = console_usage.rows(usage)
    assert [(r["quota"], r["used"], r["limit"], r["percent"], r["full"]) for r in rows] == [
        ("liveInstances", "10", "10", 100, True),
        ("storedEvents", "1,234", "no limit", None, False),
        ("logBytes", "1.5 KiB", "512.0 MiB", 0, False),
        ("versionCodeBytes", "0 B", "256.0 MiB", 0, False),
        ("layerBytes", "5.0 GiB", "2.0 GiB", 100, True),
    ]


def test_size_text_is_one_rendering_for_the_cli_the_console_and_host_lines():
    from core import units
    from workers.egress import client as egress_client

    assert [units.size_text(v) for v in (0, 1023, 1024, 1536, 5 << 20, 3 << 30, 5000 << 30)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB", "5000.0 GiB"
    ]
    assert egress_client._size(1536) == cli_spaces.amount(1536, in_bytes=True) == "1.5 KiB"
    assert console_usage.size_text(1536, in_bytes=True) == "1.5 KiB"
