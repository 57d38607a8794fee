"""The zygote's side of isolation: :class:`Forker` forks each child as PID 1 of a PID namespace
of its own and lets it enter its sandbox; :func:`probe` checks in a throw-away process that this
machine can do so.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from typing import Any

from takohost.runtime.isolation import cgroups, identity, mounts, network, seccomp, syscalls, uids
from takohost.runtime.isolation.syscalls import MS_NODEV, MS_NOEXEC, MS_NOSUID

__all__ = ["Forker", "probe"]

_STANDARD_FINDERS = frozenset(
    {
        "_frozen_importlib",
        "_frozen_importlib_external",
        "importlib._bootstrap",
        "importlib._bootstrap_external",
    }
)


class Forker:
    """The zygote's side of isolation: forks children that are PID 1 of a new PID namespace, and
    lets each enter its sandbox (:meth:`enter`). Built once per zygote; single-threaded use.

    Construction (namespaces mode) enters a user namespace first when the zygote is not root
    (then every namespace it makes is owned by it), keeps a descriptor of its own PID namespace
    and builds the template mount namespace (:func:`mounts.build_template`); then it prepares
    once what every child would otherwise rebuild (the packed system-call filter
    :attr:`filter`, the limits, ``capset``'s buffers and the C functions) and drops the bounding
    and ambient capability sets of its own process, which every child inherits
    (:func:`identity.drop_bounding_set`: they matter only at ``execve``, which the zygote never
    does; it keeps its effective capabilities). On a root host it
    takes each child's uid from a pool (:class:`uids.UidPool`) before the fork and gives it back
    when the child is reaped (:meth:`release`). Raises ``IsolationUnavailable`` with the kernel's
    reason when any of that is refused. With ``mode == "none"`` it only forks.
    """

    def __init__(self, layout: mounts.Layout, *, root: str) -> None:
        self.layout = layout
        self.isolated = layout.policy.mode == "namespaces"
        self.template_fd = -1
        self.pidns_fd = -1
        self.memory: cgroups.MemoryCgroup | None = None
        self.uids: uids.UidPool | None = None
        self.freezer: cgroups.Freezer | None = None
        #: cgroup v2 with both: a context's memory cgroup is also its freezer cgroup (no
        #: :attr:`freezer` of its own; see the constructor).
        self.freeze_memory = False
        #: child pid → its uid (root hosts), until :meth:`release`.
        self.children: dict[int, int] = {}
        #: child pid → (path, directory descriptor) of its freezer cgroup, until :meth:`release`.
        self.frozen_by: dict[int, tuple[str, int]] = {}
        #: child pid → the path of its memory cgroup, until :meth:`release`.
        self.memory_of: dict[int, str] = {}
        #: In a child: the uid it runs as (root hosts; taken by the zygote before the fork) and
        #: the freezer cgroup it joins (made by the zygote before the fork; "" without).
        self.uid = -1
        self.freezer_path = ""
        #: In a child: the memory cgroup it joins (made by the zygote before the fork; "" without).
        self.memory_path = ""
        #: In a child with public egress, after :meth:`enter`: the listeners of its namespace
        #: (``network.listeners``), to hand to the host with its ``hello`` and close.
        self.egress: list[socket.socket] = []
        #: The system-call filter, packed once here (:class:`seccomp.Filter`), and the policy's
        #: limits (:func:`identity.limits`): what :meth:`enter` applies in each child.
        self.filter: seccomp.Filter | None = None
        self.limits: tuple[tuple[int, tuple[int, int]], ...] = ()
        #: ``(place in the template, target in a context)`` of the binds :meth:`enter` mounts
        #: again over its scratch ``/tmp`` (:func:`mounts.placements`; usually none).
        self.rebinds: tuple[tuple[str, str], ...] = ()
        #: In a child: the standard import finders of ``sys.meta_path``, picked by the zygote
        #: right before the fork (:meth:`enter` keeps only these).
        self.finders: list[Any] = []
        #: Whether the host runs as root (:func:`identity.host_is_root`), decided here once: a
        #: child reading ``/proc`` with Python's ``open`` costs about 0.3 ms of CPU.
        self.as_root = False
        if not self.isolated:
            return
        self.as_root = identity.host_is_root()
        if not self.as_root:
            syscalls.unshare(syscalls.CLONE_NEWUSER)
        # Kept above the descriptors a child sets up (0-3), so that they survive its clean-up.
        self.pidns_fd = _high(os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC))
        self.template_fd = _high(mounts.build_template(layout, root))
        # The SDK's host directory was needed to copy it into the template only: no child's copy
        # of this object may name it.
        self.layout = dataclasses.replace(
            layout, packages=(), policy=dataclasses.replace(layout.policy, sdk_dir=mounts.SDK_DIR)
        )
        self.memory = cgroups.MemoryCgroup.find(layout.policy)
        self.freezer = cgroups.Freezer.find()
        if self.memory is not None and self.freezer is not None and self.memory.version == self.freezer.version == 2:
            # One cgroup v2 hierarchy, where a process is in one cgroup only: joining a freezer
            # cgroup of its own would take the child out of its memory cgroup (no limit for its
            # processes together). There each context's memory cgroup is the one it is frozen by.
            self.freezer.close()
            self.freezer = None
            self.freeze_memory = True
        if self.as_root:
            self.uids = uids.UidPool(layout.policy.uid_base)
        identity.prepare()
        self.filter = seccomp.Filter(layout.seccomp)
        self.limits = identity.limits(layout.policy)
        self.rebinds = tuple(
            (place, target) for _, place, target in mounts.placements(layout) if place != target
        )
        identity.drop_bounding_set(layout.last_cap)

    def fork(self) -> int:
        """``os.fork()``; with namespaces the child is PID 1 of a PID namespace of its own (the
        zygote's own namespace is unchanged: only the one for its next child is switched)."""
        if not self.isolated:
            return os.fork()
        uid, frozen, memory = -1, ("", -1), ""
        try:
            uid = self.uids.take() if self.uids is not None else -1
            frozen = self.freezer.make() if self.freezer is not None else ("", -1)
            memory = self.memory.make() if self.memory is not None else ""
            if self.freeze_memory:
                frozen = (memory, os.open(memory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except BaseException:
            self._forget(uid, frozen, memory)
            raise
        # Here, not in the child: the child would write to the pages of every finder it looks at.
        self.finders = [f for f in sys.meta_path if getattr(f, "__module__", "") in _STANDARD_FINDERS]
        syscalls.unshare(syscalls.CLONE_NEWPID)
        try:
            pid = os.fork()
        except BaseException:
            syscalls.setns(self.pidns_fd, syscalls.CLONE_NEWPID)
            self._forget(uid, frozen, memory)
            raise
        if pid == 0:
            # (a memory cgroup that is the freezer's too is joined once)
            self.uid, self.memory_path = uid, memory
            self.freezer_path = "" if self.freeze_memory else frozen[0]
            # The zygote holds the slots and the cgroups (the child closes their descriptors).
            self.uids = self.freezer = self.memory = None
            self.children, self.frozen_by, self.memory_of = {}, {}, {}
            return 0
        syscalls.setns(self.pidns_fd, syscalls.CLONE_NEWPID)
        if self.uids is not None:
            self.children[pid] = uid
        if frozen[1] >= 0:
            self.frozen_by[pid] = frozen
        if memory:
            self.memory_of[pid] = memory
        return pid

    def freezer_fd(self, pid: int) -> int:
        """The directory descriptor of child ``pid``'s freezer cgroup (owned here), or ``-1``."""
        return self.frozen_by.get(pid, ("", -1))[1]

    def _forget(self, uid: int, frozen: tuple[str, int], memory: str = "") -> None:
        if memory and self.memory is not None:
            self.memory.remove(memory)
        if uid >= 0 and self.uids is not None:
            self.uids.give_back(uid)
        if frozen[1] >= 0:
            os.close(frozen[1])
            if self.freezer is not None:
                self.freezer.remove(frozen[0])

    def release(self, pid: int) -> None:
        """After the zygote reaped child ``pid``: remove its memory cgroup and give its uid back
        to the pool (nothing of it is alive: its PID namespace died with it)."""
        self._forget(
            self.children.pop(pid, -1), self.frozen_by.pop(pid, ("", -1)), self.memory_of.pop(pid, "")
        )

    def close(self) -> None:
        """In the zygote, after every child was reaped: remove the cgroups, free the uids."""
        if self.memory is not None:
            self.memory.close()
        if self.uids is not None:
            self.uids.close()
        for _, fd in self.frozen_by.values():
            os.close(fd)
        self.frozen_by.clear()
        if self.freezer is not None:
            self.freezer.close()

    def enter(self) -> int:
        """In a child from :meth:`fork` (namespaces mode), before it runs anything of a tenant:
        join its memory and freezer cgroups (made by the zygote) and a private copy of the template
        root, take new mount/network/IPC/UTS namespaces (with public egress: route every address
        to the namespace's loopback and open the listeners the host's proxy serves,
        :attr:`egress`), mount its own ``/proc`` and scratch ``/tmp`` (its working directory), set
        the limits, name its host ``localhost``, drop to its own identity (root hosts:
        :attr:`uid`, from the pool) and every capability (the bounding and ambient sets came empty
        from the zygote), set ``no_new_privs``, install the system-call filter (:attr:`filter`,
        packed by the zygote) and narrow ``sys.path``. Returns the uid it runs as. Raises
        ``IsolationUnavailable``."""
        layout, policy = self.layout, self.layout.policy
        as_root = self.as_root
        if self.pidns_fd >= 0:
            os.close(self.pidns_fd)
        if self.memory_path:
            cgroups.join(self.memory_path)
            self.memory_path = ""
        if self.freezer_path:
            cgroups.join(self.freezer_path)
            self.freezer_path = ""
        syscalls.setns(self.template_fd, syscalls.CLONE_NEWNS)
        os.close(self.template_fd)
        # A cgroup namespace rooted at the context's own cgroup: /proc/self/cgroup shows "/", not
        # the host's cgroup paths (the container's id, the zygote's and the context's host pids).
        syscalls.unshare(
            syscalls.CLONE_NEWNS
            | syscalls.CLONE_NEWIPC
            | syscalls.CLONE_NEWUTS
            | syscalls.CLONE_NEWCGROUP
            | syscalls.CLONE_NEWNET
        )
        if policy.network == "public":
            # While the child may still configure its namespace: its only way out, the proxy.
            try:
                ipv6 = network.configure()
                # Above the descriptors the child sets up next (its log capture), which so keep
                # the numbers a context always had; they are closed before tenant code runs.
                self.egress = [
                    socket.socket(fileno=_high(sock.detach(), 64))
                    for sock in network.listeners(policy.egress_ports, ipv6=ipv6)
                ]
            except OSError as exc:
                raise syscalls.IsolationUnavailable(f"setting up the context's network: {exc}") from None
        socket.sethostname("localhost")
        uid = self.uid if as_root else os.getuid()
        _own_proc()
        owner = f",uid={uid},gid={uid}" if as_root else ""
        syscalls.mount(
            "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={policy.scratch_mb}m,mode=0700{owner}"
        )
        for place, target in self.rebinds:  # under /tmp: bound again over this context's scratch tmpfs
            os.makedirs(target, exist_ok=True)
            syscalls.mount(place, target, None, syscalls.MS_BIND | syscalls.MS_REC)
        if policy.test_shared_dir:
            target = policy.test_shared_dir
            if target.startswith("/tmp/"):  # else the template has the mount point
                os.makedirs(target, exist_ok=True)
            syscalls.mount(mounts.SHARED_STAGE, target, None, syscalls.MS_BIND)
            # Every context has its own uid: what one creates there, the next may append to.
            os.umask(0)
        os.chdir("/tmp")
        identity.apply_limits(self.limits)
        identity.drop_identity(uid if as_root else None, last_cap=layout.last_cap, bounding_dropped=True)
        assert self.filter is not None  # made with the template
        self.filter.install()
        sys.path[:] = layout.sys_path
        # A fresh importer cache: finders list directories as the host sees them. The zygote
        # emptied its own before it forked (``zygote._preload``), so this frees next to nothing.
        sys.path_importer_cache.clear()
        sys.meta_path[:] = self.finders
        self.finders = []
        return uid


def _own_proc() -> None:
    """Mount this PID namespace's ``proc`` on ``/proc`` in place of the template's (a ``proc`` of
    the zygote's PID namespace, needed only so that the kernel lets a new one be mounted): it is
    mounted on the still empty ``/tmp``, the template's is detached, and it is moved over."""
    syscalls.mount("proc", "/tmp", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    syscalls.umount("/proc")
    syscalls.mount("/tmp", "/proc", None, syscalls.MS_MOVE)


def _high(fd: int, minimum: int = 16) -> int:
    """Move ``fd`` to a close-on-exec descriptor number of at least ``minimum``."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, minimum)
    os.close(fd)
    return moved


def probe(layout: mounts.Layout, *, root: str) -> None:
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
            forker.release(child)
            forker.close()
        except BaseException as exc:  # noqa: BLE001
            writer.sendall(str(exc).encode()[:1000])
        os._exit(code)
    writer.close()
    _, status = os.waitpid(pid, 0)
    reason = reader.recv(1000).decode(errors="replace")
    reader.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise syscalls.IsolationUnavailable(reason or f"the probe exited with status {status}")
