"""Per-context cgroups: memory (:class:`MemoryCgroup`: the memory limit then holds for a
context's processes together, not for each) and the freezer (:class:`Freezer`, :func:`freeze`:
the stop proof that does not wait for the kernel to tear a context down).

Standard library only: this runs in the zygote, its children and the host's workers.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time

from takohost.runtime.isolation import policy as policy_module
from takohost.runtime.isolation import syscalls

__all__ = ["Freezer", "MemoryCgroup", "freeze", "frozen", "join", "kill_frozen", "thaw"]


class _ContextCgroups:
    """The clean-up both per-context cgroup kinds share: ``ctx-<n>`` directories under
    ``self.directory`` (this zygote's)."""

    directory: str

    def remove(self, path: str) -> None:
        """Remove the context cgroup ``path`` (its processes are gone); ignores one already
        removed."""
        try:
            os.rmdir(path)
        except OSError:
            pass

    def close(self) -> None:
        """Remove every context cgroup left and the zygote's directory."""
        try:
            for name in os.listdir(self.directory):
                if name.startswith("ctx-"):
                    self.remove(os.path.join(self.directory, name))
            os.rmdir(self.directory)
        except OSError:
            pass


class MemoryCgroup(_ContextCgroups):
    """Per-context memory cgroups under one directory of this zygote (the memory limit then
    holds for a context's processes together, not for each: ``RLIMIT_AS`` alone would let a
    context of ``max_processes`` processes hold that many times ``memory_mb``).

    ``find(policy)`` returns one where the host can create them (cgroup v1's memory hierarchy,
    or a cgroup v2 directory that has ``memory`` in its ``cgroup.subtree_control``), else
    ``None``. ``make()`` (in the zygote, before the fork) creates the next ``ctx-<n>`` with the
    limit; the child :func:`join` s it first thing in its sandbox set-up (before it leaves the
    host's mount namespace); ``remove(path)`` (in the zygote, after reaping the child) removes
    it; ``close()`` removes the zygote's directory. Made by the zygote rather than by the child:
    the same system calls, without a fresh child's copy-on-write faults on the Python objects
    they take (about 0.1 ms of CPU per context).
    """

    def __init__(self, directory: str, *, version: int, limit_bytes: int) -> None:
        self.directory = directory
        self.version = version
        self.limit_bytes = limit_bytes
        self._names = itertools.count()
        if version == 1:
            limit, swap = "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
        else:
            limit, swap = "memory.max", "memory.swap.max"
        #: ``(file, value)`` written in each context's cgroup before it joins: the limit, and no
        #: swap beyond it where this kernel accounts swap (decided once, here: the zygote's own
        #: directory has the file when a context's has it).
        self.settings: tuple[tuple[str, str], ...] = ((limit, str(limit_bytes)),)
        if os.path.exists(os.path.join(directory, swap)):
            self.settings += ((swap, str(limit_bytes) if version == 1 else "0"),)

    @classmethod
    def find(cls, policy: policy_module.Policy) -> MemoryCgroup | None:
        """A usable parent for per-context cgroups, or ``None`` (no error: the caller falls back
        to per-process limits)."""
        tables = _read_tables()
        if tables is None:
            return None
        memberships, mounts = tables
        return cls._find_in(policy, memberships=memberships, mounts=mounts)

    @classmethod
    def _find_in(
        cls, policy: policy_module.Policy, *, memberships: list[list[str]], mounts: list[list[str]]
    ) -> MemoryCgroup | None:
        """:meth:`find` over ``/proc/self/cgroup``'s lines split at ``:`` and
        ``/proc/self/mountinfo``'s split at blanks. On cgroup v2 the zygote's directory also gets
        ``+memory`` in its ``cgroup.subtree_control``, else its ``ctx-<n>`` would have no
        ``memory.max`` (a v2 directory's children get only the controllers it enables)."""
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
            directory = _own_directory(base, "takohost-zygote")
            if directory is None:
                continue
            if version == 2:
                try:
                    with open(os.path.join(directory, "cgroup.subtree_control"), "w") as f:
                        f.write("+memory")
                except OSError:
                    with contextlib.suppress(OSError):
                        os.rmdir(directory)
                    continue
            return cls(directory, version=version, limit_bytes=policy.memory_mb << 20)
        return None

    def make(self) -> str:
        """Create the next ``ctx-<n>`` with the limit (no swap beyond it): its path. Raises
        ``OSError`` (the cgroup removed again when a limit is refused)."""
        path = f"{self.directory}/ctx-{next(self._names)}"
        self._create(path)
        try:
            for name, value in self.settings:
                fd = os.open(f"{path}/{name}", os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, value.encode())
                finally:
                    os.close(fd)
        except OSError:
            self.remove(path)
            raise
        return path

    def _create(self, path: str) -> None:
        """``mkdir`` of a new cgroup (the kernel adds its control files); never an existing one."""
        os.mkdir(path, 0o700)



def _own_directory(base: str, prefix: str) -> str | None:
    """This zygote's directory ``<base>/<prefix>-<pid>`` (mode 0700), made unless it is there
    already: its path, or ``None`` when it cannot be made."""
    directory = os.path.join(base, f"{prefix}-{os.getpid()}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    return directory


def _read_tables() -> tuple[list[list[str]], list[list[str]]] | None:
    """This process's ``/proc/self/cgroup`` lines split at ``:`` (``[hierarchy id, controllers,
    path]``) and ``/proc/self/mountinfo``'s split at blanks, or ``None`` when either cannot be
    read."""
    try:
        with open("/proc/self/cgroup") as f:
            memberships = [line.rstrip("\n").split(":", 2) for line in f]
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    return memberships, mounts


def _hierarchies() -> list[tuple[str, list[str], str, str]]:
    """``(fstype, options, mount point, this process's cgroup path in it)`` of every mounted
    cgroup hierarchy this process belongs to (v1 ``cgroup`` and v2 ``cgroup2``)."""
    tables = _read_tables()
    if tables is None:
        return []
    memberships, mounts = tables
    found = []
    for mount in mounts:
        sep = mount.index("-")
        fstype, options = mount[sep + 1], mount[sep + 3].split(",")
        if fstype == "cgroup":
            own = next((path for _, names, path in memberships if set(names.split(",")) & set(options)), None)
        elif fstype == "cgroup2":
            own = next((path for hid, _, path in memberships if hid == "0"), None)
        else:
            continue
        if own is not None:
            found.append((fstype, options, mount[4], own))
    return found


class Freezer(_ContextCgroups):
    """Per-context freezer cgroups under one directory of this zygote: a frozen cgroup runs no
    code, and no process of a context can leave it (the cgroup file system is not in a
    context's root), ``setsid`` and double-forked descendants included (docs/spec/host-features.md).

    ``find()`` returns one where the host can create them (cgroup v1's ``freezer`` hierarchy, or
    any cgroup v2 directory of this process: ``cgroup.freeze`` is a core file), else ``None``.
    In the zygote, ``make()`` creates ``ctx-<n>`` before a fork and returns its path and a
    directory descriptor (handed to the context's parent with its pidfd); the child
    :func:`join` s it before anything of the tenant runs; ``remove(path)`` (after reaping)
    and ``close()`` clean up.
    """

    def __init__(self, directory: str, *, version: int) -> None:
        self.directory = directory
        self.version = version
        self._names = itertools.count()

    @classmethod
    def find(cls) -> Freezer | None:
        """A usable parent for per-context freezer cgroups, or ``None``."""
        candidates = sorted(_hierarchies(), key=lambda h: h[0] != "cgroup")  # v1's freezer first
        for fstype, options, mount_point, own in candidates:
            if fstype == "cgroup" and "freezer" not in options:
                continue
            base = os.path.join(mount_point, own.lstrip("/"))
            _clean_stale(base)
            directory = _own_directory(base, "takohost-freezer")
            if directory is None:
                continue
            state = "freezer.state" if fstype == "cgroup" else "cgroup.freeze"
            if fstype == "cgroup" or os.path.exists(os.path.join(directory, state)):
                return cls(directory, version=1 if fstype == "cgroup" else 2)
            os.rmdir(directory)  # a v2 kernel without the freezer (before 5.2)
        return None

    def make(self) -> tuple[str, int]:
        """Create the next ``ctx-<n>``: its path and an ``O_DIRECTORY`` descriptor of it
        (close-on-exec). Raises ``OSError``."""
        path = os.path.join(self.directory, f"ctx-{next(self._names)}")
        os.mkdir(path, 0o700)
        try:
            return path, os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            os.rmdir(path)
            raise



def _clean_stale(base: str) -> None:
    """Stop what is left in the freezer cgroups of dead zygotes under ``base``: a zygote that died
    while a context of its was frozen leaves it frozen for good (a frozen task takes no SIGKILL on
    cgroup v1, not even its ``PR_SET_PDEATHSIG``). Each is frozen, killed and thawed; empty
    directories are removed."""
    try:
        names = [n for n in os.listdir(base) if n.startswith("takohost-freezer-")]
    except OSError:
        return
    for name in names:
        owner = name.rsplit("-", 1)[1]
        if not owner.isdigit() or os.path.exists(f"/proc/{owner}"):
            continue
        directory = os.path.join(base, name)
        try:
            contexts = [n for n in os.listdir(directory) if n.startswith("ctx-")]
        except OSError:
            continue
        for context in contexts:
            try:
                fd = os.open(os.path.join(directory, context), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                freeze(fd, timeout=1.0)
                kill_frozen(fd)
            except OSError:
                pass
            finally:
                thaw(fd)
                os.close(fd)
            try:
                os.rmdir(os.path.join(directory, context))
            except OSError:
                pass
        try:
            os.rmdir(directory)
        except OSError:
            pass


def join(path: str) -> None:
    """Move this process into the cgroup directory ``path``. Raises ``IsolationUnavailable``."""
    syscalls.write_file(os.path.join(path, "cgroup.procs"), "0")


def _read_at(dir_fd: int, name: str) -> str:
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _write_at(dir_fd: int, name: str, text: str) -> None:
    fd = os.open(name, os.O_WRONLY, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def freeze(dir_fd: int, *, timeout: float) -> bool:
    """Freeze the cgroup of the directory descriptor ``dir_fd`` (a :meth:`Freezer.make` one,
    v1 ``freezer.state`` or v2 ``cgroup.freeze``) and wait until the kernel confirms that every
    process in it is frozen (v1 ``FROZEN``, v2 ``frozen 1`` in ``cgroup.events``): then none of
    them runs another instruction of user code until thawed. Returns ``False`` when that was not
    confirmed within ``timeout`` seconds or the cgroup is gone (the caller proves the stop
    another way); never raises for those."""
    try:
        v1 = True
        try:
            _write_at(dir_fd, "freezer.state", "FROZEN")
        except FileNotFoundError:
            v1 = False
            _write_at(dir_fd, "cgroup.freeze", "1")
        deadline = time.monotonic() + timeout
        pause = 0.00005
        while True:
            if v1:
                if _read_at(dir_fd, "freezer.state").strip() == "FROZEN":
                    return True
            elif "frozen 1" in _read_at(dir_fd, "cgroup.events").splitlines():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
    except OSError:
        return False


def kill_frozen(dir_fd: int) -> None:
    """SIGKILL every process of the frozen cgroup of ``dir_fd`` (v2 ``cgroup.kill`` where the
    kernel has it, else each process of ``cgroup.procs``: frozen, none can fork or exit, so the
    list is complete and no pid in it can be reused). Killing PID 1 of the context alone would not
    do: its namespace's other processes die only once it has exited, and once thawed they would
    run until then. Raises ``OSError`` when the cgroup cannot be read."""
    try:
        _write_at(dir_fd, "cgroup.kill", "1")
        return
    except FileNotFoundError:
        pass
    for line in _read_at(dir_fd, "cgroup.procs").split():
        pid = int(line)
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def frozen(dir_fd: int) -> bool:
    """True when the cgroup of ``dir_fd`` is frozen or freezing (someone asked for it); ``False``
    when thawed or gone."""
    try:
        try:
            return _read_at(dir_fd, "freezer.state").strip() != "THAWED"
        except FileNotFoundError:
            return _read_at(dir_fd, "cgroup.freeze").strip() == "1"
    except OSError:
        return False


def thaw(dir_fd: int) -> None:
    """Thaw the cgroup of ``dir_fd`` (its processes, killed while frozen, then die before
    running any user code: a pending SIGKILL is taken on the way out of the freezer). Ignores
    a cgroup already gone."""
    try:
        try:
            _write_at(dir_fd, "freezer.state", "THAWED")
        except FileNotFoundError:
            _write_at(dir_fd, "cgroup.freeze", "0")
    except OSError:
        pass
