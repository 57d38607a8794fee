"""The sandbox's system calls (``isolation.syscalls``): every refusal is an
``IsolationUnavailable`` that names the call and the kernel's reason."""

from __future__ import annotations

import ctypes
import errno
import platform

import pytest

from takohost.runtime.isolation import syscalls


def test_check_names_the_call_and_the_errno():
    ctypes.set_errno(errno.EPERM)
    with pytest.raises(syscalls.IsolationUnavailable, match=r"^unshare: Operation not permitted \(errno EPERM\)$"):
        syscalls.check(-1, "unshare")
    syscalls.check(0, "never raised")


def test_a_refused_call_raises_isolation_unavailable():
    with pytest.raises(syscalls.IsolationUnavailable, match="setns"):
        syscalls.setns(-1, syscalls.CLONE_NEWNS)  # EBADF
    with pytest.raises(syscalls.IsolationUnavailable, match="mount None on /nonexistent"):
        syscalls.mount(None, "/nonexistent", None, syscalls.MS_REMOUNT)
    with pytest.raises(syscalls.IsolationUnavailable, match="writing /nonexistent/file"):
        syscalls.write_file("/nonexistent/file", "0")


def test_system_call_numbers_come_from_this_machines_table():
    assert syscalls.number({platform.machine(): 7}) == 7
    with pytest.raises(syscalls.IsolationUnavailable, match="no system call table"):
        syscalls.number({"vax": 1})


def test_the_namespaces_a_context_may_not_make_are_every_clone_new_flag():
    for flag in (syscalls.CLONE_NEWNS, syscalls.CLONE_NEWUTS, syscalls.CLONE_NEWIPC, syscalls.CLONE_NEWUSER,
                 syscalls.CLONE_NEWPID, syscalls.CLONE_NEWNET, syscalls.CLONE_NEWCGROUP, 0x80):
        assert syscalls.CLONE_NEW_ANY & flag == flag
    assert syscalls.CLONE_NEW_ANY & 0x00010000 == 0  # CLONE_THREAD: threads stay allowed


def test_typed_functions_are_private_resolved_once_and_leave_the_librarys_own_untyped():
    """``mounts`` calls ``libc().syscall`` with other argument types than ``identity``'s capset:
    the typed functions the zygote resolves (``prepare``) must not change those."""
    syscalls.prepare()
    prctl = syscalls.function("prctl")
    assert syscalls.function("prctl") is prctl and prctl is not syscalls.libc().prctl
    assert prctl.argtypes == (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    assert syscalls.libc().syscall.argtypes is None
    assert prctl(3, 0, 0, 0, 0) in (0, 1)  # PR_GET_DUMPABLE
    with pytest.raises(syscalls.IsolationUnavailable, match=r"^prctl\(4\): Invalid argument"):
        syscalls.prctl(syscalls.PR_SET_DUMPABLE, 7)
