"""Who a context is and what it may use: its identity and capabilities (:func:`drop_identity`),
its resource limits (:func:`set_limits`), and whether a process may be read through ``/proc``
(:func:`set_dumpable`). :func:`host_is_root` tells which identity scheme applies.

Standard library only: this runs in the zygote, its children and the host processes.
"""

from __future__ import annotations

import _signal
import ctypes
import os
import resource
import signal
import struct
from typing import Any

from takohost.runtime.isolation import policy as policy_module
from takohost.runtime.isolation import syscalls

__all__ = [
    "apply_limits",
    "drop_bounding_set",
    "drop_identity",
    "host_is_root",
    "last_cap",
    "limits",
    "prepare",
    "set_dumpable",
    "set_limits",
]

_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_SIGXFSZ = int(signal.SIGXFSZ)
#: ``capset``'s header (version 3, this process) and its three empty capability sets, packed
#: once (:func:`prepare`, in the zygote) and kept alive here: ``(header, data, their addresses,
#: capset's system-call number)``.
_capset: tuple[Any, Any, int, int, int] | None = None


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


def limits(policy: policy_module.Policy) -> tuple[tuple[int, tuple[int, int]], ...]:
    """The policy's resource limits as ``(RLIMIT_*, (soft, hard))`` pairs (bytes, counts; pure):
    computed once by the zygote's ``Forker``, applied per child by :func:`apply_limits`."""
    mib = 1 << 20
    return tuple(
        (limit, (value, value))
        for limit, value in (
            (resource.RLIMIT_AS, policy.memory_mb * mib),
            (resource.RLIMIT_NPROC, policy.max_processes),
            (resource.RLIMIT_NOFILE, policy.max_open_files),
            (resource.RLIMIT_FSIZE, policy.max_file_mb * mib),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_MEMLOCK, 0),
        )
    )


def apply_limits(pairs: tuple[tuple[int, tuple[int, int]], ...]) -> None:
    """Apply ``pairs`` (:func:`limits`) to this process (inherited by what it starts) and ignore
    ``SIGXFSZ``: over ``RLIMIT_FSIZE`` a write then fails with ``EFBIG`` (an ``OSError`` in
    Python) instead of killing the process."""
    setrlimit = resource.setrlimit
    for limit, value in pairs:
        setrlimit(limit, value)
    # The C module's call: ``signal.signal`` converts to and from its enums, which costs a child
    # fresh from a fork about 0.08 ms of CPU (copy-on-write faults in the enum machinery).
    _signal.signal(_SIGXFSZ, _signal.SIG_IGN)


def set_limits(policy: policy_module.Policy) -> None:
    """Apply the policy's resource limits to this process (inherited by what it starts)."""
    apply_limits(limits(policy))


def prepare() -> None:
    """Build what :func:`drop_identity` passes to the kernel (``capset``'s buffers, the C
    functions) now, in the zygote, once: a child then only makes the calls."""
    global _capset
    if _capset is None:
        header = ctypes.create_string_buffer(struct.pack("II", _LINUX_CAPABILITY_VERSION_3, 0), 8)
        data = ctypes.create_string_buffer(bytes(24), 24)
        number = syscalls.number(syscalls.SYS_CAPSET)
        _capset = (header, data, ctypes.addressof(header), ctypes.addressof(data), number)
    syscalls.prepare()


def drop_bounding_set(last_cap: int) -> None:
    """Drop every capability up to ``last_cap`` (the kernel's highest number) from this thread's
    bounding set and clear its ambient set. Both are inherited by every process it forks and
    matter only when a process ``execve`` s (they cap what a program may gain), so the zygote's
    ``Forker`` drops them once for itself and all its children (its own effective capabilities,
    which it still needs for mounts and namespaces, are unchanged). Raises
    ``IsolationUnavailable`` (the ambient set; a capability the kernel does not know ends the
    loop)."""
    for cap in range(last_cap + 1):
        try:
            syscalls.prctl(syscalls.PR_CAPBSET_DROP, cap)
        except syscalls.IsolationUnavailable:
            break
    syscalls.prctl(syscalls.PR_CAP_AMBIENT, syscalls.PR_CAP_AMBIENT_CLEAR_ALL)


def drop_identity(uid: int | None, *, last_cap: int, bounding_dropped: bool = False) -> None:
    """Drop every capability (bounding and ambient sets too — :func:`drop_bounding_set`, skipped
    when ``bounding_dropped``: the caller's zygote did it before forking; ``last_cap`` is the
    kernel's highest capability number), change to ``uid``/``gid == uid`` with no supplementary
    groups when given, and set ``no_new_privs``. Raises ``IsolationUnavailable``."""
    if not bounding_dropped:
        drop_bounding_set(last_cap)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _clear_capabilities()
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    # setresuid made us non-dumpable; nothing else with this identity exists, and the context's
    # own /proc must stay readable to itself.
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 1)


def _clear_capabilities() -> None:
    """``capset`` with empty effective, permitted and inheritable sets (buffers of :func:`prepare`)."""
    if _capset is None:
        prepare()
    assert _capset is not None
    if syscalls.function("syscall")(_capset[4], _capset[2], _capset[3]) != 0:
        syscalls.check(-1, "capset")
