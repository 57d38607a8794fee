"""The sandbox policy read from ``TAKOHOST_SANDBOX_*`` (README "Security model"): defaults,
bounds, and a clear error naming the variable for a bad value."""

from __future__ import annotations

import pytest

from takohost.runtime import isolation


def test_defaults_are_the_documented_ones():
    policy = isolation.Policy.from_environ({})
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
    policy = isolation.Policy.from_environ(env)
    assert (policy.mode, policy.memory_mb, policy.max_processes) == ("none", 256, 8)
    assert (policy.max_open_files, policy.max_file_mb, policy.scratch_mb) == (32, 1, 2)
    assert policy.uid_base == 2_000_000_000
    assert policy.test_shared_dir == "/tmp"
    assert isolation.Policy.from_json(policy.to_json()) == policy


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
        isolation.Policy.from_environ({name: value})
    assert name in str(info.value)


def test_namespace_flags_add_a_user_namespace_only_without_root():
    assert not isolation.namespace_flags(as_root=True) & isolation.CLONE_NEWUSER
    assert isolation.namespace_flags(as_root=False) & isolation.CLONE_NEWUSER
    for flag in (isolation.CLONE_NEWPID, isolation.CLONE_NEWNS, isolation.CLONE_NEWNET):
        assert isolation.namespace_flags(as_root=True) & flag


def test_layout_hides_site_packages_and_keeps_only_stdlib_and_sdk_on_sys_path():
    import sys
    import sysconfig

    layout = isolation.Layout.compute(isolation.Policy())
    assert all("site-packages" not in path for path in layout.sys_path)
    assert sysconfig.get_path("stdlib") in layout.sys_path
    assert layout.sys_path[-1] == layout.policy.sdk_dir.rsplit("/", 1)[0]
    assert any(path.endswith("site-packages") for path in layout.hidden) or sys.base_prefix.startswith("/usr")
