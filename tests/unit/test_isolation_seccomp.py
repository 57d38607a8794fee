"""The context's system-call filter (``isolation.seccomp``), run on a small classic-BPF
interpreter, and the label assembler it is written with."""

from __future__ import annotations

import pytest

from takohost.runtime.isolation import seccomp, syscalls


def _run_bpf(program, *, arch: int, nr: int, arg0: int = 0, arg1: int = 0, arg2: int = 0) -> int:
    """Evaluate ``program`` (``(code, jt, jf, k)``) on one ``seccomp_data`` like the kernel."""
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF, 24: arg1 & 0xFFFFFFFF, 32: arg2 & 0xFFFFFFFF}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:
            acc = data[k]
            pc += 1
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_filter_denies_what_namespaces_do_not_separate(machine):
    program = seccomp.program(machine)
    arch = seccomp.AUDIT_ARCH[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    for name, nr in seccomp.DENIED_CALLS[machine].items():
        assert _run_bpf(program, arch=arch, nr=nr) == eperm, name
    clone = seccomp.CLONE[machine]
    assert _run_bpf(program, arch=arch, nr=clone, arg0=17) == allow  # fork: SIGCHLD
    assert _run_bpf(program, arch=arch, nr=clone, arg0=0x003D0F00) == allow  # a thread
    for flag in (syscalls.CLONE_NEWUSER, syscalls.CLONE_NEWPID, syscalls.CLONE_NEWNET):
        assert _run_bpf(program, arch=arch, nr=clone, arg0=flag | 17) == eperm
    assert _run_bpf(program, arch=arch, nr=435) == enosys  # clone3: the C library falls back
    assert _run_bpf(program, arch=arch, nr=0) == allow  # read / io_setup
    assert _run_bpf(program, arch=arch, nr=0x40000000 + 248) == eperm  # the x32 ABI
    assert _run_bpf(program, arch=0x40000003, nr=0) == 0x80000000  # another ABI (i386): killed


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_filter_allows_sockets_of_the_default_tcp_and_udp_protocols_only(machine):
    """Landlock's port rules hold for TCP only: MPTCP (262) and SCTP (132) sockets are refused."""
    program = seccomp.program(machine)
    arch = seccomp.AUDIT_ARCH[machine]
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    nr = seccomp.SOCKET[machine]
    for protocol in (0, 6, 17):
        assert _run_bpf(program, arch=arch, nr=nr, arg0=2, arg1=1, arg2=protocol) == allow, protocol
    for protocol in (262, 132, 1, 255, 0x10000 | 6):
        assert _run_bpf(program, arch=arch, nr=nr, arg0=2, arg1=1, arg2=protocol) == eperm, protocol
    assert _run_bpf(program, arch=arch, nr=seccomp.CLONE[machine], arg0=17, arg2=262) == allow


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_filter_allows_only_families_and_types_a_network_namespace_separates(machine):
    """``AF_VSOCK``'s ports are the machine's, shared by the host and every Space (a hostile
    tenant's bind showed in another Space's); ``SOCK_SEQPACKET`` with protocol 0 is SCTP on a
    kernel with SCTP. Unix, IPv4 and IPv6 stream/datagram sockets (with ``SOCK_NONBLOCK`` and
    ``SOCK_CLOEXEC``), and route netlink for the C library, stay."""
    program = seccomp.program(machine)
    arch = seccomp.AUDIT_ARCH[machine]
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    nr = seccomp.SOCKET[machine]
    nonblock_cloexec = 0o4000 | 0o2000000
    for family in (2, 10):  # AF_INET, AF_INET6
        for kind in (1, 2, 1 | nonblock_cloexec, 2 | nonblock_cloexec):
            assert _run_bpf(program, arch=arch, nr=nr, arg0=family, arg1=kind) == allow, (family, kind)
        for kind in (0, 3, 4, 5, 6, 10, 5 | nonblock_cloexec):  # raw, RDM, SEQPACKET, DCCP, PACKET
            assert _run_bpf(program, arch=arch, nr=nr, arg0=family, arg1=kind) == eperm, (family, kind)
    for kind in (1, 2, 5, 1 | nonblock_cloexec):  # AF_UNIX: stream, datagram, seqpacket
        assert _run_bpf(program, arch=arch, nr=nr, arg0=1, arg1=kind) == allow, kind
    assert _run_bpf(program, arch=arch, nr=nr, arg0=1, arg1=1, arg2=262) == eperm
    assert _run_bpf(program, arch=arch, nr=nr, arg0=16, arg1=3, arg2=0) == allow  # NETLINK_ROUTE
    for protocol in (4, 9, 15, 16, 6):  # sock_diag, audit, uevents, generic, xfrm
        assert _run_bpf(program, arch=arch, nr=nr, arg0=16, arg1=3, arg2=protocol) == eperm, protocol
    # AF_PACKET, AF_VSOCK, AF_ALG, AF_KEY, AF_TIPC, AF_XDP, AF_BLUETOOTH, AF_CAN, AF_RDS, AF_NETLINK+2^32
    for family in (17, 40, 38, 15, 30, 44, 31, 29, 21, 0, 3, 0x10000 | 2):
        assert _run_bpf(program, arch=arch, nr=nr, arg0=family, arg1=1) == eperm, family


def test_the_assembler_resolves_labels_to_relative_jumps():
    program = seccomp.assemble([
        (seccomp.LD, 0, None, None),
        (seccomp.JEQ, 7, "yes", "no"),
        ("label", "no"),
        (seccomp.RET, 1, None, None),
        ("label", "yes"),
        (seccomp.RET, 2, None, None),
    ])
    assert program == [(seccomp.LD, 0, 0, 0), (seccomp.JEQ, 1, 0, 7), (seccomp.RET, 0, 0, 1), (seccomp.RET, 0, 0, 2)]
    assert _run_bpf(program, arch=0, nr=7) == 2 and _run_bpf(program, arch=0, nr=8) == 1


def test_the_assembler_refuses_jumps_longer_than_classic_bpf_allows_and_unknown_labels():
    far = [(seccomp.JEQ, 1, "end", None), *[(seccomp.LD, 0, None, None)] * 256, ("label", "end"),
           (seccomp.RET, 0, None, None)]
    with pytest.raises(syscalls.IsolationUnavailable, match="too long"):
        seccomp.assemble(far)
    with pytest.raises(KeyError):
        seccomp.assemble([(seccomp.JEQ, 1, "nowhere", None), (seccomp.RET, 0, None, None)])


def test_a_machine_without_a_table_has_no_filter():
    with pytest.raises(syscalls.IsolationUnavailable, match="riscv64"):
        seccomp.program("riscv64")


def _in_a_fork(fn) -> int:
    """Run ``fn`` in a forked process; its exit status (``fn``'s return value, 99 if it raised)."""
    import os

    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn())
        except BaseException:  # noqa: BLE001
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_filter_packed_before_a_fork_is_installed_by_the_child_and_refuses_the_denied_calls():
    """The zygote packs the filter once (``seccomp.Filter``); a child forked after installs the
    inherited buffers with one ``prctl``: ``unshare`` then fails with EPERM there, and the parent
    (which never installed it) is unaffected."""
    import ctypes
    import errno
    import struct

    program = seccomp.program()
    packed = seccomp.Filter(program)
    assert packed.packed == b"".join(struct.pack("HBBI", *instruction) for instruction in program)

    def child() -> int:
        syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
        packed.install()
        unshare = syscalls.function("unshare")
        if unshare(syscalls.CLONE_NEWUTS) != -1 or ctypes.get_errno() != errno.EPERM:
            return 1
        with open("/proc/self/status") as f:
            return 0 if "Seccomp:\t2" in f.read() else 2

    assert _in_a_fork(child) == 0
    with open("/proc/self/status") as f:
        assert "Seccomp:\t0" in f.read()


