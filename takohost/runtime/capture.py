"""Capture of tenant output in the sandbox child: ``log`` frames to the host (docs/spec/host-features.md#hf-observability).

:func:`install` (called by ``child.run_forked`` while the pre-spawned child waits for its job, so
that none of it is on a job's path) points file descriptors 1 and 2 at pipes drained by a thread
of the child, and replaces ``sys.stdout`` and
``sys.stderr`` by :class:`LineWriter` s: the interpreter's own (C) buffered text streams over a raw
line sink, so a ``print`` costs about what it costs anywhere, with no system call (stderr is
line-buffered, as Python's own, and flushes stdout first). ``logging`` needs nothing: left
unconfigured it writes WARNING and above to ``sys.stderr``, and ``logging.basicConfig`` binds
``sys.stderr`` as it is at that moment. Subprocesses inherit descriptors 1 and 2.

Lines are cut to ``tenant_logs.MAX_LINE_CHARS``, undecodable bytes become U+FFFD, and a
:class:`~takohost.domain.tenant_logs.Budget` drops what exceeds the context's rate (the count
travels in the next frame's ``dropped``). Frames are
``{"op": "log", "lines": [[time_ms, stream, text], ...], "dropped": n}``: ``time_ms`` is UTC epoch
milliseconds (when the line reached the sink: within ``FLUSH_SECONDS`` of its ``print``),
``stream`` ``"stdout"``/``"stderr"``. The sink flushes the streams and sends a frame when it holds
``FRAME_LINES`` lines, every ``FLUSH_SECONDS``, and **before every other frame** the child sends
(``Sink.before_send``): what an effect printed reaches the host before its ``effect_result``, and
nothing is lost at a final message. A log line is JSON text inside a frame of the runtime's own
making: nothing written to descriptors 1/2 can ever be read by the host as a frame.

The sink is muted until :meth:`Sink.arm` (``child.jobs.run_job``, as a workflow or scheduled job
arrives: the budget starts then, after the host's own); a job that does not capture (validation)
calls :meth:`Sink.discard` instead, which points descriptors 1/2 and the streams at
``/dev/null``.

Standard library and ``takohost.domain`` only (this runs beside user code).
"""

from __future__ import annotations

import _thread
import codecs
import functools
import io
import logging
import os
import re
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from takohost.domain import tenant_logs

__all__ = ["FLUSH_SECONDS", "LineWriter", "Sink", "install"]

