"""The gunicorn worker of ``takohost api``: gunicorn's own error pages as the JSON envelope.

gunicorn answers requests it cannot parse (a request line over ``limit_request_line``: 414; a
header over ``limit_request_field_size``: 431; an invalid header, method or chunk: 400; …) itself,
before the app sees them, with an HTML page written by ``gunicorn.util.write_error``. docs/spec/README.md
§2.4 says "No HTML error pages, ever", and gunicorn has no setting for the format, so this
worker — gunicorn's ``gthread`` worker otherwise — replaces that one function in its own process
with :func:`write_json_error`. gunicorn keeps deciding *which* status and message an error gets
(``Worker.handle_error``) and keeps logging it; only the rendering changes.

Slow request heads (slowloris, docs/spec/host-features.md#hf-isolation). ``gthread`` hands a connection to one of its
``threads`` as soon as its first bytes arrive, and the thread then reads the request head with a
blocking socket and no deadline: gunicorn has no header timeout (benoitc/gunicorn#2255 was
closed unimplemented; #3519 only defers connections that send nothing at all). A few dozen
connections that send part of a head and stop pin every thread, and the API stops answering.
This worker therefore reads each request head itself, in its main loop, non-blocking: a
connection reaches a thread only once its head is complete (or gunicorn can reject it from what
has arrived: a bare LF, a request line over its limit). A head that is not complete within
``header_timeout`` seconds (:data:`DEFAULT_HEADER_TIMEOUT`; ``takohost api --header-timeout``)
of the connection being accepted or kept alive is answered with a JSON ``408`` and closed; one
over :data:`MAX_HEAD_BYTES` with a JSON ``431``. A slow connection costs a socket and a buffer,
never a thread; ``worker_connections`` (1000 per worker process) still bounds how many there
are. Plain-HTTP/1.x only: with TLS or HTTP/2 prior knowledge configured (``takohost api``
configures neither) connections go to the threads as gunicorn does it.

Slow request bodies (docs/spec/host-features.md#hf-neighbours). A thread reading a body blocks on its socket just as it
did on a head: 32 connections that send a complete ``POST`` head with ``Content-Length:
1000000`` and then one byte every few seconds held every thread and the API stopped answering.
So the main loop reads the body too (its framing from :mod:`host_api.framing`), and a request
reaches a thread only once it is complete, head and body, in the parser's buffer:

* a body has ``body_timeout`` seconds (:data:`DEFAULT_BODY_TIMEOUT`; ``takohost api
  --body-timeout``) from the end of its head; then a JSON ``408`` and close;
* a body over ``MAX_CONTENT_LENGTH`` (announced, or found while following chunks) is answered
  at once with the API's JSON ``413 document_too_large``, then the rest of what the client sends
  is read and dropped (up to :data:`MAX_DRAIN_BYTES`, within the body timeout) before the
  connection is closed, so that the client reads the answer instead of a reset;
* ``Expect: 100-continue`` is answered by the reader (once), when it starts waiting for a body;
* at most :data:`MAX_READERS` connections per process read a head or body at once; one more
  closes the one that has been reading longest (JSON ``503``), so that a flood of slow clients
  cannot keep a new one out; and the bytes buffered by all of them are bounded
  (:data:`MAX_BUFFERED_BYTES`; past it, the connection that reads more gets a JSON ``503``).

This is the design of a buffering proxy (nginx reads the whole request before it talks to an
upstream) inside the one server we run, rather than a second server in front of it or another
WSGI server: waitress also buffers whole requests, but its limit is an inactivity timeout (one
byte every few seconds resets it) and its own error pages are plain text.
"""

from __future__ import annotations

import collections
import json
import selectors
import socket
import time
from functools import partial

import gunicorn
from gunicorn import http as gunicorn_http
from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import ThreadWorker

from host_api import app as api_app
from host_api import framing

#: Longest gunicorn message echoed in an error body (it may quote the offending request line).
MAX_MESSAGE = 300
#: Seconds a client has to send a complete request head, from its connection (or from the end
#: of its previous response on a kept-alive connection).
DEFAULT_HEADER_TIMEOUT = 10.0
#: The largest request head read before a thread takes over; a larger incomplete one is a 431.
MAX_HEAD_BYTES = 64 * 1024
#: Seconds a client has to send a request body, from the end of its head.
DEFAULT_BODY_TIMEOUT = 30.0
#: Connections reading a head or a body at once, per worker process.
MAX_READERS = 1000
#: Bytes of heads and bodies buffered at once, per worker process.
MAX_BUFFERED_BYTES = 256 * 1024 * 1024
#: Most bytes read and dropped after a ``413`` before the connection is closed anyway.
MAX_DRAIN_BYTES = 64 * 1024 * 1024
#: One ``recv`` in the main loop.
_READ = 65536
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

