"""The pool of per-context identities on a root host (:class:`UidPool`): a context's uid is
``uid_base + slot``, where the slot is held while the context lives and is never derived from a
host pid (docs/spec/host-features.md#hf-neighbours: ``uid_base`` + the host pid gave the context its pid on the host).

A slot is a file ``<directory>/<uid>`` locked with ``flock(LOCK_EX | LOCK_NB)`` by the zygote
that forks the context, from before the fork until the context is reaped (proven dead). The lock
belongs to the zygote's open file description: the context never holds it (its descriptors are
closed at once, ``child.hygiene.harden``), so nothing it does can release it early, and a zygote
that dies releases all of its slots with its last descriptor — after its children, which die with
it (``PR_SET_PDEATHSIG``). Every zygote of the machine (workers of one host, other hosts with
another base, test stacks) takes slots in the same directory, named by the uid itself, so two
live contexts never share a uid whatever their bases.

Standard library only: this runs in the zygote.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random

from takohost.runtime.isolation import syscalls

__all__ = ["DIRECTORY", "SLOTS", "UidPool"]

#: Where the slots' lock files live (root-only: a process that is not root can take no slot).
DIRECTORY = "/run/takohost/sandbox-uids"
#: Uids of one base: ``uid_base`` … ``uid_base + SLOTS - 1`` (far above the live contexts of a
#: machine, so that a free slot is found in a few tries).
SLOTS = 65536


class UidPool:
    """Slots of one ``uid_base`` in ``directory``. ``take()`` returns a free uid and keeps its
    lock; ``give_back(uid)`` releases it; ``close()`` releases every slot still held.
    Single-threaded use (the zygote's loop)."""

    def __init__(self, uid_base: int, *, directory: str = DIRECTORY, slots: int = SLOTS) -> None:
        self.uid_base = uid_base
        self.directory = directory
        self.slots = slots
        self.held: dict[int, int] = {}  # uid → descriptor of its locked file
        # A random start: zygotes started together do not all try the same slots first.
        self._next = random.randrange(slots)

    def take(self) -> int:
        """Lock a free slot and return its uid. Raises ``IsolationUnavailable`` when the
        directory cannot be made or every slot is held."""
        try:
            os.makedirs(self.directory, 0o700, exist_ok=True)
        except OSError as exc:
            raise syscalls.IsolationUnavailable(f"creating {self.directory}: {exc.strerror}") from None
        for _ in range(self.slots):
            uid = self.uid_base + self._next
            self._next = (self._next + 1) % self.slots
            if uid in self.held:
                continue
            fd = os.open(os.path.join(self.directory, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise syscalls.IsolationUnavailable(f"locking a uid slot: {exc.strerror}") from None
            self.held[uid] = fd
            return uid
        raise syscalls.IsolationUnavailable(f"every one of the {self.slots} sandbox uids is in use")

    def give_back(self, uid: int) -> None:
        """Release ``uid``'s slot (its context is reaped); ignores one not held."""
        fd = self.held.pop(uid, None)
        if fd is not None:
            os.close(fd)  # the lock goes with the last descriptor of its open file description

    def close(self) -> None:
        """Release every slot still held."""
        for uid in list(self.held):
            self.give_back(uid)
