"""A helper process that this process starts and owns, and that the processes it forks reach as
clients: the sandbox's zygote (``workers.sandbox.zygote``) and the egress proxy
(``workers.egress.client``).

The owner starts it in a session of its own with two pipes: a control pipe whose closing makes the
helper exit (so it dies with its owner, however the owner ends) and a ready pipe on which it
answers ``ready`` or ``error <text>`` once it listens on its unix socket, in a private temporary
directory. Only the owner waits for, kills and cleans up after it; a forked worker just drops its
own connection (docs/spec/architecture.md#ar-operating).

Every process reaches the helper through a connection of its own, opened on first use: a
connection (or a lock possibly held at fork time) inherited over ``fork`` is never used, since
``os.register_at_fork`` resets the client state of every helper in the child. Threads of one
process share its connection under the helper's lock. :class:`ProcessDefault` is the lazily
started helper of one kind per process.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar


class OwnedProcess(abc.ABC):
    """The owner's bookkeeping of one helper process, and each process's connection to it.
    Subclasses name the helper (:attr:`_name`, for messages) and its error
    (:attr:`_unavailable`), call :meth:`_init_owned` in ``__init__``, :meth:`_make_dir` and
    :meth:`_launch` in :meth:`start` and check its answer with :meth:`_check_ready`; they talk to
    it over :meth:`_connection` under ``_lock``.

    Attributes: ``socket_path`` (its unix socket, ``None`` before the start)."""

    #: The helper in messages: ``the zygote``.
    _name: ClassVar[str] = "the helper"
    #: What is raised when it cannot be started or reached (message: why).
    _unavailable: ClassVar[type[Exception]] = RuntimeError

    _proc: subprocess.Popen[bytes] | None
    _owner_pid: int | None
    _dir: str | None
    _control_w: int | None
    socket_path: str | None
    _client: socket.socket | None
    _client_pid: int | None
    _lock: threading.Lock

    def _init_owned(self) -> None:
        self._proc = None
        self._owner_pid = None
        self._dir = None
        self._control_w = None
        self.socket_path = None
        self._reset_client()
        _INSTANCES.add(self)

    @abc.abstractmethod
    def start(self, timeout: float = 10.0) -> None:
        """Start the helper and wait until it listens (the unavailability error after ``timeout``
        seconds, or with the helper's reason)."""

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

    def _launch(
        self,
        command: Callable[[int, int], list[str]],
        *,
        timeout: float,
        pass_fds: Sequence[int] = (),
        stdin: bytes | None = None,
        **popen: Any,
    ) -> bytes:
        """Start the helper, owned by this process: ``command(control_fd, ready_fd)`` (the numbers
        of its ends of the two pipes) in a session of its own, in ``/``, stdout to ``/dev/null``,
        inheriting only those two descriptors and ``pass_fds`` (closed here once it runs);
        ``stdin`` is written to its standard input (none: ``/dev/null``), ``popen`` goes to
        ``subprocess.Popen`` (``env``, ``executable``). Returns its answer on the ready pipe
        (``b""``: none within ``timeout`` seconds)."""
        control_r, control_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            proc = subprocess.Popen(
                command(control_r, ready_w),
                close_fds=True,
                pass_fds=(control_r, ready_w, *pass_fds),
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
                **popen,
            )
            if stdin is not None:
                assert proc.stdin is not None  # stdin=PIPE
                try:
                    proc.stdin.write(stdin)  # far below a pipe's buffer: never blocks
                    proc.stdin.close()
                except OSError:
                    pass  # it died at once: the ready pipe says so
        except BaseException:
            os.close(control_w)
            os.close(ready_r)
            raise
        finally:
            for fd in (control_r, ready_w, *pass_fds):
                os.close(fd)
        self._proc = proc
        self._owner_pid = os.getpid()
        self._control_w = control_w
        return self._await_ready(ready_r, timeout)

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

    def _check_ready(self, answer: bytes, *, timeout: float, silent: str | None = None) -> None:
        """Nothing when ``answer`` is ``ready``; otherwise stop the helper and raise
        :attr:`_unavailable` with its ``error <text>``, else ``silent`` when given, else that it
        exited (its status) or did not answer within ``timeout`` seconds."""
        if answer.startswith(b"ready"):
            return
        status = None if self._proc is None else self._proc.poll()  # before the stop reaps it
        self.stop()
        if answer.startswith(b"error "):
            raise self._unavailable(answer[6:].decode(errors="replace").strip())
        if silent is not None:
            raise self._unavailable(silent)
        if status is not None:
            raise self._unavailable(f"{self._name} exited with status {status} while starting (see its stderr)")
        raise self._unavailable(f"{self._name} did not become ready within {timeout} s")

    # -- each process's connection --------------------------------------------------------------

    def _reset_client(self) -> None:
        """Forget this process's connection and lock (a fork's child: never use the parent's)."""
        self._client = None
        self._client_pid = None
        self._lock = threading.Lock()

    def _connection(self) -> socket.socket:
        """This process's connection to the helper, opened on first use (the caller holds
        ``_lock``). Raises :attr:`_unavailable` when it was not started or cannot be reached."""
        if self._client is None or self._client_pid != os.getpid():
            if self.socket_path is None:
                raise self._unavailable(f"{self._name} was not started")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
            except OSError as exc:
                sock.close()
                raise self._unavailable(f"cannot reach {self._name}: {exc}") from None
            self._client, self._client_pid = sock, os.getpid()
            self._connected(sock)
        return self._client

    def _connected(self, sock: socket.socket) -> None:  # noqa: B027 - a hook, optional: most helpers need nothing
        """A new connection ``sock`` of this process was opened (the caller holds ``_lock``)."""

    def _close_connection(self) -> None:
        """Close this process's connection, if any (the caller holds ``_lock``; the next
        :meth:`_connection` opens another)."""
        if self._client is not None:
            with contextlib.suppress(OSError):
                self._client.close()
        self._client = None

    def _drop_client(self) -> None:
        """Close this process's connection to the helper."""
        with self._lock:
            self._close_connection()

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


_INSTANCES: weakref.WeakSet[OwnedProcess] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for helper in list(_INSTANCES):
        helper._reset_client()


os.register_at_fork(after_in_child=_after_fork_in_child)

_Helper = TypeVar("_Helper", bound=OwnedProcess)


class ProcessDefault(Generic[_Helper]):
    """The process-wide helper made by ``make``: started on first use (and restarted by its
    owner if it died; stopped at exit). A process forked after the start reuses it through a
    connection of its own. Thread-safe."""

    def __init__(self, make: Callable[[], _Helper]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._current: _Helper | None = None

    def get(self) -> _Helper:
        """The running helper (started now if need be). Raises its unavailability error."""
        with self._lock:
            if self._current is None or not self._current.running:
                if self._current is not None:
                    self._current.stop()
                self._current = self._make()
                self._current.start()
                atexit.register(self._current.stop)
            return self._current

    def reset(self) -> None:
        """Stop the helper, if any, and forget it (the next :meth:`get` starts another)."""
        with self._lock:
            if self._current is not None:
                self._current.stop()
            self._current = None
