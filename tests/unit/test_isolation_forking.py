"""The forker (``isolation.forking``) where nothing is isolated (``mode == "none"``), and its
descriptors; the isolated forker is tested on real sandboxes (``tests/integration``,
``tests/security``)."""

from __future__ import annotations

import os

from takohost.runtime.isolation import forking, mounts, policy


def test_without_isolation_the_forker_only_forks_and_the_probe_passes(tmp_path):
    layout = mounts.Layout.compute(policy.Policy(mode="none"))
    forking.probe(layout, root=str(tmp_path))
    forker = forking.Forker(layout, root=str(tmp_path))
    assert not forker.isolated and forker.template_fd == forker.pidns_fd == -1 and forker.memory is None
    pid = forker.fork()
    if pid == 0:
        os._exit(0 if os.getppid() > 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_high_moves_a_descriptor_above_the_childs_own_and_closes_on_exec():
    fd = os.open("/dev/null", os.O_RDONLY)
    moved = forking._high(fd)
    try:
        assert moved >= 16 and not os.get_inheritable(moved)
        assert os.path.samestat(os.fstat(moved), os.stat("/dev/null"))
    finally:
        os.close(moved)


def test_an_isolated_fork_that_cannot_make_the_memory_cgroup_gives_back_what_it_took(tmp_path):
    """``Forker.fork`` takes a uid slot (root hosts), a freezer cgroup and a memory cgroup before
    it forks; when one is refused, it fails with ``OSError`` (the zygote serves on and retries)
    and what it had taken is given back. Run in a forked process: an isolated ``Forker`` changes
    the process that builds it (a user namespace when not root, its bounding set)."""
    root = tmp_path / "root"
    root.mkdir()

    def check() -> int:
        layout = mounts.Layout.compute(policy.Policy())
        forker = forking.Forker(layout, root=str(root))
        if forker.memory is None or forker.freezer is None:
            return 0  # nothing taken before the memory cgroup on this machine: nothing to give back

        def refused() -> str:
            raise PermissionError(13, "refused", "memory.limit_in_bytes")

        forker.memory.make = refused  # type: ignore[method-assign]
        try:
            forker.fork()
        except PermissionError:
            pass
        else:
            return 1
        left = [name for name in os.listdir(forker.freezer.directory) if name.startswith("ctx-")]
        held = forker.uids.held if forker.uids is not None else {}
        forker.close()
        return 0 if left == [] and held == {} and forker.frozen_by == {} else 2

    pid = os.fork()
    if pid == 0:
        try:
            os._exit(check())
        except BaseException:  # noqa: BLE001
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
