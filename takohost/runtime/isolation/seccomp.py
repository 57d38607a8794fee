"""The context's system-call filter: a classic-BPF program (:func:`program`), the small label
assembler it is written with (:func:`assemble`), and its installation (:class:`Filter`, packed
once in the zygote and installed by each child; :func:`install`).

Calls a context never needs and that reach state the namespaces do not separate (the kernel
keyrings are per uid, not per namespace) or that are the usual ways to attack the kernel (nested
namespaces, mounts, BPF, perf, io_uring, module loading) fail with ``EPERM``; ``clone3`` fails
with ``ENOSYS`` so that the C library falls back to ``clone``, whose flags the filter can see
(any ``CLONE_NEW*`` flag is refused there). docs/security.md lists them.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import ctypes
import errno as errno_module
import platform
import struct

from takohost.runtime.isolation import syscalls

__all__ = ["DENIED_CALLS", "Filter", "assemble", "install", "program"]

#: ``AUDIT_ARCH_*`` of each machine: the ``arch`` field a call of this machine's ABI carries.
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: The denied calls added since Linux 5.1, which numbers every new call alike on each
#: architecture (424 on; :data:`CLONE3` too): one table for both machines.
_UNIFIED_CALLS = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "open_tree_attr": 467,  # Linux 6.15: open_tree with mount attributes
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
}
DENIED_CALLS = {
    "x86_64": {
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "setns": 308,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        **_UNIFIED_CALLS,
        "acct": 163,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "settimeofday": 164,
        "clock_settime": 227,
        # Watching the read-only trees shared with the host and every context would show what
        # other contexts (of any Space) and the host open, and when.
        "inotify_init": 253,
        "inotify_init1": 294,
        "fanotify_init": 300,
    },
    "aarch64": {
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "unshare": 97,
        "setns": 268,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        **_UNIFIED_CALLS,
        "acct": 89,
        "swapon": 224,
        "swapoff": 225,
        "reboot": 142,
        "settimeofday": 170,
        "clock_settime": 112,
        "inotify_init1": 26,
        "fanotify_init": 262,
    },
}
CLONE = {"x86_64": 56, "aarch64": 220}
SOCKET = {"x86_64": 41, "aarch64": 198}
#: ``socket()`` address families a context may ask for (the rest, ``socket(2)``'s ``domain``, is
#: refused). Each of these is separated by the context's network namespace; ``AF_VSOCK`` (40) is
#: not: its ports are the whole machine's, shared with the host and every other context (one
#: Space's bound port is visible to another's bind), and it reaches the hypervisor. ``AF_PACKET``,
#: ``AF_ALG``, ``AF_KEY``, ``AF_TIPC``, ``AF_XDP``, ``AF_BLUETOOTH`` … are attack surface a
#: context has no use for. ``AF_NETLINK`` stays for ``NETLINK_ROUTE`` (0) only: the C library's
#: ``getaddrinfo`` and ``if_nameindex`` read the (namespaced) interfaces through it.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
_AF_NETLINK, _NETLINK_ROUTE = 16, 0
#: ``socket()`` types (``type & SOCK_TYPE_MASK``, without ``SOCK_NONBLOCK``/``SOCK_CLOEXEC``) of
#: an ``AF_INET``/``AF_INET6`` socket: stream and datagram. ``SOCK_SEQPACKET`` with protocol 0
#: is SCTP where the kernel has it, whatever the protocol check below says.
INET_SOCKET_TYPES = (1, 2)
_SOCK_TYPE_MASK = 0xF
#: ``socket()`` protocols a context may ask for: the default, TCP and UDP. The egress proxy relays
#: TCP only, and a context needs nothing else: MPTCP (262), SCTP (132) and the rest are attack
#: surface of the kernel it has no use for.
SOCKET_PROTOCOLS = (0, 6, 17)
CLONE3 = 435
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
# classic BPF: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ/JGE/JSET|BPF_K, BPF_ALU|BPF_AND|BPF_K, BPF_RET|BPF_K
LD, JEQ, JGE, JSET, AND, RET = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
#: Offsets in ``struct seccomp_data``: the call's number, the architecture, and the low 32 bits
#: of ``args[0]``, ``args[1]``, ``args[2]`` (little-endian).
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32

#: One instruction as :func:`assemble` takes it: ``(code, k, jt, jf)`` with ``jt``/``jf`` a label
#: name (``None``: the next instruction), or ``("label", name)`` marking the next instruction.
Source = tuple
#: One classic-BPF instruction ``(code, jt, jf, k)`` with relative jumps, as the kernel takes it.
Instruction = tuple[int, int, int, int]


def program(machine: str | None = None) -> list[Instruction]:
    """The classic-BPF program of the context's system-call filter, as ``(code, jt, jf, k)``
    instructions (pure; ``IsolationUnavailable`` for an architecture without a table).

    Another architecture's calls kill the process; the x32 ABI, :data:`DENIED_CALLS`, a
    ``clone`` asking for a namespace, and a ``socket()`` outside :data:`SOCKET_FAMILIES` /
    :data:`INET_SOCKET_TYPES` / :data:`SOCKET_PROTOCOLS` fail with ``EPERM``; ``clone3`` with
    ``ENOSYS`` (the C library falls back to ``clone``, whose flags can be read)."""
    machine = machine or platform.machine()
    if machine not in DENIED_CALLS:
        raise syscalls.IsolationUnavailable(f"no system-call filter for {machine}")
    eperm = SECCOMP_RET_ERRNO | errno_module.EPERM
    special = {nr: "eperm" for nr in DENIED_CALLS[machine].values()}
    for nr, label in ((SOCKET[machine], "socket"), (CLONE3, "enosys"), (CLONE[machine], "clone")):
        if nr in special:
            raise ValueError(f"system call {nr} is denied and handled apart")
        special[nr] = label
    asm: list[Source] = [
        (LD, _ARCH, None, None),
        (JEQ, AUDIT_ARCH[machine], None, "kill"),
        (LD, _NR, None, None),
        (JGE, 0x40000000, "eperm", None),  # the x32 ABI's numbers on x86_64: refused
        *_dispatch(sorted(special.items())),
        ("label", "clone"),
        (LD, _ARG0, None, None),  # clone's flags
        (JSET, syscalls.CLONE_NEW_ANY, "eperm", "allow"),
        ("label", "socket"),
        (LD, _ARG0, None, None),  # the address family
        *((JEQ, family, "socket_type", None) for family in sorted(SOCKET_FAMILIES.values())),
        (JEQ, _AF_NETLINK, None, "eperm"),
        (LD, _ARG2, None, None),
        (JEQ, _NETLINK_ROUTE, "allow", "eperm"),
        ("label", "socket_type"),
        (JEQ, SOCKET_FAMILIES["AF_UNIX"], "socket_protocol", None),  # any type of a Unix socket
        (LD, _ARG1, None, None),
        (AND, _SOCK_TYPE_MASK, None, None),
        *((JEQ, kind, "socket_protocol", None) for kind in INET_SOCKET_TYPES),
        (RET, eperm, None, None),
        ("label", "socket_protocol"),
        (LD, _ARG2, None, None),
        *((JEQ, protocol, "allow", None) for protocol in SOCKET_PROTOCOLS),
        ("label", "eperm"),
        (RET, eperm, None, None),
        ("label", "allow"),
        (RET, SECCOMP_RET_ALLOW, None, None),
        ("label", "enosys"),
        (RET, SECCOMP_RET_ERRNO | errno_module.ENOSYS, None, None),
        ("label", "kill"),
        (RET, SECCOMP_RET_KILL_PROCESS, None, None),
    ]
    return assemble(asm)


def _dispatch(calls: list[tuple[int, str]], name: str = "n") -> list[Source]:
    """The system-call number (loaded) to its label, for ``calls`` (sorted ``(number, label)``);
    any other number is allowed. A binary search (``JGE`` on the middle number) down to runs of
    at most 3 ``JEQ``: about 8 instructions from the load to a verdict instead of one ``JEQ`` per
    call. The kernel emulates the filter for every system-call number when it is installed (its
    cache of calls always allowed), so a path this short costs a child about 0.05 ms less."""
    if len(calls) <= 3:
        return [*((JEQ, nr, label, None) for nr, label in calls), (RET, SECCOMP_RET_ALLOW, None, None)]
    middle = len(calls) // 2
    upper = f"{name}1"
    return [
        (JGE, calls[middle][0], upper, None),
        *_dispatch(calls[:middle], f"{name}0"),
        ("label", upper),
        *_dispatch(calls[middle:], upper),
    ]


def assemble(asm: list[Source]) -> list[Instruction]:
    """Resolve the labels of ``asm`` (``(code, k, jt, jf)`` items and ``("label", name)``
    markers, see :data:`Source`) into relative jumps: ``(code, jt, jf, k)`` instructions.
    ``IsolationUnavailable`` when a jump is longer than classic BPF's 255 instructions;
    ``KeyError`` for a jump to an unknown label."""
    labels: dict[str, int] = {}
    instructions: list[tuple] = []
    for item in asm:
        if item[0] == "label":
            labels[item[1]] = len(instructions)
        else:
            instructions.append(item)
    assembled: list[Instruction] = []
    for index, (code, k, jt, jf) in enumerate(instructions):

        def to(target: str | None, index: int = index) -> int:
            return 0 if target is None else labels[target] - index - 1

        assembled.append((code, to(jt), to(jf), k))
    if any(not 0 <= jt <= 255 or not 0 <= jf <= 255 for _, jt, jf, _ in assembled):
        raise syscalls.IsolationUnavailable("the system-call filter is too long for classic BPF jumps")
    return assembled


class Filter:
    """A system-call filter packed for the kernel once (``struct sock_fprog`` and its
    instructions in ``ctypes`` buffers, built by the zygote's ``Forker``): every child forked
    after inherits the buffers at the same addresses and :meth:`install` s it with one
    ``prctl``, instead of packing the program again (about 0.2 ms of CPU per context)."""

    def __init__(self, instructions: list[Instruction] | tuple[Instruction, ...]) -> None:
        raw = b"".join(struct.pack("HBBI", *instruction) for instruction in instructions)
        self._instructions = ctypes.create_string_buffer(raw, len(raw))
        fprog = struct.pack("HxxxxxxP", len(instructions), ctypes.addressof(self._instructions))
        self._fprog = ctypes.create_string_buffer(fprog, len(fprog))
        self._address = ctypes.addressof(self._fprog)
        self._prctl = syscalls.function("prctl")
        #: The packed instructions as the kernel reads them (8 bytes each).
        self.packed = raw

    def install(self) -> None:
        """Install the filter on this process (needs ``no_new_privs``); inherited by every
        process it starts and irrevocable. Raises ``IsolationUnavailable``."""
        if self._prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._address, 0, 0) != 0:
            syscalls.check(-1, "prctl(PR_SET_SECCOMP)")


def install(instructions: list[Instruction]) -> None:
    """Install ``instructions`` as this process's seccomp filter (needs ``no_new_privs``);
    inherited by every process it starts and irrevocable (:class:`Filter`, packed now). Raises
    ``IsolationUnavailable``."""
    Filter(instructions).install()