def test_installing_a_filter_without_no_new_privs_or_privilege_is_refused_clearly():
    import os

    def child() -> int:
        if os.geteuid() == 0:
            os.setresuid(65534, 65534, 65534)  # no CAP_SYS_ADMIN left, no no_new_privs
        try:
            seccomp.Filter(seccomp.program()).install()
        except syscalls.IsolationUnavailable as exc:
            return 0 if "prctl(PR_SET_SECCOMP)" in str(exc) else 1
        return 2

    assert _in_a_fork(child) == 0


def _verdict_and_steps(program, **data) -> tuple[int, int]:
    """``_run_bpf``'s verdict and the number of instructions it ran."""
    steps = 0

    def counting(index):
        nonlocal steps
        steps += 1
        return program[index]

    class Counted(list):
        def __getitem__(self, index):
            return counting(index)

    return _run_bpf(Counted(program), **data), steps


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_system_call_number_gets_the_verdict_of_its_table_in_a_few_instructions(machine):
    """The number is dispatched by a binary search (the kernel emulates the filter for every
    number when a child installs it): each of 0…1023 gets what the tables say — the denied calls
    EPERM, ``clone3`` ENOSYS, a plain ``clone`` and ``socket(AF_INET, SOCK_STREAM, 0)`` allowed,
    any other number allowed — in at most 12 instructions (one ``JEQ`` per denied call took up to
    50)."""
    program = seccomp.program(machine)
    arch = seccomp.AUDIT_ARCH[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    denied = set(seccomp.DENIED_CALLS[machine].values())
    longest = 0
    for nr in range(1024):
        verdict, steps = _verdict_and_steps(program, arch=arch, nr=nr, arg0=2, arg1=1, arg2=0)
        expected = eperm if nr in denied else enosys if nr == seccomp.CLONE3 else allow
        assert verdict == expected, nr
        if nr not in (seccomp.SOCKET[machine], seccomp.CLONE[machine]):
            longest = max(longest, steps)
    assert longest <= 12, longest