#: A line waits at most this long in the child before it is sent (seconds).
FLUSH_SECONDS = 0.2
_READ_BYTES = 1 << 16


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _scalar(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (frames are strict UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)


class _Splitter:
    """Cuts a stream of text into lines for ``emit(lines)``, holding at most ``MAX_LINE_CHARS``
    of a partial line (the rest of an over-long line is counted, and the cut said)."""

    def __init__(self, emit: Callable[[list[str]], None]) -> None:
        self._emit = emit
        self._partial: list[str] = []
        self._size = 0
        self._cut = 0  # characters of an over-long partial line discarded so far

    def _hold(self, piece: str) -> None:
        room = tenant_logs.MAX_LINE_CHARS - self._size
        if len(piece) > room:
            self._cut += len(piece) - room
            piece = piece[:room]
        if piece:
            self._partial.append(piece)
            self._size += len(piece)

    def _take_partial(self) -> str:
        text = "".join(self._partial)
        if self._cut:
            keep = tenant_logs.MAX_LINE_CHARS - 40  # the marker is at most 40 characters
            text = text[:keep] + f" … [{self._size + self._cut - keep} characters cut]"
        self._partial, self._size, self._cut = [], 0, 0
        return text

    def feed(self, text: str) -> None:
        """Add ``text``; emit the lines it completes (one call for all of them)."""
        if "\n" not in text:
            self._hold(text)
            return
        pieces = text.split("\n")
        self._hold(pieces[0])
        lines = [self._take_partial()]
        lines.extend(pieces[1:-1])  # over-long ones are cut by clip_line
        self._hold(pieces[-1])
        self._emit(lines)

    def end(self) -> None:
        """Emit the partial line (if any)."""
        if self._partial or self._cut:
            self._emit([self._take_partial()])


class Sink:
    """The child's log buffer: lines in, ``log`` frames out through ``send`` (thread-safe).

    ``send`` writes one frame without running ``before_send`` again (``child.channel.Channel._write``);
    ``None``: muted (lines are dropped uncounted, the drain thread waits) until :meth:`arm`.
    ``clock`` is monotonic seconds (the budget), ``wall`` epoch seconds (the lines' time).
    """

    def __init__(
        self,
        send: Callable[[dict[str, Any]], None] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._send = send
        self._clock = clock
        self._wall = wall
        self._lock = threading.RLock()
        self._lines: list[list[Any]] = []
        self._dropped = 0
        self._oldest = 0.0
        self._budget = tenant_logs.Budget(now=clock())
        self._pipes: dict[int, tuple[str, _Splitter, Any]] = {}
        self._writers: list[LineWriter] = []
        self._armed = threading.Event()
        if send is not None:
            self._armed.set()

    def arm(self, send: Callable[[dict[str, Any]], None]) -> None:
        """Start sending through ``send``; the budget starts now (whatever a muted sink held is
        dropped: nothing of the tenant ran before)."""
        with self._lock:
            self._send = send
            self._budget = tenant_logs.Budget(now=self._clock())
            self._lines, self._dropped = [], 0
            self._armed.set()

    def discard(self) -> None:
        """Never capture (a job whose output goes nowhere): descriptors 1/2 and
        ``sys.stdout``/``sys.stderr`` write to ``/dev/null`` from now on; the drain thread sees
        its pipes end and stays idle."""
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd, inheritable=True)  # closes the pipes' write ends
        os.close(null)
        sys.stdout = sys.__stdout__
        sys.stderr = sys.__stderr__
        self._writers.clear()
        self._armed.set()

    # -- lines in ------------------------------------------------------------------------------
    def line(self, stream: str, text: str) -> None:
        """Keep one complete line of ``stream`` (see :meth:`lines`)."""
        self.lines(stream, [text])

    def lines(self, stream: str, texts: list[str]) -> None:
        """Keep complete lines of ``stream``, cut and budgeted (a dropped line costs only the
        budget check)."""
        with self._lock:
            if self._send is None:
                return
            now = self._clock()
            stamp = int(self._wall() * 1000)
            take = self._budget.take
            limit = tenant_logs.MAX_LINE_CHARS
            for text in texts:
                if not take(min(len(text), limit), now):
                    self._dropped += 1
                    continue
                if not self._lines:
                    self._oldest = now
                self._lines.append([stamp, stream, tenant_logs.clip_line(_scalar(text))])
                if len(self._lines) >= tenant_logs.FRAME_LINES:
                    self._flush_locked()

    def add_pipe(self, fd: int, stream: str) -> None:
        """Drain the read end ``fd`` (non-blocking) of a pipe as ``stream``."""
        os.set_blocking(fd, False)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        splitter = _Splitter(functools.partial(self.lines, stream))
        self._pipes[fd] = (stream, splitter, decoder)

    def add_writer(self, writer: LineWriter) -> None:
        """Register a line writer whose partial line is emitted at a final message."""
        self._writers.append(writer)

    # -- frames out ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Send the buffered lines (and the dropped count) as one frame, if there is any."""
        with self._lock:
            self._flush_locked()

    def before_send(self, *, final: bool) -> None:
        """Called before the child sends any other frame: drain the pipes, then flush (with
        ``final`` also the partial lines of every writer and pipe)."""
        self._flush_writers(final=final)  # before the sink lock: the order a print takes them in
        with self._lock:
            self._drain_pipes()
            if final:
                for _, splitter, decoder in self._pipes.values():
                    splitter.feed(decoder.decode(b"", final=True))
                    splitter.end()
            self._flush_locked()

    def _flush_writers(self, *, final: bool = False) -> None:
        for writer in self._writers:
            try:
                writer.flush()
                if final:
                    writer.raw_sink.end_line()
            except Exception:  # noqa: BLE001 - user code may have closed or broken the stream
                pass

    def _flush_locked(self) -> None:
        if self._send is None or (not self._lines and not self._dropped):
            return
        message = {"op": "log", "lines": self._lines, "dropped": self._dropped}
        self._lines, self._dropped = [], 0
        self._send(message)

    def _drain_pipes(self) -> bool:
        """Read what the pipes hold now; False once every pipe reached EOF."""
        alive = False
        for fd, (_, splitter, decoder) in list(self._pipes.items()):
            while True:
                try:
                    data = os.read(fd, _READ_BYTES)
                except BlockingIOError:
                    alive = True
                    break
                except OSError:
                    data = b""
                if not data:  # the tenant closed every write end: finish its last line
                    splitter.feed(decoder.decode(b"", final=True))
                    splitter.end()
                    del self._pipes[fd]
                    break
                splitter.feed(decoder.decode(data))
        return alive

    def run(self) -> None:
        """The drain thread: poll the pipes, flush lines older than ``FLUSH_SECONDS`` (a muted
        sink's thread waits without waking up)."""
        self._armed.wait()
        while True:
            fds = list(self._pipes)
            try:
                if fds:
                    poller = select.poll()
                    for fd in fds:
                        poller.register(fd, select.POLLIN)
                    poller.poll(FLUSH_SECONDS * 1000)
                else:
                    time.sleep(FLUSH_SECONDS)
                self._flush_writers()
                with self._lock:
                    self._drain_pipes()
                    if self._lines and self._clock() - self._oldest >= FLUSH_SECONDS:
                        self._flush_locked()
                    elif self._dropped and not self._lines:
                        self._flush_locked()
            except Exception:  # noqa: BLE001 - user code may close our descriptors; keep going
                time.sleep(FLUSH_SECONDS)


class _RawLines(io.RawIOBase):
    """The raw end of a captured ``sys.stdout``/``sys.stderr``: UTF-8 bytes in (in chunks, from
    the C buffering above it), lines to the :class:`Sink`. ``fileno()`` is the descriptor (1 or
    2, a pipe into the same sink), so a subprocess given ``stdout=sys.stdout`` is captured too."""

    def __init__(self, sink: Sink, *, stream: str, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self._lock = threading.Lock()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._splitter = _Splitter(functools.partial(sink.lines, stream))

    def writable(self) -> bool:
        """Always writable."""
        return True

    def isatty(self) -> bool:
        """Never a terminal."""
        return False

    def fileno(self) -> int:
        """The descriptor behind this stream."""
        return self._fd

    def write(self, data: Any) -> int:
        """Take a chunk of bytes; the lines it completes go to the sink."""
        chunk = bytes(data)
        with self._lock:
            self._splitter.feed(self._decoder.decode(chunk))
        return len(chunk)

    def end_line(self) -> None:
        """Emit the partial line (at the end of the context)."""
        with self._lock:
            self._splitter.feed(self._decoder.decode(b"", final=True))
            self._splitter.end()


def _fffd(error: UnicodeError) -> tuple[bytes, int]:
    """Codec error handler: each character UTF-8 cannot encode (a lone surrogate) becomes U+FFFD
    (as bytes: the UTF-8 encoder takes only ASCII text from a handler)."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "\ufffd".encode("utf-8") * (error.end - error.start), error.end


codecs.register_error("takohost.fffd", _fffd)


class LineWriter(io.TextIOWrapper):
    """``sys.stdout``/``sys.stderr`` of tenant code: the interpreter's own (C) text and buffer
    layers, so a ``print`` costs what it costs anywhere; their bytes reach :class:`_RawLines` in
    chunks, when the sink flushes them (before every frame, and every ``FLUSH_SECONDS``) or when
    64 KiB are buffered. ``raw_sink`` is the raw end."""

    def __init__(self, sink: Sink, *, stream: str, fd: int, line_buffering: bool = False) -> None:
        self.raw_sink = _RawLines(sink, stream=stream, fd=fd)
        self.before: LineWriter | None = None  # flushed first: stdout before stderr
        super().__init__(
            io.BufferedWriter(self.raw_sink, buffer_size=1 << 16),
            encoding="utf-8",
            errors="takohost.fffd",
            line_buffering=line_buffering,
            write_through=False,
        )

    def write(self, text: str) -> int:
        """Write ``text``; on a stream with ``before`` (stderr), flush ``before`` (stdout) first:
        what was printed before a warning is logged before it."""
        if self.before is not None:
            io.TextIOWrapper.flush(self.before)
        return super().write(text)

    def flush(self) -> None:
        """Flush ``before`` (see :meth:`write`), then this stream."""
        if self.before is not None:
            io.TextIOWrapper.flush(self.before)
        super().flush()


def install(send: Callable[[dict[str, Any]], None] | None = None) -> Sink:
    """Capture descriptors 1/2, ``sys.stdout`` and ``sys.stderr`` into a new :class:`Sink` sending
    through ``send`` (``None``: muted until :meth:`Sink.arm`); starts its drain thread. Returns
    the sink (the channel calls its ``before_send``)."""
    # Logging as a fresh interpreter has it: the zygote's own handlers (inherited over fork)
    # would format tenant records their way and make ``logging.basicConfig`` a no-op.
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    sink = Sink(send)
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd, inheritable=True)
        os.close(write_end)
        sink.add_pipe(read_end, stream)
    out = LineWriter(sink, stream="stdout", fd=1)
    err = LineWriter(sink, stream="stderr", fd=2, line_buffering=True)  # as Python's own stderr
    err.before = out
    sink.add_writer(out)
    sink.add_writer(err)
    sys.stdout = out
    sys.stderr = err
    _thread.start_new_thread(sink.run, ())
    return sink
