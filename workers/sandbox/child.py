"""One sandbox child, as the parent holds it (PROTOCOL.md): frames in and out, pings, and
``kill_and_wait``, which **proves** that no process of the run — its PID namespace, everything it
started — runs again before returning ``True`` (docs/spec/architecture.md#ar-shape: stop, then
publish): by its frozen cgroup where the host has a freezer, else through its pidfd, by its exit.
Children come from :class:`workers.sandbox.zygote.Zygote`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import threading
import time
from typing import Any

from takohost.runtime import isolation, protocol
from workers.egress import client as egress_client

__all__ = ["ChildGone", "ChildHandle"]

logger = logging.getLogger(__name__)

_RECV_BYTES = 1 << 16  # below malloc's mmap threshold
#: Most descriptors a hello may carry (one listener per egress port and the DNS socket).
_MAX_EGRESS_FDS = 40


class ChildGone(Exception):
    """The child's channel reached EOF or the child process is gone."""


def readable(fd: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``fd`` to become readable (poll: no FD_SETSIZE limit)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


_PING_FRAME = protocol.encode_frame({"op": "ping"})


class ChildHandle:
    """One sandbox child, as returned by ``Zygote.spawn``.

    Attributes: ``pid`` (also its process-group id), ``spawn_seconds`` (spawn request → hello
    frame received, seconds). ``send``/``ping`` may be called from any thread; ``recv`` from one
    thread at a time. Use as a context manager to ``kill_and_wait`` and ``close`` on exit.
    """

    def __init__(self, sock: socket.socket, *, pid: int, pidfd: int, freezer_fd: int = -1) -> None:
        self.pid = pid
        self.spawn_seconds = 0.0
        #: How the last :meth:`kill_and_wait` proved the stop: ``"frozen"`` or ``"exited"``.
        self.stop_proof = ""
        self._sock = sock
        self._pidfd = pidfd
        self._freezer_fd = freezer_fd
        self._buffer = protocol.FrameBuffer(max_containers=protocol.CHILD_MAX_CONTAINERS)  # untrusted
        self._ready: list[dict[str, Any]] = []
        self._eof = False
        self._send_lock = threading.Lock()
        self._stop_heartbeat = threading.Event()
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)
        self._poller.register(pidfd, select.POLLIN)
        #: The listeners of the child's network namespace, received with its ``hello`` (public
        #: egress; ``isolation.network``) until :meth:`send_job` hands them to the egress proxy.
        self.egress_fds: list[int] = []
        #: The context's registration with the egress proxy, from :meth:`send_job` on.
        self.egress: egress_client.Session | None = None
        self._want_fds = True

    def __enter__(self) -> ChildHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pidfd >= 0:
            self.kill_and_wait()
        self.close()

    # -- frames ------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        """Send one frame to the child. Raises ``ChildGone`` if the channel is closed,
        ``ProtocolError`` if ``message`` cannot be framed."""
        frame = protocol.encode_frame(message)
        with self._send_lock:
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise ChildGone(f"child {self.pid}: channel closed ({exc})") from None

    def ping(self) -> None:
        """Send a ``ping`` (keeps the child's watchdog from firing) without ever blocking the
        caller, the heartbeat's one pinger thread: a child that stops reading its channel (tenant
        code in one long C call) fills the socket's buffer, and then its pings are dropped — it
        has unread ones already — instead of hanging the pings of every other run; so is a ping
        while another thread is sending a frame. ``ChildGone`` if the channel is closed."""
        if not self._send_lock.acquire(blocking=False):
            return
        try:
            # One small frame is one buffer of a unix stream socket: queued whole or refused.
            sent = self._sock.send(_PING_FRAME, socket.MSG_DONTWAIT)
            if sent < len(_PING_FRAME):
                self._sock.sendall(_PING_FRAME[sent:])
        except BlockingIOError:
            return
        except OSError as exc:
            raise ChildGone(f"child {self.pid}: channel closed ({exc})") from None
        finally:
            self._send_lock.release()

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The child's next message (``timeout`` in seconds, ``None`` = wait forever).

        Raises ``TimeoutError`` when nothing arrives in time, ``ChildGone`` on EOF or when the
        child process has exited and no buffered frame is left, ``ProtocolError`` for a malformed
        frame (the child is untrusted: also check each message with
        ``protocol.check_child_message``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ready:
            if self._eof:
                raise ChildGone(f"child {self.pid} has gone")
            wait_ms = None if deadline is None else max(0.0, (deadline - time.monotonic()) * 1000)
            events = dict(self._poller.poll(wait_ms))
            if not events:
                raise TimeoutError(f"child {self.pid} sent nothing within {timeout} s")
            if self._sock.fileno() in events:
                self._read_available(blocking=True)
            elif self._pidfd in events:
                # Dead, but its channel may still be held open by a process it forked.
                self._read_available(blocking=False)
                if not self._ready:
                    self._eof = True
        return self._ready.pop(0)

    def _read_available(self, *, blocking: bool) -> None:
        try:
            if self._want_fds:  # the hello: the runtime's listeners ride with it, before any tenant code
                data, fds, _, _ = socket.recv_fds(
                    self._sock, _RECV_BYTES, _MAX_EGRESS_FDS, 0 if blocking else socket.MSG_DONTWAIT
                )
                self._want_fds = False
                self.egress_fds.extend(fds)
            else:
                data = self._sock.recv(_RECV_BYTES, 0 if blocking else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._eof = True
            return
        self._ready.extend(self._buffer.feed(data))

    def send_job(self, job: dict[str, Any], *, space: str | None) -> None:
        """Send the child its ``job``; with public egress first hand its listeners to the egress
        proxy for code of ``space`` and add the Space's rules to the job (``egress``: the runtime
        raises clear errors with them, ``takohost.runtime.egress_hook``). ``space`` ``None``
        (a child with no Space: benches, tests) gets no way out. Raises ``ChildGone``, and
        ``EgressUnavailable`` when the proxy cannot be reached."""
        fds, self.egress_fds = self.egress_fds, []
        try:
            if fds and space is not None:
                proxy = egress_client.get_egress_proxy()
                self.egress = proxy.open(space=space, fds=fds)
                job = {**job, "egress": egress_client.job_part(space)}
        finally:
            for fd in fds:
                os.close(fd)
        self.send({**job, "op": "job"})

    def finish_egress(self) -> list[dict[str, Any]]:
        """After :meth:`kill_and_wait`: close the context's listeners and relays in the proxy and
        return the records not yet taken (``egress_client.Session.records``), waiting for the last
        ones only when a connection was still open."""
        session, self.egress = self.egress, None
        if session is None:
            return []
        return session.close(wait=session.open_connections > 0)

    # -- lifetime ----------------------------------------------------------------------------
    def start_heartbeat(self, interval_seconds: float) -> None:
        """Ping the child every ``interval_seconds`` from a daemon thread until the child is gone,
        ``kill_and_wait`` or ``close`` is called. Choose it well below the job's watchdog."""

        def beat() -> None:
            while not self._stop_heartbeat.wait(interval_seconds):
                try:
                    self.ping()
                except (ChildGone, OSError):
                    return

        threading.Thread(target=beat, name=f"takohost-heartbeat-{self.pid}", daemon=True).start()

    @property
    def pidfd(self) -> int:
        """The child's pidfd (readable once it exited); owned by this handle, ``-1`` after close."""
        return self._pidfd

    @property
    def exited(self) -> bool:
        """True once the child process has exited (its pidfd is readable)."""
        return readable(self._pidfd, 0)

    def kill_and_wait(self, timeout: float = 5.0) -> bool:
        """Stop the child and everything it started, and prove it (docs/spec/architecture.md#ar-shape: stop, then
        publish): the one stop proof of replay contexts, cron deliveries and validations.

        Returns ``True`` only once no process of the context can run another instruction of
        user code. Where the context has a freezer cgroup (the zygote made one: root hosts with
        cgroup v1's freezer or cgroup v2), that is when the kernel confirms the cgroup
        ``FROZEN`` (:func:`isolation.cgroups.freeze`; no process can leave it): the child is
        then SIGKILLed, every process of it (``isolation.cgroups.kill_frozen``), and thawed, and
        dies and is reaped by the zygote off the caller's path,
        without running user code again (docs/spec/host-features.md: the status need not wait for the
        kernel to free the context's memory). Otherwise, or when the freeze is not confirmed
        within ``timeout``, :meth:`_kill_and_wait_exit` proves it by the child's exit.
        :attr:`stop_proof` says which proof held.
        """
        if self._pidfd < 0:
            raise RuntimeError("kill_and_wait after close: the pidfd is gone, nothing can be proven")
        self._stop_heartbeat.set()
        if self._freezer_fd >= 0 and isolation.cgroups.freeze(self._freezer_fd, timeout=min(timeout, 1.0)):
            try:
                isolation.cgroups.kill_frozen(self._freezer_fd)
            except OSError:
                logger.exception("could not kill the frozen context of child %s", self.pid)
            else:
                isolation.cgroups.thaw(self._freezer_fd)
                self.stop_proof = "frozen"
                return True
        return self._kill_and_wait_exit(timeout)

    def _kill_and_wait_exit(self, timeout: float) -> bool:
        """SIGKILL the child and wait until it is proven dead, with everything it started.

        Returns ``True`` only when the pidfd reported the child's exit within ``timeout`` seconds
        (it names exactly this process: it was opened before the child could be reaped). With
        namespaces (the default) the child is PID 1 of its own PID namespace, and the kernel
        reports its exit only after every other process of that namespace is dead: the proof
        covers ``setsid``, double forks and daemons. With ``TAKOHOST_SANDBOX_ISOLATION=none`` only
        the child's process group is SIGKILLed (here, or by the zygote before it reaps it); a
        process that left the group is not covered.
        """
        if self._pidfd < 0:
            raise RuntimeError("kill_and_wait after close: the pidfd is gone, nothing can be proven")
        self._stop_heartbeat.set()
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        if self._freezer_fd >= 0:  # after a freeze not confirmed: a frozen task takes SIGKILL when thawed (v1)
            isolation.cgroups.thaw(self._freezer_fd)
        try:
            signal.pidfd_send_signal(self._pidfd, 0)  # succeeds until the zygote has reaped it
        except ProcessLookupError:
            pass  # reaped: the zygote killed the group before reaping
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if not readable(self._pidfd, timeout):
            logger.error("sandbox child %s not proven dead after %.1f s", self.pid, timeout)
            return False
        self.stop_proof = "exited"
        return True

    def close(self) -> None:
        """Close the channel and the pidfd (idempotent). Without ``kill_and_wait`` first this
        proves nothing: the child notices EOF and kills its own group."""
        self._stop_heartbeat.set()
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                self._poller.unregister(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._freezer_fd >= 0:
            os.close(self._freezer_fd)
            self._freezer_fd = -1
        for fd in self.egress_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.egress_fds = []
        if self.egress is not None:
            self.finish_egress()
        self._sock.close()
