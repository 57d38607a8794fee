"""The file system a context sees: what the zygote's interpreter and the SDK need (:class:`Layout`,
computed once), where each read-only bind lies in the template (:func:`placements`), and the
template root itself (:func:`build_template`), a mount namespace every context copies.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from dataclasses import dataclass

from takohost.runtime.isolation import identity, seccomp, syscalls
from takohost.runtime.isolation import policy as policy_module
from takohost.runtime.isolation.syscalls import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC

__all__ = [
    "DEV_NODES",
    "ETC_FILES",
    "ETC_WRITTEN",
    "INTERPRETER",
    "SDK_DIR",
    "SDK_ROOT",
    "PACKAGE_MOUNT",
    "Layout",
    "build_template",
    "placements",
]

#: Files of ``/etc`` an interpreter may need (time zone, certificates, name service defaults);
#: only those that exist are copied.
ETC_FILES = (
    "/etc/localtime",
    "/etc/ssl/certs",
    "/etc/nsswitch.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
)
#: Files of ``/etc`` every context gets with this content, not the host's (which name the host,
#: its addresses, its name servers and search domains). Every address is the context's own
#: (``network``): its name server is the egress proxy's responder on the loopback.
ETC_WRITTEN = {
    "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "/etc/resolv.conf": "nameserver 127.0.0.1\n",
}
#: Where a context finds the SDK package: a copy in its root, not a bind of the host's directory
#: (a bind's source would show in ``/proc/self/mountinfo``). The zygote names its own modules so
#: too (``takohost.runtime.boot``).
SDK_ROOT = "/takohost/sdk"
SDK_DIR = SDK_ROOT + "/takohost"
#: ``sys.executable`` in a context: a link to the host's interpreter binary.
INTERPRETER = "/takohost/bin/python3"
DEV_NODES = ("null", "zero", "full", "random", "urandom")
#: Where the host's package layers directory appears in every context, read-only
#: (``workers.packages.layers``; docs/packages.md). Its mode lets a context open the layer its
#: job names but not list the directory: another Space's layer names are never seen.
PACKAGE_MOUNT = "/.takohost-packages"
#: Where the test-only shared directory is staged in the template (bound again in each context).
SHARED_STAGE = "/.takohost-test-shared"
_STAGE = "/.takohost-stage"


@dataclass(frozen=True)
class Layout:
    """What :meth:`forking.Forker.enter` mounts, computed once in the zygote (no look-ups per
    context).

    Attributes: ``mirrors`` (top-level ``(path, symlink target or None)``), ``etc_files`` (copied
    into the root), ``binds`` (read-only
    ``(source, target)`` pairs), ``hidden`` (directories covered by an empty read-only mount: the
    interpreter's ``site-packages``), ``dev_nodes``, ``sys_path`` (inside the context),
    ``last_cap`` (highest capability number of this kernel), ``seccomp`` (the system-call
    filter's program, :func:`seccomp.program`), ``packages`` (``(name, directory on the host)``
    of the SDK and what it imports beyond the standard library, each copied to
    :data:`SDK_ROOT`/name; empty once the template is built, so that no context holds them) and
    ``interpreter`` (the interpreter binary :data:`INTERPRETER` links to).
    """

    policy: policy_module.Policy
    mirrors: tuple[tuple[str, str | None], ...]
    binds: tuple[tuple[str, str], ...]
    etc_files: tuple[str, ...]
    hidden: tuple[str, ...]
    dev_nodes: tuple[str, ...]
    sys_path: tuple[str, ...]
    last_cap: int
    seccomp: tuple[tuple[int, int, int, int], ...]
    packages: tuple[tuple[str, str], ...] = ()
    interpreter: str = ""

    @classmethod
    def compute(cls, policy: policy_module.Policy, *, packages: dict[str, str] | None = None) -> Layout:
        """The layout of this machine's interpreter and of ``packages`` (package name → its
        directory on the host; default: ``policy``'s SDK directory alone)."""
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
        if policy.packages_dir is not None and os.path.isdir(policy.packages_dir):
            # The whole directory, once: layers installed after the zygote started appear in it.
            binds.append((os.path.realpath(policy.packages_dir), PACKAGE_MOUNT))
        etc_files = tuple(p for p in ETC_FILES if os.path.exists(p))
        # The interpreter's own entries of sys.path (the zipped and plain standard library and
        # lib-dynload, all under the base prefix: a virtualenv's sysconfig points elsewhere),
        # then the SDK copy's parent directory.
        sys_path: list[str] = []
        for path in sys.path:
            real = os.path.realpath(path) if path else ""
            if real.startswith(prefix + os.sep) and not any(real.startswith(h) for h in hidden):
                if real not in sys_path:
                    sys_path.append(real)
        sys_path.append(SDK_ROOT)
        nodes = tuple(node for node in DEV_NODES if os.path.exists(f"/dev/{node}"))
        return cls(
            policy=policy,
            mirrors=tuple(mirrors),
            binds=tuple(binds),
            etc_files=etc_files,
            hidden=tuple(sorted(hidden)),
            dev_nodes=nodes,
            sys_path=tuple(sys_path),
            last_cap=identity.last_cap(),
            seccomp=tuple(seccomp.program()),
            packages=tuple(sorted((packages or {"takohost": policy.sdk_dir}).items())),
            interpreter=os.readlink("/proc/self/exe"),
        )


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


def _copy_package(source: str, target: str) -> None:
    """Copy the package directory ``source`` to ``target``: its modules, data files and cached
    bytecode (valid there: the copy keeps each source's modification time)."""
    import shutil

    shutil.copytree(source, target)


def bind(source: str, target: str, *, writable: bool = False, device: bool = False) -> None:
    """Bind ``source`` on ``target`` (created as a file or directory), read-only by default,
    never set-uid, and without device access unless ``device`` (the ``/dev`` nodes). Raises
    ``IsolationUnavailable``."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    syscalls.mount(source, target, None, MS_BIND | MS_REC)
    flags = (
        MS_BIND | syscalls.MS_REMOUNT | MS_NOSUID | (0 if device else MS_NODEV) | (0 if writable else MS_RDONLY)
    )
    try:
        syscalls.mount(None, target, None, flags)
    except syscalls.IsolationUnavailable:
        # In a user namespace a mount keeps its locked flags (e.g. nodev of /dev): keep those.
        syscalls.mount(None, target, None, flags & ~MS_NODEV)


def pivot_root(new_root: str) -> None:
    """Make ``new_root`` (a mount point) this mount namespace's root and detach the old one.
    Raises ``IsolationUnavailable``."""
    os.chdir(new_root)
    syscalls.check(syscalls.libc().syscall(syscalls.number(syscalls.SYS_PIVOT_ROOT), b".", b"."), "pivot_root")
    syscalls.umount(".")
    os.chdir("/")


def build_template(layout: Layout, root: str) -> int:
    """Build the read-only root every context starts from, once, in a mount namespace of its own
    (a helper process makes it and exits); returns an ``nsfs`` descriptor that keeps it alive.
    Raises ``IsolationUnavailable`` with the helper's reason.

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
            syscalls.unshare(syscalls.CLONE_NEWNS)
            syscalls.mount(None, "/", None, MS_REC | syscalls.MS_PRIVATE)
            # Every mount here is copied into each context's namespace and torn down with it:
            # /etc files are copied and /dev nodes made in the root tmpfs, not bound.
            as_root = identity.host_is_root()
            syscalls.mount("tmpfs", root, "tmpfs", MS_NOSUID | (0 if as_root else MS_NODEV), "size=4m,mode=0755")
            for top, target in layout.mirrors:
                if target is None:
                    bind(top, root + top)
                else:
                    os.symlink(target, root + top)
            for source, place, _ in placements(layout):
                bind(source, root + place)
            for path in layout.hidden:
                syscalls.mount(
                    "tmpfs",
                    root + _placed(layout, path),
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV,
                    "size=4k,mode=0555",
                )
            for path in layout.etc_files:
                _copy_into(path, root)
            os.makedirs(root + "/etc", exist_ok=True)
            for path, text in ETC_WRITTEN.items():
                with open(root + path, "w") as f:
                    f.write(text)
            for name, source in layout.packages:
                _copy_package(source, f"{root}{SDK_ROOT}/{name}")
            os.makedirs(root + os.path.dirname(INTERPRETER))
            os.symlink(layout.interpreter, root + INTERPRETER)
            os.mkdir(root + "/dev")
            for node in layout.dev_nodes:
                if as_root:
                    rdev = os.stat(f"/dev/{node}").st_rdev
                    os.mknod(f"{root}/dev/{node}", 0o666 | stat.S_IFCHR, rdev)
                    os.chmod(f"{root}/dev/{node}", 0o666)
                else:  # no mknod in a user namespace
                    bind(f"/dev/{node}", f"{root}/dev/{node}", writable=True, device=True)
            os.mkdir(root + "/proc")
            syscalls.mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            os.mkdir(root + "/tmp", 0o755)
            if policy.test_shared_dir:
                bind(policy.test_shared_dir, root + SHARED_STAGE, writable=True)
                if not policy.test_shared_dir.startswith("/tmp/"):
                    os.makedirs(root + policy.test_shared_dir, exist_ok=True)
            pivot_root(root)
            syscalls.mount(
                None,
                "/",
                None,
                MS_BIND | syscalls.MS_REMOUNT | MS_RDONLY | MS_NOSUID | (0 if as_root else MS_NODEV),
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
        raise syscalls.IsolationUnavailable(data[6:].decode(errors="replace") or "the template helper died")
    return fds[0]