# The gthread hooks the head reader relies on (gunicorn >= 25); fail at start, not silently.
_HOOKS = ("enqueue_req", "finish_request", "murder_pending")
if _missing := [name for name in _HOOKS if not hasattr(ThreadWorker, name)]:
    raise ImportError(f"gunicorn {gunicorn.__version__}: gthread has no {_missing}; host_api needs gunicorn 25+")


def json_error_bytes(status: int, reason: str, message: str, *, code: str | None = None,
                     raw_message: bool = False, headers: str = "") -> bytes:
    """A complete ``HTTP/1.1`` error response (``Connection: close``) carrying the §2.4 envelope:
    ``code``, by default ``invalid_request`` for a 4xx and ``internal_error`` for a 5xx; the
    message is ``"{reason}: {message}"`` (just ``message`` with ``raw_message``, as the app
    words it); ``headers``: more header lines, each ending in CRLF; pure."""
    code = code or ("internal_error" if status >= 500 else "invalid_request")
    text = message if raw_message else (f"{reason}: {message}" if message else reason)
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "…"
    body = json.dumps({"error": {"code": code, "message": text}}).encode("ascii")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{headers}"
        "\r\n"
    )
    return head.encode("latin-1") + body


def write_json_error(sock: object, status_int: int, reason: str, mesg: str) -> None:
    """Drop-in for ``gunicorn.util.write_error(sock, status_int, reason, mesg)``."""
    gunicorn_util.write_nonblock(sock, json_error_bytes(status_int, reason, mesg))


def head_complete(head: bytes, *, limit_request_line: int) -> bool:
    """Whether gunicorn can parse or reject the request head ``head`` (the bytes received so far)
    without reading more: it holds the blank line that ends a head, a bare LF (rejected at once),
    or a first line longer than ``limit_request_line`` (``414``); pure."""
    if b"\r\n\r\n" in head or head.count(b"\n") != head.count(b"\r\n"):
        return True
    start = 2 if head.startswith(b"\r\n") else 0  # one empty line may precede the request line
    end = head.find(b"\r\n", start)
    return end < 0 and len(head) - start > limit_request_line + 2


class JsonErrorThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker whose own error responses are JSON and which reads whole
    requests (head and body) in its main loop with deadlines (see the module doc)."""

    #: Seconds a request head may take (see :data:`DEFAULT_HEADER_TIMEOUT`).
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    #: Seconds a request body may take after its head (see :data:`DEFAULT_BODY_TIMEOUT`).
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    #: Largest body read (the app's ``MAX_CONTENT_LENGTH``); more is a ``413``.
    max_body: int = api_app.MAX_CONTENT_LENGTH
    #: See :data:`MAX_READERS` and :data:`MAX_BUFFERED_BYTES`.
    max_readers: int = MAX_READERS
    max_buffered: int = MAX_BUFFERED_BYTES

    @classmethod
    def with_header_timeout(cls, seconds: float) -> type[JsonErrorThreadWorker]:
        """A subclass whose ``header_timeout`` is ``seconds`` (> 0), for gunicorn's ``worker_class``."""
        return cls.with_timeouts(header=seconds, body=cls.body_timeout)

    @classmethod
    def with_timeouts(cls, *, header: float, body: float) -> type[JsonErrorThreadWorker]:
        """A subclass with these head and body timeouts (seconds, > 0), for ``worker_class``.

        Raises:
            ValueError: for a timeout that is not positive.
        """
        if not (header > 0 and body > 0):
            raise ValueError("the header and body timeouts must be positive")
        return type(cls.__name__, (cls,), {"header_timeout": float(header), "body_timeout": float(body)})

    def init_process(self) -> None:
        """Swap the error writer in this worker process, then run as ``gthread`` does."""
        gunicorn_util.write_error = write_json_error
        #: Connections whose head is arriving, oldest (earliest deadline) first.
        self.reading_heads: collections.deque = collections.deque()
        #: Connections whose body is arriving (or being drained after a 413), oldest first.
        self.reading_bodies: collections.deque = collections.deque()
        #: Bytes held in the buffers of both.
        self.buffered = 0
        cfg = self.cfg
        self.reads_heads = (
            not cfg.is_ssl
            and getattr(cfg, "protocol", "http") == "http"
            and getattr(cfg, "http2_cleartext", "off") not in ("prior-knowledge", "both")
        )
        super().init_process()

    # -- the request reader (all in the worker's main thread) ------------------------------------
    def enqueue_req(self, conn) -> None:  # noqa: ANN001 - gunicorn's TConn
        """Read ``conn``'s next request before a thread gets it (gthread calls this for every
        new, kept-alive and read-ahead connection)."""
        if not self.reads_heads:
            super().enqueue_req(conn)
            return
        buf = bytearray()
        if conn.parser is not None:  # kept alive: a body drain may have read into this head
            buf += conn.parser.unreader.take_buffered()
        self.buffered += len(buf)
        now = time.monotonic()
        conn.takohost_buf = buf
        conn.takohost_phase = "head"
        conn.takohost_started = now
        conn.takohost_deadline = now + self.header_timeout
        conn.takohost_polled = False
        conn.sock.setblocking(False)
        self.reading_heads.append(conn)
        if len(self.reading_heads) + len(self.reading_bodies) > self.max_readers:
            self._evict_oldest()
        if conn.takohost_phase == "head" and self._progress(conn):  # (not the one evicted)
            self._on_readable(conn)

    def _line_limit(self) -> int:
        return self.cfg.limit_request_line if self.cfg.limit_request_line > 0 else 8190

    def _evict_oldest(self) -> None:
        heads, bodies = self.reading_heads, self.reading_bodies
        if bodies and (not heads or bodies[0].takohost_started <= heads[0].takohost_started):
            oldest = bodies[0]
        else:
            oldest = heads[0]
        self._drop(oldest, self._unavailable("too many clients are sending requests slowly"))

    @staticmethod
    def _unavailable(message: str) -> bytes:
        return json_error_bytes(503, "Service Unavailable", message, code="backend_unavailable",
                                raw_message=True, headers="Retry-After: 1\r\n")

    def _on_readable(self, conn, *_: object) -> None:  # noqa: ANN001
        """Read what has arrived (without blocking), then see what the request needs next."""
        buf = conn.takohost_buf
        while True:
            try:
                chunk = conn.sock.recv(_READ, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:  # the client went away before finishing its request
                self._drop(conn, None)
                return
            if conn.takohost_phase == "drain":
                conn.takohost_drained += len(chunk)
                if conn.takohost_drained >= conn.takohost_drain_limit:
                    self._drop(conn, None)
                    return
                continue
            buf += chunk
            self.buffered += len(chunk)
            if self.buffered > self.max_buffered:
                self._drop(conn, self._unavailable("the server is buffering too many request bytes"))
                return
            if not self._progress(conn):
                return
        if not conn.takohost_polled:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))
            conn.takohost_polled = True

    def _progress(self, conn) -> bool:  # noqa: ANN001
        """Act on ``conn``'s buffer; whether it still wants bytes from the socket."""
        buf = conn.takohost_buf
        if conn.takohost_phase == "head":
            if not head_complete(bytes(buf), limit_request_line=self._line_limit()):
                if len(buf) > MAX_HEAD_BYTES:
                    self._drop(conn, json_error_bytes(431, "Request Header Fields Too Large",
                                                      f"the request head is over {MAX_HEAD_BYTES} bytes"))
                    return False
                return True
            self._start_body(conn)
        if conn.takohost_phase == "body":
            return self._body_progress(conn)
        return conn.takohost_phase == "drain"

    def _start_body(self, conn) -> None:  # noqa: ANN001
        """The head is complete: hand over a request without a body, or start reading it."""
        framing_ = framing.body_framing(bytes(conn.takohost_buf))
        if framing_.kind in (framing.NONE, framing.PASS):
            conn.takohost_phase = "ready"
            self._hand_off(conn)
            return
        self._move(conn, self.reading_heads, self.reading_bodies)
        conn.takohost_deadline = time.monotonic() + self.body_timeout
        if framing_.kind == framing.LENGTH and framing_.length > self.max_body:
            self._too_large(conn, drain=framing_.length)
            return
        conn.takohost_phase = "body"
        conn.takohost_framing = framing_
        conn.takohost_scan = framing.ChunkedScan(framing_.body_start, limit=self.max_body)
        if framing_.expect_continue is not None and not self._body_complete_now(conn):
            # Answer the expectation here, once; gunicorn's parser must not answer it again.
            start, end = framing_.expect_continue
            del conn.takohost_buf[start:end]
            self.buffered -= end - start
            conn.takohost_framing = framing.body_framing(bytes(conn.takohost_buf))
            conn.takohost_scan = framing.ChunkedScan(conn.takohost_framing.body_start, limit=self.max_body)
            try:
                conn.sock.send(_CONTINUE, socket.MSG_DONTWAIT)
            except OSError:
                pass

    def _body_complete_now(self, conn) -> bool:  # noqa: ANN001
        framing_ = conn.takohost_framing
        if framing_.kind == framing.LENGTH:
            return len(conn.takohost_buf) >= framing_.body_start + framing_.length
        return framing.ChunkedScan(framing_.body_start, limit=self.max_body).advance(
            conn.takohost_buf) != framing.ChunkedScan.MORE

    def _body_progress(self, conn) -> bool:  # noqa: ANN001
        framing_ = conn.takohost_framing
        if framing_.kind == framing.LENGTH:
            if len(conn.takohost_buf) < framing_.body_start + framing_.length:
                return True
        else:
            state = conn.takohost_scan.advance(conn.takohost_buf)
            if state == framing.ChunkedScan.MORE:
                return True
            if state == framing.ChunkedScan.TOO_LARGE:
                self._too_large(conn, drain=MAX_DRAIN_BYTES)
                return True
            # DONE, or BAD: gunicorn's parser rejects the framing from the bytes it has.
        self._hand_off(conn)
        return False

    def _too_large(self, conn, *, drain: int) -> None:  # noqa: ANN001
        """Answer the app's ``413`` now, then read and drop up to ``drain`` more bytes."""
        answer = json_error_bytes(413, "Request Entity Too Large", f"request body exceeds {self.max_body} bytes",
                                  code="document_too_large", raw_message=True)
        try:
            conn.sock.send(answer, socket.MSG_DONTWAIT)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.buffered -= len(conn.takohost_buf)
        conn.takohost_buf = bytearray()
        conn.takohost_phase = "drain"
        conn.takohost_drained = 0
        conn.takohost_drain_limit = min(drain, MAX_DRAIN_BYTES)

    @staticmethod
    def _move(conn, source: collections.deque, target: collections.deque) -> None:  # noqa: ANN001
        try:
            source.remove(conn)
        except ValueError:
            pass
        target.append(conn)

    def _forget(self, conn) -> None:  # noqa: ANN001
        if conn.takohost_polled:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.takohost_polled = False
        for queue in (self.reading_heads, self.reading_bodies):
            try:
                queue.remove(conn)
            except ValueError:
                pass
        if conn.takohost_buf is not None:
            self.buffered -= len(conn.takohost_buf)

    def _hand_off(self, conn) -> None:  # noqa: ANN001
        """Give the complete request back to gunicorn's parser and the connection to a thread."""
        self._forget(conn)
        conn.takohost_phase = None
        if conn.parser is None:
            conn.parser = gunicorn_http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(conn.takohost_buf))
        conn.takohost_buf = None
        conn.data_ready = True  # the thread must not wait for socket data: it is in the parser
        super().enqueue_req(conn)

    def _drop(self, conn, answer: bytes | None) -> None:  # noqa: ANN001
        """Close ``conn`` (after ``answer``, best effort) and forget it."""
        self._forget(conn)
        conn.takohost_buf = None
        conn.takohost_phase = None
        if answer is not None:
            try:
                conn.sock.send(answer, socket.MSG_DONTWAIT)
                conn.sock.shutdown(socket.SHUT_WR)
                while conn.sock.recv(_READ, socket.MSG_DONTWAIT):  # what the client sent meanwhile
                    pass
            except OSError:
                pass
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        """gthread's per-loop sweep, plus: close the heads and bodies past their deadline
        (``408``; a drained ``413`` just closes), and all of them once the worker is stopping."""
        super().murder_pending()
        now = time.monotonic()
        for queue, what in ((self.reading_heads, "head"), (self.reading_bodies, "body")):
            while queue and (not self.alive or queue[0].takohost_deadline <= now):
                conn = queue[0]
                answer = None  # a stopping worker, a silent connection, a drain: just close
                timeout = self.header_timeout if what == "head" else self.body_timeout
                if self.alive and conn.takohost_buf and conn.takohost_phase in ("head", "body"):
                    answer = json_error_bytes(
                        408, "Request Timeout", f"the request {what} did not arrive within {timeout:g} s"
                    )
                self._drop(conn, answer)
