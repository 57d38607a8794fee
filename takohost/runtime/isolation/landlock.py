"""Landlock network rules of an ``outbound`` context (``TAKOHOST_SANDBOX_NETWORK=outbound``,
README "Security model"): TCP connections only to the allowed ports, no TCP bind, no abstract
Unix socket or signal outside the context's own domain.

Standard library only: this runs in the sandbox children.
"""

from __future__ import annotations

import ctypes
import os
import struct

from takohost.runtime.isolation import syscalls

__all__ = ["abi", "restrict_network"]

_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_ACCESS_NET_BIND_TCP = 1
_LANDLOCK_ACCESS_NET_CONNECT_TCP = 2
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_LANDLOCK_SCOPE_SIGNAL = 2
_LANDLOCK_RULE_NET_PORT = 2
#: The first ABI with network rules and scopes (Linux 6.12).
REQUIRED_ABI = 6


def abi() -> int:
    """The kernel's Landlock ABI version (0 when Landlock is unavailable or disabled)."""
    version = syscalls.libc().syscall(_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


def restrict_network(ports: tuple[int, ...]) -> None:
    """Landlock (ABI 6+): from now on this process and its descendants may connect over TCP only
    to ``ports``, bind no TCP port, and reach no abstract Unix socket or process outside this
    domain (each context its own). Needs ``no_new_privs``. Raises ``IsolationUnavailable``."""
    found = abi()
    if found < REQUIRED_ABI:
        raise syscalls.IsolationUnavailable(
            f"TAKOHOST_SANDBOX_NETWORK=outbound needs Landlock ABI {REQUIRED_ABI} (Linux 6.12); "
            f"this kernel has {found}"
        )
    attr = struct.pack(
        "QQQ",
        0,
        _LANDLOCK_ACCESS_NET_BIND_TCP | _LANDLOCK_ACCESS_NET_CONNECT_TCP,
        _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | _LANDLOCK_SCOPE_SIGNAL,
    )
    lib = syscalls.libc()
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    fd = lib.syscall(_LANDLOCK_CREATE_RULESET, attr_buf, ctypes.c_size_t(len(attr)), 0)
    if fd < 0:
        syscalls.check(-1, "landlock_create_ruleset")
    try:
        for port in ports:
            rule = struct.pack("QQ", _LANDLOCK_ACCESS_NET_CONNECT_TCP, port)
            rule_buf = ctypes.create_string_buffer(rule, len(rule))
            syscalls.check(
                lib.syscall(_LANDLOCK_ADD_RULE, fd, _LANDLOCK_RULE_NET_PORT, rule_buf, 0),
                "landlock_add_rule",
            )
        syscalls.check(lib.syscall(_LANDLOCK_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)
