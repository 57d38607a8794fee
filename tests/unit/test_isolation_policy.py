"""The sandbox policy read from ``TAKOHOST_SANDBOX_*`` (README "Security model"): defaults,
bounds, and a clear error naming the variable for a bad value."""

from __future__ import annotations

import pytest

from takohost.runtime import isolation


def test_defaults_are_the_documented_ones():
    policy = isolation.Policy.from_environ({})
    assert policy.mode == "namespaces"
    assert (policy.memory_mb, policy.max_processes, policy.max_open_files) == (1024, 64, 256)
    assert (policy.max_file_mb, policy.scratch_mb) == (64, 64)
    assert policy.uid_base == 1_600_000_000
    assert policy.test_shared_dir is None
    assert policy.sdk_dir.endswith("/takohost")


def test_settings_are_read_and_round_trip_through_json():
    env = {
        "TAKOHOST_SANDBOX_ISOLATION": "none",
        "TAKOHOST_SANDBOX_MEMORY_MB": "256",
        "TAKOHOST_SANDBOX_MAX_PROCESSES": "8",
        "TAKOHOST_SANDBOX_MAX_OPEN_FILES": "32",
        "TAKOHOST_SANDBOX_MAX_FILE_MB": "1",
        "TAKOHOST_SANDBOX_SCRATCH_MB": "2",
        "TAKOHOST_SANDBOX_UID_BASE": "2000000000",
        "TAKOHOST_TEST_SANDBOX_SHARED_DIR": "/tmp",
    }
    policy = isolation.Policy.from_environ(env)
    assert (policy.mode, policy.memory_mb, policy.max_processes) == ("none", 256, 8)
    assert (policy.max_open_files, policy.max_file_mb, policy.scratch_mb) == (32, 1, 2)
    assert policy.uid_base == 2_000_000_000
    assert policy.test_shared_dir == "/tmp"
    assert isolation.Policy.from_json(policy.to_json()) == policy


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("TAKOHOST_SANDBOX_ISOLATION", "off", "must be one of namespaces, none"),
        ("TAKOHOST_SANDBOX_MEMORY_MB", "lots", "must be an integer"),
        ("TAKOHOST_SANDBOX_MEMORY_MB", "16", "at least 64"),
        ("TAKOHOST_SANDBOX_MAX_PROCESSES", "0", "at least 4"),
        ("TAKOHOST_SANDBOX_UID_BASE", "0", "at least 1000"),
        ("TAKOHOST_TEST_SANDBOX_SHARED_DIR", "relative/dir", "absolute path"),
    ],
)
def test_bad_values_name_the_variable(name, value, expected):
    with pytest.raises(ValueError, match=expected) as info:
        isolation.Policy.from_environ({name: value})
    assert name in str(info.value)


def test_namespace_flags_add_a_user_namespace_only_without_root():
    assert not isolation.namespace_flags(as_root=True) & isolation.CLONE_NEWUSER
    assert isolation.namespace_flags(as_root=False) & isolation.CLONE_NEWUSER
    for flag in (isolation.CLONE_NEWPID, isolation.CLONE_NEWNS, isolation.CLONE_NEWNET):
        assert isolation.namespace_flags(as_root=True) & flag


def test_layout_hides_site_packages_and_keeps_only_stdlib_and_sdk_on_sys_path():
    import sys
    import sysconfig

    layout = isolation.Layout.compute(isolation.Policy())
    assert all("site-packages" not in path for path in layout.sys_path)
    assert sysconfig.get_path("stdlib") in layout.sys_path
    assert layout.sys_path[-1] == layout.policy.sdk_dir.rsplit("/", 1)[0]
    assert any(path.endswith("site-packages") for path in layout.hidden) or sys.base_prefix.startswith("/usr")


# -- the system-call filter, run on a small classic-BPF interpreter --------------------------------

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
    program = isolation.seccomp_program(machine)
    arch = isolation._AUDIT_ARCH[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    for name, nr in isolation._DENIED_CALLS[machine].items():
        assert _run_bpf(program, arch=arch, nr=nr) == eperm, name
    clone = isolation._CLONE[machine]
    assert _run_bpf(program, arch=arch, nr=clone, arg0=17) == allow  # fork: SIGCHLD
    assert _run_bpf(program, arch=arch, nr=clone, arg0=0x003D0F00) == allow  # a thread
    for flag in (isolation.CLONE_NEWUSER, isolation.CLONE_NEWPID, isolation.CLONE_NEWNET):
        assert _run_bpf(program, arch=arch, nr=clone, arg0=flag | 17) == eperm
    assert _run_bpf(program, arch=arch, nr=435) == enosys  # clone3: the C library falls back
    assert _run_bpf(program, arch=arch, nr=0) == allow  # read / io_setup
    assert _run_bpf(program, arch=arch, nr=0x40000000 + 248) == eperm  # the x32 ABI
    assert _run_bpf(program, arch=0x40000003, nr=0) == 0x80000000  # another ABI (i386): killed


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_filter_allows_sockets_of_the_default_tcp_and_udp_protocols_only(machine):
    """Landlock's port rules hold for TCP only: MPTCP (262) and SCTP (132) sockets are refused."""
    program = isolation.seccomp_program(machine)
    arch = isolation._AUDIT_ARCH[machine]
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    nr = isolation._SOCKET[machine]
    for protocol in (0, 6, 17):
        assert _run_bpf(program, arch=arch, nr=nr, arg0=2, arg1=1, arg2=protocol) == allow, protocol
    for protocol in (262, 132, 1, 255, 0x10000 | 6):
        assert _run_bpf(program, arch=arch, nr=nr, arg0=2, arg1=1, arg2=protocol) == eperm, protocol
    assert _run_bpf(program, arch=arch, nr=isolation._CLONE[machine], arg0=17, arg2=262) == allow


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_seccomp_filter_allows_only_families_and_types_a_network_namespace_separates(machine):
    """``AF_VSOCK``'s ports are the machine's, shared by the host and every Space (a hostile
    tenant's bind showed in another Space's); ``SOCK_SEQPACKET`` with protocol 0 is SCTP on a
    kernel with SCTP. Unix, IPv4 and IPv6 stream/datagram sockets (with ``SOCK_NONBLOCK`` and
    ``SOCK_CLOEXEC``), and route netlink for the C library, stay."""
    program = isolation.seccomp_program(machine)
    arch = isolation._AUDIT_ARCH[machine]
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    nr = isolation._SOCKET[machine]
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


def test_host_processes_mark_themselves_non_dumpable():
    """``takohost api|worker|beat|dev`` call ``cli._host_process()`` first (README "Security
    model": their memory and environment cannot be read through /proc or ptrace)."""
    import subprocess
    import sys

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
