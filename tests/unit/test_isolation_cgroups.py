"""Per-context memory cgroups (``isolation.cgroups.MemoryCgroup``): the files a context's cgroup
is set up with, on a directory laid out like cgroup v1's and v2's."""

from __future__ import annotations

import pytest

from takohost.runtime.isolation import cgroups, policy, syscalls


def _context_dir(root, pid: int, *files: str):
    path = root / f"ctx-{pid}"
    path.mkdir()
    for name in files:
        (path / name).write_text("")
    return path


def test_join_on_cgroup_v2_sets_the_limit_no_swap_and_moves_the_caller(tmp_path):
    (tmp_path / "memory.swap.max").write_text("")  # the zygote's directory: swap is accounted
    path = _context_dir(tmp_path, 7, "memory.max", "memory.swap.max", "cgroup.procs")
    cgroups.MemoryCgroup(str(tmp_path), version=2, limit_bytes=256 << 20).join(7)
    assert (path / "memory.max").read_text() == str(256 << 20)
    assert (path / "memory.swap.max").read_text() == "0"
    assert (path / "cgroup.procs").read_text() == "0"  # "0": the writing process


def test_join_on_cgroup_v1_limits_memory_and_memory_plus_swap(tmp_path):
    (tmp_path / "memory.memsw.limit_in_bytes").write_text("")
    path = _context_dir(tmp_path, 8, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cgroup.procs")
    cgroups.MemoryCgroup(str(tmp_path), version=1, limit_bytes=1 << 30).join(8)
    assert (path / "memory.limit_in_bytes").read_text() == (path / "memory.memsw.limit_in_bytes").read_text()
    assert (path / "memory.limit_in_bytes").read_text() == str(1 << 30)


def test_whether_swap_is_limited_is_decided_once_from_the_zygotes_directory(tmp_path):
    """A kernel without swap accounting has no swap file in any memory cgroup: the zygote's
    directory tells, and no context's join looks again (a ``stat`` of a cgroup file costs a fresh
    child about 40 µs)."""
    without = cgroups.MemoryCgroup(str(tmp_path), version=1, limit_bytes=1 << 30)
    assert without.settings == (("memory.limit_in_bytes", str(1 << 30)),)
    path = _context_dir(tmp_path, 5, "memory.limit_in_bytes", "cgroup.procs")
    without.join(5)
    assert (path / "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert not (path / "memory.memsw.limit_in_bytes").exists()
    (tmp_path / "memory.swap.max").write_text("")
    assert cgroups.MemoryCgroup(str(tmp_path), version=2, limit_bytes=7).settings == (
        ("memory.max", "7"),
        ("memory.swap.max", "0"),
    )


def test_join_fails_clearly_where_the_controller_files_are_missing(tmp_path):
    with pytest.raises(syscalls.IsolationUnavailable, match="memory.max"):
        cgroups.MemoryCgroup(str(tmp_path), version=2, limit_bytes=1 << 20).join(9)


def test_release_and_close_remove_the_context_and_zygote_directories(tmp_path):
    zygote_dir = tmp_path / "takohost-zygote-1"
    zygote_dir.mkdir()
    (zygote_dir / "ctx-3").mkdir()
    (zygote_dir / "ctx-4").mkdir()
    memory = cgroups.MemoryCgroup(str(zygote_dir), version=2, limit_bytes=1)
    memory.release(3)
    memory.release(3)  # already gone: ignored
    assert sorted(p.name for p in zygote_dir.iterdir()) == ["ctx-4"]
    memory.close()
    assert not zygote_dir.exists()


def test_find_gives_a_cgroup_with_the_policys_limit_or_none():
    found = cgroups.MemoryCgroup.find(policy.Policy(memory_mb=128))
    if found is not None:
        try:
            assert found.limit_bytes == 128 << 20 and found.version in (1, 2)
        finally:
            found.close()
