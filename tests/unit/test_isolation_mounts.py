"""What a context's file system holds (``isolation.mounts``): the layout computed once in the
zygote, and where each read-only bind lies in the template."""

from __future__ import annotations

import dataclasses

from takohost.runtime.isolation import mounts, policy


def test_layout_hides_site_packages_and_keeps_only_stdlib_and_sdk_on_sys_path():
    import sys
    import sysconfig

    layout = mounts.Layout.compute(policy.Policy())
    assert all("site-packages" not in path for path in layout.sys_path)
    assert sysconfig.get_path("stdlib") in layout.sys_path
    assert layout.sys_path[-1] == mounts.SDK_ROOT == "/takohost/sdk"  # the SDK's copy, not its host place
    assert layout.packages == (("takohost", layout.policy.sdk_dir),)
    assert all(not target.startswith("/takohost") for _, target in layout.binds)
    assert any(path.endswith("site-packages") for path in layout.hidden) or sys.base_prefix.startswith("/usr")


def _layout(*binds: tuple[str, str]) -> mounts.Layout:
    layout = mounts.Layout.compute(policy.Policy())
    return dataclasses.replace(layout, binds=tuple(binds))


def test_binds_outside_tmp_are_placed_at_their_target():
    layout = _layout(("/opt/python", "/opt/python"), ("/srv/sdk/takohost", "/srv/sdk/takohost"))
    assert mounts.placements(layout) == [
        ("/opt/python", "/opt/python", "/opt/python"),
        ("/srv/sdk/takohost", "/srv/sdk/takohost", "/srv/sdk/takohost"),
    ]


def test_binds_under_tmp_are_staged_outside_the_scratch_and_bound_again():
    """Each context mounts its scratch tmpfs on ``/tmp``: a checkout under ``/tmp`` placed at
    its own path in the template would be covered by it."""
    layout = _layout(("/opt/python", "/opt/python"), ("/tmp/co/takohost", "/tmp/co/takohost"), ("/tmp", "/tmp"))
    assert mounts.placements(layout) == [
        ("/opt/python", "/opt/python", "/opt/python"),
        ("/tmp/co/takohost", "/.takohost-stage/1", "/tmp/co/takohost"),
        ("/tmp", "/.takohost-stage/2", "/tmp"),
    ]
    assert mounts._placed(layout, "/tmp/co/takohost/runtime") == "/.takohost-stage/1/runtime"
    assert mounts._placed(layout, "/opt/python/lib") == "/opt/python/lib"
    assert mounts._placed(layout, "/elsewhere") == "/elsewhere"


def test_only_existing_etc_files_and_dev_nodes_are_in_the_layout():
    import os

    layout = mounts.Layout.compute(policy.Policy())
    assert set(layout.etc_files) <= set(mounts.ETC_FILES) and all(os.path.exists(p) for p in layout.etc_files)
    assert set(layout.dev_nodes) <= set(mounts.DEV_NODES) and "null" in layout.dev_nodes
