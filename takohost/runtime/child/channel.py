"""The child's end of its channel to the parent (:class:`Channel`): requests from user-code
threads, one reader thread that routes the parent's answers, and the watchdog that kills the
child when the parent stops answering (docs/spec/architecture.md#ar-terminate "Terminate and delete").

Standard library only: this runs in the sandbox children.
"""

from __future__ import annotations

import _thread
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from takohost.runtime import capture, protocol
from takohost.runtime.child import hygiene

__all__ = ["JOB_TIMEOUT_SECONDS", "Channel", "connect"]

JOB_TIMEOUT_SECONDS = 60.0
_RECV_BYTES = 1 << 16  # below malloc's mmap threshold: no mmap/munmap per read


def connect(egress: list[socket.socket] | None = None) -> socket.socket:
    """The channel from the zygote link (:func:`_receive_channel`), after saying ``hello`` on it
    (the reader thread's ``connect`` of a pre-spawned child). ``egress``: the listeners of the
    context's network namespace (``isolation.network.listeners``), handed to the parent with the
    ``hello`` (for the host's egress proxy) and closed here before any tenant code runs."""
    sock = _receive_channel()
    hello = protocol.encode_frame({"op": "hello", "pid": os.getpid(), "protocol": protocol.PROTOCOL_VERSION})
    if egress:
        socket.send_fds(sock, [hello], [listener.fileno() for listener in egress])
        for listener in egress:
            listener.close()
        egress.clear()
    else:
        sock.sendall(hello)
    return sock


def _receive_channel() -> socket.socket:
    """Wait on the zygote link (fd 3) for the channel descriptor; it replaces the link as fd 3."""
    link = socket.socket(fileno=hygiene.CHANNEL_FD)
    _, fds, _, _ = socket.recv_fds(link, 16, 1)
    link.detach()
    if len(fds) != 1:
        hygiene.die()
    os.dup2(fds[0], hygiene.CHANNEL_FD, inheritable=False)  # closes the link
    os.close(fds[0])
    sock = socket.socket(fileno=hygiene.CHANNEL_FD)
    sock.setblocking(True)
    return sock


class Channel:
    """The child's end of the channel: requests from user-code threads, a reader thread, the
    watchdog. ``watchdog_seconds`` ``None`` disables the watchdog (EOF still kills)."""

    def __init__(
        self, sock: socket.socket | None, *, buffer: protocol.FrameBuffer, watchdog_seconds: object
    ) -> None:
        self._sock: socket.socket = sock  # type: ignore[assignment]  # None only until _read_loop connects
        self._buffer = buffer
        self._watchdog = float(watchdog_seconds) if type(watchdog_seconds) in (int, float) else None  # type: ignore[arg-type]
        self._replies: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._send_lock = threading.Lock()
        self._request_lock = threading.Lock()
        self._closed = False
        self._last_seen = time.monotonic()
        #: The log sink of tenant output (``capture.install``), flushed before every other frame.
        self.capture: capture.Sink | None = None

    def start(self, *, expect_job: bool = False, connect: Callable[[], socket.socket] | None = None) -> None:
        """Start the reader/watchdog thread. With ``connect`` (a channel made without a socket)
        the thread first takes its socket from ``connect()``; any failure there kills the child.
        With ``expect_job`` it then reads the ``job`` frame (``job()`` returns it): EOF, any other
        frame, a non-ping frame in the same read, or ``JOB_TIMEOUT_SECONDS`` without a job kills
        the child; the job's ``watchdogSeconds`` then arms the watchdog. (A bare ``_thread``: a
        ``threading.Thread`` costs a fresh child about 0.5 ms more CPU, ``bench.sandbox_bench``.)"""
        _thread.start_new_thread(self._read_loop, (expect_job, connect))

    def job(self) -> dict[str, Any]:
        """The ``job`` frame read by the reader thread (blocks until it arrived)."""
        return self._replies.get()

    def send(self, message: dict[str, Any]) -> None:
        """Write one frame; any failure kills the child. Blocks forever once a final was sent.
        Buffered tenant output goes first (``capture.Sink.before_send``)."""
        if self.capture is not None:
            self.capture.before_send(final=message.get("op") in protocol.FINAL_OPS)
        self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        """Write one frame as it is (the log sink's way out)."""
        with self._send_lock:
            if self._closed:
                threading.Event().wait()
            try:
                protocol.write_frame(self._sock, message)
            except (OSError, protocol.ProtocolError):
                hygiene.die()
            if message.get("op") in protocol.FINAL_OPS:
                self._closed = True

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` and return the parent's next non-ping frame."""
        with self._request_lock:
            self.send(message)
            return self._replies.get()

    def final(self, message: dict[str, Any]) -> NoReturn:
        """Send the last message of this child, then kill the process group."""
        self.send(message)
        hygiene.die()

    def fatal(self, message: str) -> NoReturn:
        """The parent sent something the protocol does not allow here: stop at once."""
        hygiene.die()

    def _read_loop(self, expect_job: bool, connect: Callable[[], socket.socket] | None) -> None:
        try:
            if connect is not None:
                self._sock = connect()
            poller = select.poll()
            poller.register(self._sock.fileno(), select.POLLIN)
            if expect_job:
                self._read_job(poller)
            while True:
                timeout_ms = None
                if self._watchdog is not None:
                    remaining = self._last_seen + self._watchdog - time.monotonic()
                    timeout_ms = max(0.0, remaining * 1000)
                if not poller.poll(timeout_ms):
                    # Die only when nothing arrived: a starved reader thread can wake after the
                    # deadline with pings already queued in the socket (poll(0) sees them first).
                    if self._watchdog_expired():
                        hygiene.die()
                    continue
                data = self._sock.recv(_RECV_BYTES)
                if not data:
                    hygiene.die()
                self._last_seen = time.monotonic()
                for message in self._buffer.feed(data):
                    if message["op"] != "ping":
                        self._replies.put(message)
        except BaseException:  # noqa: BLE001 - a broken channel or frame: the parent is gone or lying
            hygiene.die()

    def _watchdog_expired(self) -> bool:
        """True when no frame arrived for ``watchdog`` seconds (never without a watchdog)."""
        return self._watchdog is not None and time.monotonic() - self._last_seen >= self._watchdog

    def _read_job(self, poller: select.poll) -> None:
        """Wait for the ``job`` frame (pings may share its read), queue it and arm the watchdog."""
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not poller.poll(remaining * 1000):
                hygiene.die()
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                hygiene.die()
            messages = self._buffer.feed(data)
            if messages:
                job = messages[0]
                if job.get("op") != "job":
                    hygiene.die()
                watchdog = job.get("watchdogSeconds")
                self._watchdog = float(watchdog) if type(watchdog) in (int, float) else None  # type: ignore[arg-type]
                self._last_seen = time.monotonic()
                self._replies.put(job)
                # A heartbeat ping may share the job's read (the pinger can start right after the
                # job was sent); any other frame before the child asked for one is a protocol error.
                if any(message["op"] != "ping" for message in messages[1:]):
                    hygiene.die()
                return
