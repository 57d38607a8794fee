"""Who a context is and what it may use (``isolation.identity``): limits, capabilities,
dumpable, and the host processes that mark themselves non-dumpable."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from takohost.runtime.isolation import identity, policy


def test_host_processes_mark_themselves_non_dumpable():
    """``takohost api|worker|beat|dev`` call ``cli._host_process()`` first (README "Security
    model": their memory and environment cannot be read through /proc or ptrace)."""
    code = (
        "import ctypes\n"
        "from host_cli import main as cli\n"
        "libc = ctypes.CDLL(None)\n"
        "before = libc.prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "cli._host_process()\n"
        "print(before, libc.prctl(3, 0, 0, 0, 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["1", "0"]


def _in_a_fork(fn) -> int:
    """Run ``fn`` in a forked process; its exit status (``fn``'s return value)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn())
        except BaseException:  # noqa: BLE001
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_set_limits_applies_the_policys_limits():
    limits = policy.Policy(memory_mb=256, max_processes=9, max_open_files=40, max_file_mb=3)

    def check() -> int:
        identity.set_limits(limits)
        got = {
            resource.RLIMIT_AS: 256 << 20,
            resource.RLIMIT_NPROC: 9,
            resource.RLIMIT_NOFILE: 40,
            resource.RLIMIT_FSIZE: 3 << 20,
            resource.RLIMIT_CORE: 0,
            resource.RLIMIT_MEMLOCK: 0,
        }
        return 0 if all(resource.getrlimit(k) == (v, v) for k, v in got.items()) else 1

    assert _in_a_fork(check) == 0


def test_drop_identity_leaves_no_capability_and_sets_no_new_privs():
    def check() -> int:
        identity.drop_identity(None, last_cap=identity.last_cap())
        with open("/proc/self/status") as f:
            status = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
        caps = [int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
        return 0 if caps == [0] * 5 and status["NoNewPrivs"].strip() == "1" else 1

    assert _in_a_fork(check) == 0


def test_last_cap_is_the_kernels():
    with open("/proc/sys/kernel/cap_last_cap") as f:
        assert identity.last_cap() == int(f.read())


def test_host_is_root_only_for_the_machines_root():
    assert identity.host_is_root() == (os.geteuid() == 0 and not identity._in_user_namespace())


def _status() -> dict[str, str]:
    with open("/proc/self/status") as f:
        return {k: v.strip() for k, v in (line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)}


def test_limits_are_the_policys_as_soft_and_hard_pairs():
    pairs = dict(identity.limits(policy.Policy(memory_mb=64, max_processes=5, max_open_files=30, max_file_mb=2)))
    assert pairs == {
        resource.RLIMIT_AS: (64 << 20, 64 << 20),
        resource.RLIMIT_NPROC: (5, 5),
        resource.RLIMIT_NOFILE: (30, 30),
        resource.RLIMIT_FSIZE: (2 << 20, 2 << 20),
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_MEMLOCK: (0, 0),
    }


def test_apply_limits_ignores_sigxfsz_so_an_oversized_write_fails_instead_of_killing():
    import signal

    def check() -> int:
        identity.apply_limits(identity.limits(policy.Policy(max_file_mb=1)))
        if signal.getsignal(signal.SIGXFSZ) is not signal.SIG_IGN:
            return 1
        fd = os.open("/dev/shm", os.O_TMPFILE | os.O_WRONLY, 0o600)
        try:
            os.pwrite(fd, b"x", 1 << 20)  # one byte past the limit
        except OSError as exc:
            return 0 if exc.errno == 27 else 2  # EFBIG
        finally:
            os.close(fd)
        return 3

    assert _in_a_fork(check) == 0


def test_a_bounding_set_dropped_before_the_fork_is_inherited_and_the_child_drops_the_rest():
    """What the zygote's ``Forker`` does: the bounding and ambient sets are dropped once in the
    forking process (its effective capabilities stay: it still makes namespaces and mounts),
    and a child forked after it inherits them empty; ``drop_identity(bounding_dropped=True)``
    then leaves no capability at all."""

    def forker() -> int:
        effective = _status()["CapEff"]
        identity.prepare()
        identity.drop_bounding_set(identity.last_cap())
        after = _status()
        if int(after["CapBnd"], 16) != 0 or int(after["CapAmb"], 16) != 0 or after["CapEff"] != effective:
            return 1
        return _in_a_fork(child)

    def child() -> int:
        if int(_status()["CapBnd"], 16) != 0:
            return 2
        identity.drop_identity(65534 if identity.host_is_root() else None, last_cap=-1, bounding_dropped=True)
        status = _status()
        caps = [int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
        return 0 if caps == [0] * 5 and status["NoNewPrivs"] == "1" else 3

    assert _in_a_fork(forker) == 0
