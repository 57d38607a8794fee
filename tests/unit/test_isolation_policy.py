"""The sandbox policy read from ``TAKOHOST_SANDBOX_*`` (docs/security.md): defaults,
bounds, and a clear error naming the variable for a bad value."""

from __future__ import annotations

import pathlib

import pytest

from takohost.runtime.isolation import policy as policy_module


def test_defaults_are_the_documented_ones():
    policy = policy_module.Policy.from_environ({})
    assert policy.mode == "namespaces"
    assert (policy.memory_mb, policy.max_processes, policy.max_open_files) == (1024, 64, 256)
    assert (policy.max_file_mb, policy.scratch_mb) == (64, 64)
    assert policy.uid_base == 1_600_000_000
    assert policy.test_shared_dir is None
    assert policy.sdk_dir.endswith("/takohost")


def test_settings_are_read_and_round_trip_through_json():
    env = {
        "TAKOHOST_SANDBOX_ISOLATION": "none",
        "TAKOHOST_SANDBOX_MEMORY_MB": "256",
        "TAKOHOST_SANDBOX_MAX_PROCESSES": "8",
        "TAKOHOST_SANDBOX_MAX_OPEN_FILES": "32",
        "TAKOHOST_SANDBOX_MAX_FILE_MB": "1",
        "TAKOHOST_SANDBOX_SCRATCH_MB": "2",
        "TAKOHOST_SANDBOX_UID_BASE": "2000000000",
        "TAKOHOST_TEST_SANDBOX_SHARED_DIR": "/tmp",
    }
    policy = policy_module.Policy.from_environ(env)
    assert (policy.mode, policy.memory_mb, policy.max_processes) == ("none", 256, 8)
    assert (policy.max_open_files, policy.max_file_mb, policy.scratch_mb) == (32, 1, 2)
    assert policy.uid_base == 2_000_000_000
    assert policy.test_shared_dir == "/tmp"
    assert policy_module.Policy.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("TAKOHOST_SANDBOX_ISOLATION", "off", "must be one of namespaces, none"),
        ("TAKOHOST_SANDBOX_MEMORY_MB", "lots", "must be an integer"),
        ("TAKOHOST_SANDBOX_MEMORY_MB", "16", "at least 64"),
        ("TAKOHOST_SANDBOX_MAX_PROCESSES", "0", "at least 4"),
        ("TAKOHOST_SANDBOX_UID_BASE", "0", "at least 1000"),
        ("TAKOHOST_TEST_SANDBOX_SHARED_DIR", "relative/dir", "absolute path"),
    ],
)
def test_bad_values_name_the_variable(name, value, expected):
    with pytest.raises(ValueError, match=expected) as info:
        policy_module.Policy.from_environ({name: value})
    assert name in str(info.value)


def test_the_network_is_public_by_default_none_on_request_and_outbound_is_gone():
    assert policy_module.Policy.from_environ({}).network == "public"
    assert policy_module.Policy.from_environ({"TAKOHOST_SANDBOX_NETWORK": "none"}).network == "none"
    with pytest.raises(ValueError, match="outbound was replaced by public") as refused:
        policy_module.Policy.from_environ({"TAKOHOST_SANDBOX_NETWORK": "outbound"})
    assert "see docs/egress.md" in str(refused.value)  # a page that exists, not a README section gone
    assert (pathlib.Path(__file__).resolve().parents[2] / "docs" / "egress.md").is_file()
    with pytest.raises(ValueError, match="one of public, none"):
        policy_module.Policy.from_environ({"TAKOHOST_SANDBOX_NETWORK": "internet"})


def test_the_egress_ports_travel_to_the_zygote():
    policy = policy_module.Policy(egress_ports=(80, 443, 3000))
    assert policy_module.Policy.from_json(policy.to_json()).egress_ports == (80, 443, 3000)
