"""Who a context is and what it may use: its identity and capabilities (:func:`drop_identity`),
its resource limits (:func:`set_limits`), and whether a process may be read through ``/proc``
(:func:`set_dumpable`). :func:`host_is_root` tells which identity scheme applies.

Standard library only: this runs in the zygote, its children and the host processes.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import struct

from takohost.runtime.isolation import policy as policy_module
from takohost.runtime.isolation import syscalls

__all__ = ["drop_identity", "host_is_root", "last_cap", "set_dumpable", "set_limits"]

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def set_dumpable(value: bool) -> None:
    """``PR_SET_DUMPABLE``: a non-dumpable process's memory, environment and descriptors cannot
    be read through ``/proc`` or ptrace by another process of the same uid."""
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 1 if value else 0)


def host_is_root() -> bool:
    """True when this process is root of the machine (not in a user namespace): contexts then
    get identities of their own; otherwise a user namespace maps them to this uid."""
    return os.geteuid() == 0 and not _in_user_namespace()


def _in_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def last_cap() -> int:
    """The kernel's highest capability number (``/proc/sys/kernel/cap_last_cap``; 40 if unread)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def set_limits(policy: policy_module.Policy) -> None:
    """Apply the policy's resource limits to this process (inherited by what it starts)."""
    mib = 1 << 20
    for limit, value in (
        (resource.RLIMIT_AS, policy.memory_mb * mib),
        (resource.RLIMIT_NPROC, policy.max_processes),
        (resource.RLIMIT_NOFILE, policy.max_open_files),
        (resource.RLIMIT_FSIZE, policy.max_file_mb * mib),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_MEMLOCK, 0),
    ):
        resource.setrlimit(limit, (value, value))
    # Over RLIMIT_FSIZE a write fails with EFBIG (an OSError in Python) instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def drop_identity(uid: int | None, *, last_cap: int) -> None:
    """Drop every capability (bounding and ambient sets too; ``last_cap`` is the kernel's highest
    capability number), change to ``uid``/``gid == uid`` with no supplementary groups when given,
    and set ``no_new_privs``. Raises ``IsolationUnavailable``."""
    for cap in range(last_cap + 1):
        try:
            syscalls.prctl(syscalls.PR_CAPBSET_DROP, cap)
        except syscalls.IsolationUnavailable:
            break
    syscalls.prctl(syscalls.PR_CAP_AMBIENT, syscalls.PR_CAP_AMBIENT_CLEAR_ALL)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _clear_capabilities()
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    # setresuid made us non-dumpable; nothing else with this identity exists, and the context's
    # own /proc must stay readable to itself.
    set_dumpable(True)


def _clear_capabilities() -> None:
    header = struct.pack("II", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)
    header_buf = ctypes.create_string_buffer(header, len(header))
    data_buf = ctypes.create_string_buffer(data, len(data))
    syscalls.check(
        syscalls.libc().syscall(syscalls.number(syscalls.SYS_CAPSET), header_buf, data_buf), "capset"
    )
