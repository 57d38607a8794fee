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
