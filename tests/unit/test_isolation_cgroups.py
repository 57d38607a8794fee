"""Per-context memory cgroups (``isolation.cgroups.MemoryCgroup``): the files a context's cgroup
is set up with, on a directory laid out like cgroup v1's and v2's."""

from __future__ import annotations

import os

import pytest

from takohost.runtime.isolation import cgroups, policy


class _FakeCgroupDirectory(cgroups.MemoryCgroup):
    """A ``MemoryCgroup`` on a plain directory: ``make`` finds the control files a cgroup file
    system would create in every new cgroup (``files``) already there."""

    def __init__(self, directory, *, files: tuple[str, ...], **kwargs) -> None:
        super().__init__(str(directory), **kwargs)
        self.files = files

    def _create(self, path: str) -> None:
        super()._create(path)
        for name in (*self.files, "cgroup.procs"):
            open(os.path.join(path, name), "w").close()


def test_make_on_cgroup_v2_sets_the_limit_and_no_swap_and_join_moves_the_caller(tmp_path):
    (tmp_path / "memory.swap.max").write_text("")  # the zygote's directory: swap is accounted
    memory = _FakeCgroupDirectory(tmp_path, files=("memory.max", "memory.swap.max"), version=2, limit_bytes=256 << 20)
    path = memory.make()
    assert path == f"{tmp_path}/ctx-0" and memory.make() == f"{tmp_path}/ctx-1"
    assert open(f"{path}/memory.max").read() == str(256 << 20)
    assert open(f"{path}/memory.swap.max").read() == "0"
    pid = os.fork()
    if pid == 0:
        try:
            cgroups.join(path)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert open(f"{path}/cgroup.procs").read() == "0"  # "0": the writing process


def test_make_on_cgroup_v1_limits_memory_and_memory_plus_swap(tmp_path):
    (tmp_path / "memory.memsw.limit_in_bytes").write_text("")
    files = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
    path = _FakeCgroupDirectory(tmp_path, files=files, version=1, limit_bytes=1 << 30).make()
    assert open(f"{path}/memory.limit_in_bytes").read() == open(f"{path}/memory.memsw.limit_in_bytes").read()
    assert open(f"{path}/memory.limit_in_bytes").read() == str(1 << 30)


def test_whether_swap_is_limited_is_decided_once_from_the_zygotes_directory(tmp_path):
    """A kernel without swap accounting has no swap file in any memory cgroup: the zygote's
    directory tells, and no context's join looks again (a ``stat`` of a cgroup file costs a fresh
    child about 40 µs)."""
    without = _FakeCgroupDirectory(tmp_path, files=("memory.limit_in_bytes",), version=1, limit_bytes=1 << 30)
    assert without.settings == (("memory.limit_in_bytes", str(1 << 30)),)
    path = without.make()
    assert open(f"{path}/memory.limit_in_bytes").read() == str(1 << 30)
    assert not os.path.exists(f"{path}/memory.memsw.limit_in_bytes")
    (tmp_path / "memory.swap.max").write_text("")
    assert cgroups.MemoryCgroup(str(tmp_path), version=2, limit_bytes=7).settings == (
        ("memory.max", "7"),
        ("memory.swap.max", "0"),
    )


def test_join_fails_clearly_where_the_controller_files_are_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="memory.max"):
        cgroups.MemoryCgroup(str(tmp_path), version=2, limit_bytes=1 << 20).make()
    assert not os.path.exists(f"{tmp_path}/ctx-0")  # removed again


def test_release_and_close_remove_the_context_and_zygote_directories(tmp_path):
    zygote_dir = tmp_path / "takohost-zygote-1"
    zygote_dir.mkdir()
    (zygote_dir / "ctx-3").mkdir()
    (zygote_dir / "ctx-4").mkdir()
    memory = cgroups.MemoryCgroup(str(zygote_dir), version=2, limit_bytes=1)
    memory.remove(str(zygote_dir / "ctx-3"))
    memory.remove(str(zygote_dir / "ctx-3"))  # already gone: ignored
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


def _v2_mount(path) -> list[str]:
    """One ``/proc/self/mountinfo`` line of a cgroup2 mount at ``path``, split at blanks."""
    return f"35 24 0:30 / {path} rw,nosuid shared:9 - cgroup2 cgroup2 rw".split()


def test_on_cgroup_v2_the_zygotes_directory_enables_memory_for_its_contexts(tmp_path):
    """A v2 directory's children get only the controllers it enables: without ``+memory`` in the
    zygote directory's ``cgroup.subtree_control`` a context's ``ctx-<n>`` has no ``memory.max``."""
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory pids\n")  # delegated to us
    found = cgroups.MemoryCgroup._find_in(
        policy.Policy(memory_mb=64), memberships=[["0", "", "/"]], mounts=[_v2_mount(tmp_path)]
    )
    assert found is not None and found.version == 2
    assert found.directory == str(tmp_path / f"takohost-zygote-{os.getpid()}")
    assert (tmp_path / f"takohost-zygote-{os.getpid()}" / "cgroup.subtree_control").read_text() == "+memory"


def test_on_cgroup_v2_a_directory_that_cannot_enable_memory_is_not_used(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    zygote_dir = tmp_path / f"takohost-zygote-{os.getpid()}"
    zygote_dir.mkdir()
    (zygote_dir / "cgroup.subtree_control").mkdir()  # the write fails, as the kernel's EBUSY would
    found = cgroups.MemoryCgroup._find_in(
        policy.Policy(memory_mb=64), memberships=[["0", "", "/"]], mounts=[_v2_mount(tmp_path)]
    )
    assert found is None


def test_on_cgroup_v2_without_memory_delegated_there_is_no_memory_cgroup(tmp_path):
    (tmp_path / "cgroup.subtree_control").write_text("cpu pids\n")
    found = cgroups.MemoryCgroup._find_in(
        policy.Policy(memory_mb=64), memberships=[["0", "", "/"]], mounts=[_v2_mount(tmp_path)]
    )
    assert found is None and not (tmp_path / f"takohost-zygote-{os.getpid()}").exists()


def test_a_zygotes_own_directory_is_made_private_or_taken_as_it_is_or_none(tmp_path):
    """Both cgroup kinds' ``takohost-<kind>-<pid>`` directory: made with mode 0700, an existing
    one taken as it is (a second ``find`` in the same zygote), ``None`` where it cannot be made."""
    directory = cgroups._own_directory(str(tmp_path), "takohost-zygote")
    assert directory == str(tmp_path / f"takohost-zygote-{os.getpid()}")
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert cgroups._own_directory(str(tmp_path), "takohost-zygote") == directory
    assert cgroups._own_directory(str(tmp_path / "missing"), "takohost-freezer") is None
