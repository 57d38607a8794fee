"""A helper process that this process starts and owns, and that the processes it forks reach as
clients: the sandbox's zygote (``workers.sandbox.zygote``) and the egress proxy
(``workers.egress.client``).

The owner starts it in a session of its own with two pipes: a control pipe whose closing makes the
helper exit (so it dies with its owner, however the owner ends) and a ready pipe on which it
answers ``ready`` or ``error <text>`` once it listens on its unix socket, in a private temporary
directory. Only the owner waits for, kills and cleans up after it; a forked worker just drops its
own connection (docs/spec/architecture.md#ar-operating).
"""

from __future__ import annotations

import abc
import os
import select
import shutil
import subprocess
import tempfile


class OwnedProcess(abc.ABC):
    """The owner's bookkeeping of one helper process. Subclasses call :meth:`_init_owned` in
    ``__init__``, :meth:`_make_dir` and :meth:`_owned` when they start it, read its answer with
    :meth:`_await_ready`, and implement :meth:`_drop_client` (close this process's connection).

    Attributes: ``socket_path`` (its unix socket, ``None`` before the start)."""

    _proc: subprocess.Popen[bytes] | None
    _owner_pid: int | None
    _dir: str | None
    _control_w: int | None
    socket_path: str | None

    def _init_owned(self) -> None:
        self._proc = None
        self._owner_pid = None
        self._dir = None
        self._control_w = None
        self.socket_path = None

    @property
    def running(self) -> bool:
        """True if started and, in the owning process, the helper has not exited (elsewhere it
        is not our child: the next request tells)."""
        if self._proc is None:
            return False
        if os.getpid() != self._owner_pid:
            return True
        return self._proc.poll() is None

    def _make_dir(self, *, prefix: str, socket_name: str) -> None:
        """A private temporary directory for the helper's socket (``socket_path``)."""
        self._dir = tempfile.mkdtemp(prefix=prefix)
        self.socket_path = os.path.join(self._dir, socket_name)

    def _owned(self, proc: subprocess.Popen[bytes], *, control_w: int) -> None:
        """Record the started helper and the write end of its control pipe: this process owns it."""
        self._proc = proc
        self._owner_pid = os.getpid()
        self._control_w = control_w

    @staticmethod
    def _await_ready(ready_r: int, timeout: float) -> bytes:
        """The helper's answer on its ready pipe (``b""`` when none came within ``timeout``
        seconds); closes ``ready_r``."""
        try:
            poller = select.poll()
            poller.register(ready_r, select.POLLIN)
            return os.read(ready_r, 4096) if poller.poll(max(0.0, timeout) * 1000) else b""
        finally:
            os.close(ready_r)

    @abc.abstractmethod
    def _drop_client(self) -> None:
        """Close this process's connection to the helper."""

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the helper (owner process only; elsewhere just drop this process's connection):
        closing the control pipe makes it exit; it is killed after ``timeout`` seconds, reaped,
        and its directory removed."""
        self._drop_client()
        if os.getpid() != self._owner_pid or self._proc is None:
            return
        if self._control_w is not None:
            os.close(self._control_w)
            self._control_w = None
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
