"""The Linux system calls and constants of the sandbox, through the C library (``ctypes``):
``unshare``, ``setns``, ``mount``, ``prctl``, raw ``syscall`` numbers, and writes of the small
control files a namespace or cgroup is set up with. Every failure raises
:class:`IsolationUnavailable` with the kernel's reason.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import ctypes
import errno as errno_module
import os
import platform
from typing import Any

__all__ = [
    "IsolationUnavailable",
    "check",
    "function",
    "libc",
    "mount",
    "number",
    "prctl",
    "prepare",
    "setns",
    "umount",
    "unshare",
    "write_file",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: Every ``CLONE_NEW*`` flag (``CLONE_NEWTIME`` is 0x80), the namespaces a context may not make.
CLONE_NEW_ANY = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | 0x00000080
)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_MOVE = 8192
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

#: System-call numbers the C library has no wrapper for, per machine.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

_libc: Any = None
#: Private C functions with their argument types fixed (:func:`function`), by name.
_functions: dict[str, Any] = {}
_c_int, _c_long, _c_ulong, _c_char_p, _c_void_p = (
    ctypes.c_int,
    ctypes.c_long,
    ctypes.c_ulong,
    ctypes.c_char_p,
    ctypes.c_void_p,
)
#: ``(result type, argument types)`` of the calls :func:`prepare` resolves. ``prctl`` and
#: ``syscall`` are variadic in the C library; their arguments are passed as the kernel reads
#: them (``unsigned long``, pointers as addresses).
_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "prctl": (_c_int, (_c_int, _c_ulong, _c_ulong, _c_ulong, _c_ulong)),
    "unshare": (_c_int, (_c_int,)),
    "setns": (_c_int, (_c_int, _c_int)),
    "mount": (_c_int, (_c_char_p, _c_char_p, _c_char_p, _c_ulong, _c_char_p)),
    "umount2": (_c_int, (_c_char_p, _c_int)),
    "syscall": (_c_long, (_c_long, _c_void_p, _c_void_p)),
}


class IsolationUnavailable(RuntimeError):
    """The kernel refused what the sandbox needs (``unshare``, a mount, an identity change)."""


def libc() -> Any:
    """The C library (loaded once, with ``errno`` kept for :func:`check`)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def function(name: str) -> Any:
    """The C library's ``name`` (one of :data:`_SIGNATURES`) as a private ``ctypes`` function with
    its argument types fixed, resolved once: Python integers and ``bytes`` convert without a
    ``ctypes`` object per argument, and ``libc().name`` (used elsewhere untyped) is left alone."""
    fn = _functions.get(name)
    if fn is None:
        fn = libc()[name]
        fn.restype, fn.argtypes = _SIGNATURES[name]
        _functions[name] = fn
    return fn


def prepare() -> None:
    """Resolve every call of :data:`_SIGNATURES` now (in the zygote, once): a child then finds
    them ready instead of looking each symbol up and building its function object."""
    for name in _SIGNATURES:
        function(name)


def check(result: int, what: str) -> None:
    """Raise ``IsolationUnavailable`` naming ``what`` and ``errno`` unless ``result`` is 0."""
    if result != 0:
        code = ctypes.get_errno()
        raise IsolationUnavailable(
            f"{what}: {os.strerror(code)} (errno {errno_module.errorcode.get(code, code)})"
        )


def prctl(option: int, a: int = 0, b: int = 0) -> None:
    """``prctl(option, a, b, 0, 0)``. Raises ``IsolationUnavailable``."""
    if function("prctl")(option, a, b, 0, 0) != 0:
        check(-1, f"prctl({option})")


def number(table: dict[str, int]) -> int:
    """This machine's number of a system call from ``table`` (machine → number)."""
    machine = platform.machine()
    if machine not in table:
        raise IsolationUnavailable(f"no system call table for {machine}")
    return table[machine]


def unshare(flags: int) -> None:
    """``unshare(flags)``; for ``CLONE_NEWUSER`` also map the caller's uid/gid to 0 inside.
    Raises ``IsolationUnavailable``."""
    uid, gid = os.getuid(), os.getgid()
    check(function("unshare")(flags), "unshare")
    if flags & CLONE_NEWUSER:
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"0 {uid} 1")
        write_file("/proc/self/gid_map", f"0 {gid} 1")


def setns(fd: int, nstype: int) -> None:
    """``setns(fd, nstype)``: join the namespace ``fd`` names. Raises ``IsolationUnavailable``."""
    check(function("setns")(fd, nstype), "setns")


def write_file(path: str, text: str) -> None:
    """Write ``text`` to the existing file ``path`` in one ``write`` (a ``/proc`` or cgroup control
    file). Raises ``IsolationUnavailable``."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise IsolationUnavailable(f"writing {path}: {exc.strerror}") from None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(source, target, fstype, flags, data)``. Raises ``IsolationUnavailable``."""
    result = function("mount")(
        None if source is None else source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        flags,
        None if data is None else data.encode(),
    )
    check(result, f"mount {source} on {target}")


def umount(target: str) -> None:
    """Detach the mount on ``target`` (``umount2(target, MNT_DETACH)``). Raises
    ``IsolationUnavailable``."""
    check(function("umount2")(target.encode(), MNT_DETACH), f"umount {target}")
