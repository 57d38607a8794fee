"""Tenant isolation for sandbox children: namespaces, a minimal read-only root, one identity per
context, no capabilities, resource limits (issue "Tenant isolation"; DESIGN "Tenant isolation").

Every context is one process forked by the zygote (``Forker.fork``) as PID 1 of a new PID
namespace: the zygote switches the PID namespace of its *next* child with ``unshare
(CLONE_NEWPID)`` and switches back with ``setns`` right after the fork, so it never leaves its
own. When PID 1 of a PID namespace dies the kernel kills every other process in it and reports
the exit only after them: a readable pidfd of the child is therefore the proof that nothing the
tenant started (``setsid``, double forks, daemons, threads) is still alive.

The child then enters its sandbox (``Forker.enter``): it joins a private copy of a *template*
mount namespace built once per zygote (a fresh tmpfs root holding read-only bind mounts of what
an interpreter needs: ``/usr``, the interpreter's prefix with its ``site-packages`` hidden, the
``takohost`` SDK package alone, a few ``/etc`` files, ``/dev`` nodes), takes new mount, network,
IPC and UTS namespaces, mounts its own ``/proc`` and a size-limited scratch ``/tmp``; the host's
checkout, virtualenv, data directory and ``/tmp`` are not in it. The network namespace has no
interface up: nothing, the host's Postgres, Redis and API included, is reachable.

Identity: when the host runs as root each context gets a uid/gid of its own
(``uid_base + its pid on the host``: unique among the live contexts of the machine, shared with
no host process, so ``RLIMIT_NPROC`` counts one context); otherwise the zygote enters a user
namespace once and contexts map to the host's uid. Either way every capability is dropped,
``no_new_privs`` is set and a seccomp filter refuses what namespaces do not separate.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import ctypes
import errno as errno_module
import json
import os
import platform
import resource
import signal
import socket
import stat
import struct
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CONTEXT_ENV",
    "IsolationUnavailable",
    "Layout",
    "MemoryCgroup",
    "landlock_abi",
    "restrict_network",
    "Policy",
    "drop_identity",
    "Forker",
    "host_is_root",
    "setns",
    "namespace_flags",
    "probe",
    "set_dumpable",
    "unshare",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

#: Files of ``/etc`` an interpreter may need (time zone, certificates, name service defaults);
#: only those that exist are mounted.
ETC_FILES = (
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
)
DEV_NODES = ("null", "zero", "full", "random", "urandom")
MODES = ("namespaces", "none")
NETWORKS = ("none", "outbound")

_libc: Any = None

#: The environment of the zygote and so of every context (the zygote's environment is what a
#: child inherits, in ``os.environ`` and in the C library's ``environ``).
CONTEXT_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class IsolationUnavailable(RuntimeError):
    """The kernel refused what the sandbox needs (``unshare``, a mount, an identity change)."""


@dataclass(frozen=True)
class Policy:
    """What the host decides for every context (read from ``TAKOHOST_SANDBOX_*``, see README
    "Security model").

    Attributes:
        mode: ``"namespaces"`` (default) or ``"none"`` (the documented, unsafe opt-out: children
            run in the host's namespaces as the host's user; for machines that cannot isolate).
        memory_mb: address-space limit of a context in MiB (``RLIMIT_AS``; default 1024).
        max_processes: processes and threads of a context (``RLIMIT_NPROC``; default 64).
        max_open_files: open descriptors of a context (``RLIMIT_NOFILE``; default 256).
        max_file_mb: largest file a context may write, in MiB (``RLIMIT_FSIZE``; default 64).
        scratch_mb: size of the context's private ``/tmp`` in MiB (default 64).
        uid_base: first uid/gid of the per-context identities when the host runs as root
            (default 1600000000; a context gets ``uid_base`` + its pid on the host).
        sdk_dir: the ``takohost`` package directory mounted read-only (default: this package's).
        network: ``"none"`` (default: a network namespace of its own with no interface up) or
            ``"outbound"`` (``TAKOHOST_SANDBOX_NETWORK``): the host's network, but a Landlock
            domain lets the context open TCP connections only to ``outbound_ports``, bind no TCP
            port and reach no abstract Unix socket outside itself.
        outbound_ports: TCP ports an ``outbound`` context may connect to
            (``TAKOHOST_SANDBOX_OUTBOUND_PORTS``, default ``80,443``); never a port of the host's
            Postgres, Redis or broker (refused when the policy is read).
        test_shared_dir: test-only (``TAKOHOST_TEST_SANDBOX_SHARED_DIR``): one host directory that
            appears read-write at the same path in every context. Never set in production.
    """

    mode: str = "namespaces"
    memory_mb: int = 1024
    max_processes: int = 64
    max_open_files: int = 256
    max_file_mb: int = 64
    scratch_mb: int = 64
    uid_base: int = 1_600_000_000
    sdk_dir: str = field(default_factory=lambda: _default_sdk_dir())
    network: str = "none"
    outbound_ports: tuple[int, ...] = (80, 443)
    test_shared_dir: str | None = None

    @classmethod
    def from_environ(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> Policy:
        """Read the policy from ``environ`` (default ``os.environ``); ``ValueError`` for a bad
        value (named in the message)."""
        env = os.environ if environ is None else environ

        def integer(name: str, default: int, low: int = 1) -> int:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {raw!r}") from None
            if value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
            return value

        mode = env.get("TAKOHOST_SANDBOX_ISOLATION") or "namespaces"
        if mode not in MODES:
            raise ValueError(f"TAKOHOST_SANDBOX_ISOLATION must be one of {', '.join(MODES)}, not {mode!r}")
        network = env.get("TAKOHOST_SANDBOX_NETWORK") or "none"
        if network not in NETWORKS:
            raise ValueError(
                f"TAKOHOST_SANDBOX_NETWORK must be one of {', '.join(NETWORKS)}, not {network!r}"
            )
        ports = _ports(env.get("TAKOHOST_SANDBOX_OUTBOUND_PORTS") or "80,443")
        if network == "outbound":
            for name, port in _host_service_ports(env):
                if port in ports:
                    raise ValueError(
                        f"TAKOHOST_SANDBOX_OUTBOUND_PORTS includes {port}, the port of {name}: tenant code "
                        "could reach the host's own service"
                    )
        shared = env.get("TAKOHOST_TEST_SANDBOX_SHARED_DIR") or None
        if shared is not None and not os.path.isabs(shared):
            raise ValueError("TAKOHOST_TEST_SANDBOX_SHARED_DIR must be an absolute path")
        return cls(
            mode=mode,
            memory_mb=integer("TAKOHOST_SANDBOX_MEMORY_MB", 1024, 64),
            max_processes=integer("TAKOHOST_SANDBOX_MAX_PROCESSES", 64, 4),
            max_open_files=integer("TAKOHOST_SANDBOX_MAX_OPEN_FILES", 256, 16),
            max_file_mb=integer("TAKOHOST_SANDBOX_MAX_FILE_MB", 64),
            scratch_mb=integer("TAKOHOST_SANDBOX_SCRATCH_MB", 64),
            uid_base=integer("TAKOHOST_SANDBOX_UID_BASE", 1_600_000_000, 1000),
            network=network,
            outbound_ports=ports,
            test_shared_dir=os.path.realpath(shared) if shared else None,
        )

    def to_json(self) -> str:
        """The policy as one JSON argument (for the zygote's command line)."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        """Inverse of :meth:`to_json`."""
        values = json.loads(text)
        values["outbound_ports"] = tuple(values.get("outbound_ports") or ())
        return cls(**values)


def _ports(text: str) -> tuple[int, ...]:
    ports = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= 65535:
            raise ValueError(
                f"TAKOHOST_SANDBOX_OUTBOUND_PORTS must be TCP ports separated by commas, not {text!r}"
            )
        ports.append(int(part))
    return tuple(sorted(set(ports)))


def _host_service_ports(env: Any) -> list[tuple[str, int]]:
    """``(variable, port)`` of the host's Postgres, Redis and broker URLs (their defaults too) and
    of its metrics endpoint when ``TAKOHOST_METRICS_PORT`` is set."""
    from urllib.parse import urlsplit

    defaults = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379, "amqp": 5672}
    found = []
    redis_url = env.get("TAKOHOST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    for name, url in (
        ("TAKOHOST_DATABASE_URL", env.get("TAKOHOST_DATABASE_URL") or "postgresql://127.0.0.1:5432/takohost"),
        ("TAKOHOST_REDIS_URL", redis_url),
        ("TAKOHOST_BROKER_URL", env.get("TAKOHOST_BROKER_URL") or redis_url),
    ):
        try:
            parts = urlsplit(url)
            port = parts.port or defaults.get(parts.scheme.split("+")[0])
        except ValueError:
            continue
        if port:
            found.append((name, port))
    metrics = (env.get("TAKOHOST_METRICS_PORT") or "").strip()
    if metrics.isascii() and metrics.isdigit():
        found.append(("TAKOHOST_METRICS_PORT (the unauthenticated metrics endpoint)", int(metrics)))
    return found


def _default_sdk_dir() -> str:
    import takohost

    return os.path.dirname(os.path.realpath(takohost.__file__))


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise IsolationUnavailable(
            f"{what}: {os.strerror(code)} (errno {errno_module.errorcode.get(code, code)})"
        )


def _prctl(option: int, a: int = 0, b: int = 0) -> None:
    _check(_lib().prctl(option, ctypes.c_ulong(a), ctypes.c_ulong(b), 0, 0), f"prctl({option})")


def set_dumpable(value: bool) -> None:
    """``PR_SET_DUMPABLE``: a non-dumpable process's memory, environment and descriptors cannot
    be read through ``/proc`` or ptrace by another process of the same uid."""
    _prctl(PR_SET_DUMPABLE, 1 if value else 0)


def namespace_flags(*, as_root: bool) -> int:
    """The ``unshare`` flags of a context (``CLONE_NEWUSER`` only when not root)."""
    flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    return flags if as_root else flags | CLONE_NEWUSER


def unshare(flags: int) -> None:
    """``unshare(flags)``; for ``CLONE_NEWUSER`` also map the caller's uid/gid to 0 inside.
    Raises ``IsolationUnavailable``."""
    uid, gid = os.getuid(), os.getgid()
    _check(_lib().unshare(ctypes.c_int(flags)), "unshare")
    if flags & CLONE_NEWUSER:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")


def _write(path: str, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise IsolationUnavailable(f"writing {path}: {exc.strerror}") from None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    result = _lib().mount(
        None if source is None else source.encode(),
        target.encode(),
        None if fstype is None else fstype.encode(),
        ctypes.c_ulong(flags),
        None if data is None else data.encode(),
    )
    _check(result, f"mount {source} on {target}")


def _bind(source: str, target: str, *, writable: bool = False, device: bool = False) -> None:
    """Bind ``source`` on ``target`` (created as a file or directory), read-only by default,
    never set-uid, and without device access unless ``device`` (the ``/dev`` nodes)."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_BIND | MS_REMOUNT | MS_NOSUID | (0 if device else MS_NODEV) | (0 if writable else MS_RDONLY)
    try:
        _mount(None, target, None, flags)
    except IsolationUnavailable:
        # In a user namespace a mount keeps its locked flags (e.g. nodev of /dev): keep those.
        _mount(None, target, None, flags & ~MS_NODEV)


def _syscall(table: dict[str, int]) -> int:
    machine = platform.machine()
    if machine not in table:
        raise IsolationUnavailable(f"no system call table for {machine}")
    return table[machine]


def _pivot_root(new_root: str) -> None:
    os.chdir(new_root)
    _check(_lib().syscall(_syscall(_SYS_PIVOT_ROOT), b".", b"."), "pivot_root")
    _check(_lib().umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")


@dataclass(frozen=True)
class Layout:
    """What :func:`enter_sandbox` mounts, computed once in the zygote (no look-ups per context).

    Attributes: ``mirrors`` (top-level ``(path, symlink target or None)``), ``etc_files`` (copied
    into the root), ``binds`` (read-only
    ``(source, target)`` pairs), ``hidden`` (directories covered by an empty read-only mount: the
    interpreter's ``site-packages``), ``dev_nodes``, ``sys_path`` (inside the context),
    ``last_cap`` (highest capability number of this kernel).
    """

    policy: Policy
    mirrors: tuple[tuple[str, str | None], ...]
    binds: tuple[tuple[str, str], ...]
    etc_files: tuple[str, ...]
    hidden: tuple[str, ...]
    dev_nodes: tuple[str, ...]
    sys_path: tuple[str, ...]
    last_cap: int
    seccomp: tuple[tuple[int, int, int, int], ...]

    @classmethod
    def compute(cls, policy: Policy) -> Layout:
        """The layout of this machine's interpreter and ``policy``'s SDK directory."""
        import sysconfig

        mirrors = []
        for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                mirrors.append((top, os.readlink(top)))
            elif os.path.isdir(top):
                mirrors.append((top, None))
        prefix = os.path.realpath(sys.base_prefix)
        binds = [] if prefix.startswith("/usr/") else [(prefix, prefix)]
        hidden = set()
        for key in ("purelib", "platlib"):
            path = os.path.realpath(sysconfig.get_path(key, vars={"base": prefix, "platbase": prefix}))
            if path.startswith(prefix + os.sep) and os.path.isdir(path):
                hidden.add(path)
        binds.append((policy.sdk_dir, policy.sdk_dir))
        etc_files = tuple(p for p in ETC_FILES if os.path.exists(p))
        # The interpreter's own entries of sys.path (the zipped and plain standard library and
        # lib-dynload, all under the base prefix: a virtualenv's sysconfig points elsewhere),
        # then the SDK's parent directory.
        sys_path: list[str] = []
        for path in sys.path:
            real = os.path.realpath(path) if path else ""
            if real.startswith(prefix + os.sep) and not any(real.startswith(h) for h in hidden):
                if real not in sys_path:
                    sys_path.append(real)
        sdk_parent = os.path.dirname(policy.sdk_dir)
        if sdk_parent not in sys_path:
            sys_path.append(sdk_parent)
        nodes = tuple(node for node in DEV_NODES if os.path.exists(f"/dev/{node}"))
        return cls(
            policy=policy,
            mirrors=tuple(mirrors),
            binds=tuple(binds),
            etc_files=etc_files,
            hidden=tuple(sorted(hidden)),
            dev_nodes=nodes,
            sys_path=tuple(sys_path),
            last_cap=_last_cap(),
            seccomp=tuple(seccomp_program()),
        )


def setns(fd: int, nstype: int) -> None:
    """``setns(fd, nstype)``: join the namespace ``fd`` names. Raises ``IsolationUnavailable``."""
    _check(_lib().setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


_SHARED_STAGE = "/.takohost-test-shared"
_STAGE = "/.takohost-stage"


def placements(layout: Layout) -> list[tuple[str, str, str]]:
    """``(source, place in the template, target in a context)`` of each read-only bind. A target
    under ``/tmp`` (a checkout or interpreter there) would be covered by each context's scratch
    tmpfs: it is placed under ``/.takohost-stage/N`` in the template and bound again over the
    scratch in each context."""
    result = []
    for index, (source, target) in enumerate(layout.binds):
        place = f"{_STAGE}/{index}" if target == "/tmp" or target.startswith("/tmp/") else target
        result.append((source, place, target))
    return result


def _placed(layout: Layout, path: str) -> str:
    """Where ``path`` (inside one of the binds) lies in the template."""
    for _, place, target in placements(layout):
        if path == target or path.startswith(target + "/"):
            return place + path[len(target) :]
    return path


def _copy_into(path: str, root: str) -> None:
    """Copy the file or directory ``path`` (symbolic links kept as links) to ``root + path``."""
    import shutil

    target = root + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.copytree(path, target, symlinks=True)
    else:
        shutil.copy2(os.path.realpath(path), target)


def _build_template(layout: Layout, root: str) -> int:
    """Build the read-only root every context starts from, once, in a mount namespace of its own
    (a helper process makes it and exits); returns an ``nsfs`` descriptor that keeps it alive.

    The root is a tmpfs on ``root`` (an existing empty directory; only the helper's namespace
    sees the mount) holding read-only binds of what an interpreter needs, a ``proc`` of the
    zygote's PID namespace at ``/proc`` (each context mounts its own over it: a kernel rule wants
    a visible ``proc`` before another may be mounted in a user namespace; it is never reachable
    under that mount) and an empty ``/tmp`` for each context's scratch tmpfs. The helper pivots
    into it, so the host's tree is not in the namespace at all.
    """
    policy = layout.policy
    reader, writer = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        reader.close()
        try:
            unshare(CLONE_NEWNS)
            _mount(None, "/", None, MS_REC | MS_PRIVATE)
            # Every mount here is copied into each context's namespace and torn down with it:
            # /etc files are copied and /dev nodes made in the root tmpfs, not bound.
            as_root = host_is_root()
            _mount("tmpfs", root, "tmpfs", MS_NOSUID | (0 if as_root else MS_NODEV), "size=4m,mode=0755")
            for top, target in layout.mirrors:
                if target is None:
                    _bind(top, root + top)
                else:
                    os.symlink(target, root + top)
            for source, place, _ in placements(layout):
                _bind(source, root + place)
            for path in layout.hidden:
                _mount(
                    "tmpfs",
                    root + _placed(layout, path),
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV,
                    "size=4k,mode=0555",
                )
            for path in layout.etc_files:
                _copy_into(path, root)
            os.mkdir(root + "/dev")
            for node in layout.dev_nodes:
                if as_root:
                    rdev = os.stat(f"/dev/{node}").st_rdev
                    os.mknod(f"{root}/dev/{node}", 0o666 | stat.S_IFCHR, rdev)
                    os.chmod(f"{root}/dev/{node}", 0o666)
                else:  # no mknod in a user namespace
                    _bind(f"/dev/{node}", f"{root}/dev/{node}", writable=True, device=True)
            os.mkdir(root + "/proc")
            _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            os.mkdir(root + "/tmp", 0o755)
            if policy.test_shared_dir:
                _bind(policy.test_shared_dir, root + _SHARED_STAGE, writable=True)
                if not policy.test_shared_dir.startswith("/tmp/"):
                    os.makedirs(root + policy.test_shared_dir, exist_ok=True)
            _pivot_root(root)
            _mount(
                None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (0 if as_root else MS_NODEV)
            )
            fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
            socket.send_fds(writer, [b"ok"], [fd])
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the zygote
            writer.sendall(f"error {exc}".encode()[:2000])
            code = 1
        os._exit(code)
    writer.close()
    try:
        data, fds, _, _ = socket.recv_fds(reader, 2000, 1)
    finally:
        reader.close()
        os.waitpid(pid, 0)
    if data != b"ok" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise IsolationUnavailable(data[6:].decode(errors="replace") or "the template helper died")
    return fds[0]


class MemoryCgroup:
    """Per-context memory cgroups under one directory of this zygote (the memory limit then
    holds for a context's processes together, not for each: ``RLIMIT_AS`` alone would let a
    context of ``max_processes`` processes hold that many times ``memory_mb``).

    ``find(policy)`` returns one where the host can create them (cgroup v1's memory hierarchy,
    or a cgroup v2 directory that has ``memory`` in its ``cgroup.subtree_control``), else
    ``None``. ``join(pid)`` (in the child, before it leaves the host's mount namespace) makes
    ``ctx-<pid>``, sets the limit and moves the caller into it; ``release(pid)`` (in the zygote,
    after reaping the child) removes it; ``close()`` removes the zygote's directory.
    """

    def __init__(self, directory: str, *, version: int, limit_bytes: int) -> None:
        self.directory = directory
        self.version = version
        self.limit_bytes = limit_bytes

    @classmethod
    def find(cls, policy: Policy) -> MemoryCgroup | None:
        """A usable parent for per-context cgroups, or ``None`` (no error: the caller falls back
        to per-process limits)."""
        try:
            with open("/proc/self/cgroup") as f:
                memberships = [line.rstrip("\n").split(":", 2) for line in f]
            with open("/proc/self/mountinfo") as f:
                mounts = [line.split() for line in f]
        except OSError:
            return None
        for mount in mounts:
            sep = mount.index("-")
            fstype, options = mount[sep + 1], mount[sep + 3].split(",")
            if fstype == "cgroup" and "memory" in options:
                own = next(
                    (path for _, controllers, path in memberships if "memory" in controllers.split(",")), None
                )
                version = 1
            elif fstype == "cgroup2":
                own = next((path for hid, _, path in memberships if hid == "0"), None)
                version = 2
            else:
                continue
            if own is None:
                continue
            base = os.path.join(mount[4], own.lstrip("/"))
            if version == 2:
                try:
                    with open(os.path.join(base, "cgroup.subtree_control")) as f:
                        if "memory" not in f.read().split():
                            continue
                except OSError:
                    continue
            directory = os.path.join(base, f"takohost-zygote-{os.getpid()}")
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                pass
            except OSError:
                continue
            return cls(directory, version=version, limit_bytes=policy.memory_mb << 20)
        return None

    def join(self, pid: int) -> None:
        """Create ``ctx-<pid>`` with the limit (no swap beyond it) and move this process in."""
        path = os.path.join(self.directory, f"ctx-{pid}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise IsolationUnavailable(f"creating the context's memory cgroup: {exc.strerror}") from None
        if self.version == 1:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(self.limit_bytes))
            swap = os.path.join(path, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):
                _write(swap, str(self.limit_bytes))
        else:
            _write(os.path.join(path, "memory.max"), str(self.limit_bytes))
            swap = os.path.join(path, "memory.swap.max")
            if os.path.exists(swap):
                _write(swap, "0")
        _write(os.path.join(path, "cgroup.procs"), "0")

    def release(self, pid: int) -> None:
        """Remove ``ctx-<pid>`` (its processes are gone); ignores one already removed."""
        try:
            os.rmdir(os.path.join(self.directory, f"ctx-{pid}"))
        except OSError:
            pass

    def close(self) -> None:
        """Remove every context cgroup left and the zygote's directory."""
        try:
            for name in os.listdir(self.directory):
                if name.startswith("ctx-"):
                    self.release(int(name[4:]))
            os.rmdir(self.directory)
        except (OSError, ValueError):
            pass


class Forker:
    """The zygote's side of isolation: forks children that are PID 1 of a new PID namespace, and
    lets each enter its sandbox (:meth:`enter`). Built once per zygote; single-threaded use.

    Construction (namespaces mode) enters a user namespace first when the zygote is not root
    (then every namespace it makes is owned by it), keeps a descriptor of its own PID namespace
    and builds the template mount namespace (:func:`_build_template`). Raises
    ``IsolationUnavailable`` with the kernel's reason when any of that is refused. With
    ``mode == "none"`` it only forks.
    """

    def __init__(self, layout: Layout, *, root: str) -> None:
        self.layout = layout
        self.isolated = layout.policy.mode == "namespaces"
        self.template_fd = -1
        self.pidns_fd = -1
        self.memory: MemoryCgroup | None = None
        if not self.isolated:
            return
        if not host_is_root():
            unshare(CLONE_NEWUSER)
        # Kept above the descriptors a child sets up (0-3), so that they survive its clean-up.
        self.pidns_fd = _high(os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC))
        self.template_fd = _high(_build_template(layout, root))
        self.memory = MemoryCgroup.find(layout.policy)

    def fork(self) -> int:
        """``os.fork()``; with namespaces the child is PID 1 of a PID namespace of its own (the
        zygote's own namespace is unchanged: only the one for its next child is switched)."""
        if not self.isolated:
            return os.fork()
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            setns(self.pidns_fd, CLONE_NEWPID)
            raise
        if pid != 0:
            setns(self.pidns_fd, CLONE_NEWPID)
        return pid

    def enter(self) -> int:
        """In a child from :meth:`fork` (namespaces mode), before it runs anything of a tenant:
        join a private copy of the template root, take new mount/network/IPC/UTS namespaces,
        mount its own ``/proc`` and scratch ``/tmp`` (its working directory), set the limits,
        drop to its own identity (root hosts: ``uid_base`` + its pid on the host) and every
        capability, set ``no_new_privs``, install the system-call filter and narrow
        ``sys.path``. Returns the uid it runs as. Raises ``IsolationUnavailable``."""
        layout, policy = self.layout, self.layout.policy
        as_root = host_is_root()
        if self.pidns_fd >= 0:
            os.close(self.pidns_fd)
        host_pid = int(os.readlink("/proc/self"))  # the host's proc: the host's pid
        if self.memory is not None:
            self.memory.join(host_pid)
            self.memory = None  # its directory names the zygote's host pid
        setns(self.template_fd, CLONE_NEWNS)
        os.close(self.template_fd)
        outbound = policy.network == "outbound"
        # A cgroup namespace rooted at the context's own cgroup: /proc/self/cgroup shows "/", not
        # the host's cgroup paths (the container's id, the zygote's and the context's host pids).
        unshare(
            CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | (0 if outbound else CLONE_NEWNET)
        )
        uid = policy.uid_base + host_pid if as_root else os.getuid()
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        owner = f",uid={uid},gid={uid}" if as_root else ""
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={policy.scratch_mb}m,mode=0700{owner}")
        for _, place, target in placements(layout):
            if place != target:  # under /tmp: bound again over this context's scratch tmpfs
                os.makedirs(target, exist_ok=True)
                _mount(place, target, None, MS_BIND | MS_REC)
        if policy.test_shared_dir:
            target = policy.test_shared_dir
            if target.startswith("/tmp/"):  # else the template has the mount point
                os.makedirs(target, exist_ok=True)
            _mount(_SHARED_STAGE, target, None, MS_BIND)
            # Every context has its own uid: what one creates there, the next may append to.
            os.umask(0)
        os.chdir("/tmp")
        set_limits(policy)
        drop_identity(uid if as_root else None, last_cap=layout.last_cap)
        if outbound:
            restrict_network(policy.outbound_ports)
        install_seccomp(list(layout.seccomp))
        sys.path[:] = layout.sys_path
        # A fresh importer cache: finders list directories as the host sees them. The zygote
        # emptied its own before it forked (``zygote._preload``), so this frees next to nothing.
        sys.path_importer_cache.clear()
        sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__module__", "") in _STANDARD_FINDERS]
        return uid


def _high(fd: int, minimum: int = 16) -> int:
    """Move ``fd`` to a close-on-exec descriptor number of at least ``minimum``."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, minimum)
    os.close(fd)
    return moved


def host_is_root() -> bool:
    """True when this process is root of the machine (not in a user namespace): contexts then
    get identities of their own; otherwise a user namespace maps them to this uid."""
    return os.geteuid() == 0 and not _in_user_namespace()


_STANDARD_FINDERS = frozenset(
    {
        "_frozen_importlib",
        "_frozen_importlib_external",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
    }
)


def _in_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def set_limits(policy: Policy) -> None:
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
    and set ``no_new_privs``."""
    for cap in range(last_cap + 1):
        try:
            _prctl(PR_CAPBSET_DROP, cap)
        except IsolationUnavailable:
            break
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _clear_capabilities()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    # setresuid made us non-dumpable; nothing else with this identity exists, and the context's
    # own /proc must stay readable to itself.
    set_dumpable(True)


# -- system-call filter ---------------------------------------------------------------------------
# Calls a context never needs and that reach state the namespaces do not separate (the kernel
# keyrings are per uid, not per namespace) or that are the usual ways to attack the kernel
# (nested namespaces, mounts, BPF, perf, io_uring, module loading). They fail with EPERM;
# ``clone3`` fails with ENOSYS so that the C library falls back to ``clone``, whose flags the
# filter can see (any ``CLONE_NEW*`` flag is refused there).
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_DENIED_CALLS = {
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
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
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
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
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
_CLONE = {"x86_64": 56, "aarch64": 220}
_SOCKET = {"x86_64": 41, "aarch64": 198}
#: ``socket()`` address families a context may ask for (the rest, ``socket(2)``'s ``domain``, is
#: refused). Each of these is separated by the context's network namespace; ``AF_VSOCK`` (40) is
#: not: its ports are the whole machine's, shared with the host and every other context (one
#: Space's bound port is visible to another's bind), and it reaches the hypervisor. ``AF_PACKET``,
#: ``AF_ALG``, ``AF_KEY``, ``AF_TIPC``, ``AF_XDP``, ``AF_BLUETOOTH`` … are attack surface a
#: context has no use for. ``AF_NETLINK`` stays for ``NETLINK_ROUTE`` (0) only: the C library's
#: ``getaddrinfo`` and ``if_nameindex`` read the (namespaced) interfaces through it.
_SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}
_AF_NETLINK, _NETLINK_ROUTE = 16, 0
#: ``socket()`` types (``type & SOCK_TYPE_MASK``, without ``SOCK_NONBLOCK``/``SOCK_CLOEXEC``) of
#: an ``AF_INET``/``AF_INET6`` socket: stream and datagram. ``SOCK_SEQPACKET`` with protocol 0
#: is SCTP where the kernel has it, whatever the protocol check below says.
_INET_SOCKET_TYPES = (1, 2)
_SOCK_TYPE_MASK = 0xF
#: ``socket()`` protocols a context may ask for: the default, TCP and UDP. Landlock's port rules
#: (``TAKOHOST_SANDBOX_NETWORK=outbound``) hold for TCP only: an MPTCP socket (262) would connect
#: to and listen on any port, SCTP (132) would listen where other contexts reach it.
_SOCKET_PROTOCOLS = (0, 6, 17)
_CLONE3 = 435
_CLONE_NEW_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | 0x00000080
)  # + NEWTIME
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
# classic BPF: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ/JGE/JSET|BPF_K, BPF_ALU|BPF_AND|BPF_K, BPF_RET|BPF_K
_LD, _JEQ, _JGE, _JSET, _AND, _RET = 0x20, 0x15, 0x35, 0x45, 0x54, 0x06
#: Offsets in ``struct seccomp_data``: the call's number, the architecture, and the low 32 bits
#: of ``args[0]``, ``args[1]``, ``args[2]`` (little-endian).
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32


def seccomp_program(machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The classic-BPF program of the context's system-call filter, as ``(code, jt, jf, k)``
    instructions (pure; ``IsolationUnavailable`` for an architecture without a table).

    Another architecture's calls kill the process; the x32 ABI, :data:`_DENIED_CALLS`, a
    ``clone`` asking for a namespace, and a ``socket()`` outside :data:`_SOCKET_FAMILIES` /
    :data:`_INET_SOCKET_TYPES` / :data:`_SOCKET_PROTOCOLS` fail with ``EPERM``; ``clone3`` with
    ``ENOSYS`` (the C library falls back to ``clone``, whose flags can be read)."""
    machine = machine or platform.machine()
    if machine not in _DENIED_CALLS:
        raise IsolationUnavailable(f"no system-call filter for {machine}")
    eperm = _SECCOMP_RET_ERRNO | errno_module.EPERM
    # (code, k, jt, jf): jt/jf name a label (None: the next instruction); ("label", name) marks one.
    asm: list[tuple] = [
        (_LD, _ARCH, None, None),
        (_JEQ, _AUDIT_ARCH[machine], None, "kill"),
        (_LD, _NR, None, None),
        (_JGE, 0x40000000, "eperm", None),  # the x32 ABI's numbers on x86_64: refused
        *((_JEQ, nr, "eperm", None) for nr in sorted(_DENIED_CALLS[machine].values())),
        (_JEQ, _SOCKET[machine], "socket", None),
        (_JEQ, _CLONE3, "enosys", None),
        (_JEQ, _CLONE[machine], None, "allow"),
        (_LD, _ARG0, None, None),  # clone's flags
        (_JSET, _CLONE_NEW_FLAGS, "eperm", "allow"),
        ("label", "socket"),
        (_LD, _ARG0, None, None),  # the address family
        *((_JEQ, family, "socket_type", None) for family in sorted(_SOCKET_FAMILIES.values())),
        (_JEQ, _AF_NETLINK, None, "eperm"),
        (_LD, _ARG2, None, None),
        (_JEQ, _NETLINK_ROUTE, "allow", "eperm"),
        ("label", "socket_type"),
        (_JEQ, _SOCKET_FAMILIES["AF_UNIX"], "socket_protocol", None),  # any type of a Unix socket
        (_LD, _ARG1, None, None),
        (_AND, _SOCK_TYPE_MASK, None, None),
        *((_JEQ, kind, "socket_protocol", None) for kind in _INET_SOCKET_TYPES),
        (_RET, eperm, None, None),
        ("label", "socket_protocol"),
        (_LD, _ARG2, None, None),
        *((_JEQ, protocol, "allow", None) for protocol in _SOCKET_PROTOCOLS),
        ("label", "eperm"),
        (_RET, eperm, None, None),
        ("label", "allow"),
        (_RET, _SECCOMP_RET_ALLOW, None, None),
        ("label", "enosys"),
        (_RET, _SECCOMP_RET_ERRNO | errno_module.ENOSYS, None, None),
        ("label", "kill"),
        (_RET, _SECCOMP_RET_KILL_PROCESS, None, None),
    ]
    return _assemble(asm)


def _assemble(asm: list[tuple]) -> list[tuple[int, int, int, int]]:
    """Resolve the labels of ``asm`` (see :func:`seccomp_program`) into relative jumps."""
    labels: dict[str, int] = {}
    instructions: list[tuple] = []
    for item in asm:
        if item[0] == "label":
            labels[item[1]] = len(instructions)
        else:
            instructions.append(item)
    program: list[tuple[int, int, int, int]] = []
    for index, (code, k, jt, jf) in enumerate(instructions):

        def to(target: str | None, index: int = index) -> int:
            return 0 if target is None else labels[target] - index - 1

        program.append((code, to(jt), to(jf), k))
    if any(not 0 <= jt <= 255 or not 0 <= jf <= 255 for _, jt, jf, _ in program):
        raise IsolationUnavailable("the system-call filter is too long for classic BPF jumps")
    return program


def install_seccomp(program: list[tuple[int, int, int, int]]) -> None:
    """Install ``program`` as this process's seccomp filter (needs ``no_new_privs``); inherited
    by every process it starts and irrevocable."""
    raw = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    filters = ctypes.create_string_buffer(raw, len(raw))
    fprog = struct.pack("HxxxxxxP", len(program), ctypes.addressof(filters))
    buffer = ctypes.create_string_buffer(fprog, len(fprog))
    _check(
        _lib().prctl(_PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER), buffer, 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_ACCESS_NET_BIND_TCP = 1
_LANDLOCK_ACCESS_NET_CONNECT_TCP = 2
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_LANDLOCK_SCOPE_SIGNAL = 2
_LANDLOCK_RULE_NET_PORT = 2


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 when Landlock is unavailable or disabled)."""
    version = _lib().syscall(_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


def restrict_network(ports: tuple[int, ...]) -> None:
    """Landlock (ABI 6+): from now on this process and its descendants may connect over TCP only
    to ``ports``, bind no TCP port, and reach no abstract Unix socket or process outside this
    domain (each context its own). Needs ``no_new_privs``. Raises ``IsolationUnavailable``."""
    abi = landlock_abi()
    if abi < 6:
        raise IsolationUnavailable(
            f"TAKOHOST_SANDBOX_NETWORK=outbound needs Landlock ABI 6 (Linux 6.12); this kernel has {abi}"
        )
    attr = struct.pack(
        "QQQ",
        0,
        _LANDLOCK_ACCESS_NET_BIND_TCP | _LANDLOCK_ACCESS_NET_CONNECT_TCP,
        _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | _LANDLOCK_SCOPE_SIGNAL,
    )
    attr_buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _lib().syscall(_LANDLOCK_CREATE_RULESET, attr_buf, ctypes.c_size_t(len(attr)), 0)
    if fd < 0:
        _check(-1, "landlock_create_ruleset")
    try:
        for port in ports:
            rule = struct.pack("QQ", _LANDLOCK_ACCESS_NET_CONNECT_TCP, port)
            rule_buf = ctypes.create_string_buffer(rule, len(rule))
            _check(
                _lib().syscall(_LANDLOCK_ADD_RULE, fd, _LANDLOCK_RULE_NET_PORT, rule_buf, 0),
                "landlock_add_rule",
            )
        _check(_lib().syscall(_LANDLOCK_RESTRICT_SELF, fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)


def _clear_capabilities() -> None:
    header = struct.pack("II", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)
    header_buf = ctypes.create_string_buffer(header, len(header))
    data_buf = ctypes.create_string_buffer(data, len(data))
    _check(_lib().syscall(_syscall(_SYS_CAPSET), header_buf, data_buf), "capset")


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def probe(layout: Layout, *, root: str) -> None:
    """Check, in a throw-away process, that this machine can isolate contexts with ``layout``
    (``root``: the empty mount point directory the template uses): the same :class:`Forker`
    the zygote uses builds its template, forks a child and lets it enter its sandbox. Raises
    ``IsolationUnavailable`` with the kernel's reason otherwise. ``mode == "none"`` passes."""
    if layout.policy.mode == "none":
        return
    reader, writer = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        reader.close()
        code = 1
        try:
            forker = Forker(layout, root=root)
            child = forker.fork()
            if child == 0:
                try:
                    forker.enter()
                    os._exit(0)
                except BaseException as exc:  # noqa: BLE001 - reported to the probing parent
                    writer.sendall(str(exc).encode()[:1000])
                    os._exit(1)
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            if forker.memory is not None:
                forker.memory.close()
        except BaseException as exc:  # noqa: BLE001
            writer.sendall(str(exc).encode()[:1000])
        os._exit(code)
    writer.close()
    _, status = os.waitpid(pid, 0)
    reason = reader.recv(1000).decode(errors="replace")
    reader.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise IsolationUnavailable(reason or f"the probe exited with status {status}")
