"""Per-context memory cgroups (:class:`MemoryCgroup`): the memory limit then holds for a
context's processes together, not for each.

Standard library only: this runs in the zygote and its children.
"""

from __future__ import annotations

import os

from takohost.runtime.isolation import policy as policy_module
from takohost.runtime.isolation import syscalls

__all__ = ["MemoryCgroup"]


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
    def find(cls, policy: policy_module.Policy) -> MemoryCgroup | None:
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
        """Create ``ctx-<pid>`` with the limit (no swap beyond it) and move this process in.
        Raises ``IsolationUnavailable``."""
        path = os.path.join(self.directory, f"ctx-{pid}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise syscalls.IsolationUnavailable(f"creating the context's memory cgroup: {exc.strerror}") from None
        if self.version == 1:
            syscalls.write_file(os.path.join(path, "memory.limit_in_bytes"), str(self.limit_bytes))
            swap = os.path.join(path, "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):
                syscalls.write_file(swap, str(self.limit_bytes))
        else:
            syscalls.write_file(os.path.join(path, "memory.max"), str(self.limit_bytes))
            swap = os.path.join(path, "memory.swap.max")
            if os.path.exists(swap):
                syscalls.write_file(swap, "0")
        syscalls.write_file(os.path.join(path, "cgroup.procs"), "0")

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
