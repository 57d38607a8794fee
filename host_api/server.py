"""The gunicorn worker of ``takohost api``: gunicorn's own error pages as the JSON envelope.

gunicorn answers requests it cannot parse (a request line over ``limit_request_line``: 414; a
header over ``limit_request_field_size``: 431; an invalid header, method or chunk: 400; …) itself,
before the app sees them, with an HTML page written by ``gunicorn.util.write_error``. CONTRACT
§2.4 says "No HTML error pages, ever", and gunicorn has no setting for the format, so this
worker — gunicorn's ``gthread`` worker otherwise — replaces that one function in its own process
with :func:`write_json_error`. gunicorn keeps deciding *which* status and message an error gets
(``Worker.handle_error``) and keeps logging it; only the rendering changes.

Slow request heads (slowloris, issue 10 item 7). ``gthread`` hands a connection to one of its
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

#: Longest gunicorn message echoed in an error body (it may quote the offending request line).
MAX_MESSAGE = 300
#: Seconds a client has to send a complete request head, from its connection (or from the end
#: of its previous response on a kept-alive connection).
DEFAULT_HEADER_TIMEOUT = 10.0
#: The largest request head read before a thread takes over; a larger incomplete one is a 431.
MAX_HEAD_BYTES = 64 * 1024
#: One ``recv`` of a head in the main loop.
_READ = 65536

# The gthread hooks the head reader relies on (gunicorn >= 25); fail at start, not silently.
_HOOKS = ("enqueue_req", "finish_request", "murder_pending")
if _missing := [name for name in _HOOKS if not hasattr(ThreadWorker, name)]:
    raise ImportError(f"gunicorn {gunicorn.__version__}: gthread has no {_missing}; host_api needs gunicorn 25+")


def json_error_bytes(status: int, reason: str, message: str) -> bytes:
    """A complete ``HTTP/1.1`` error response (``Connection: close``) carrying the §2.4 envelope:
    ``invalid_request`` for a 4xx, ``internal_error`` for a 5xx; pure."""
    code = "internal_error" if status >= 500 else "invalid_request"
    text = f"{reason}: {message}" if message else reason
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "…"
    body = json.dumps({"error": {"code": code, "message": text}}).encode("ascii")
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
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
    """gunicorn's ``gthread`` worker whose own error responses are JSON and which reads request
    heads in its main loop with a deadline (see the module doc)."""

    #: Seconds a request head may take (see :data:`DEFAULT_HEADER_TIMEOUT`).
    header_timeout: float = DEFAULT_HEADER_TIMEOUT

    @classmethod
    def with_header_timeout(cls, seconds: float) -> type[JsonErrorThreadWorker]:
        """A subclass whose ``header_timeout`` is ``seconds`` (> 0), for gunicorn's ``worker_class``."""
        if not seconds > 0:
            raise ValueError("the header timeout must be positive")
        return type(cls.__name__, (cls,), {"header_timeout": float(seconds)})

    def init_process(self) -> None:
        """Swap the error writer in this worker process, then run as ``gthread`` does."""
        gunicorn_util.write_error = write_json_error
        #: Connections whose head is arriving, oldest (earliest deadline) first.
        self.reading_heads: collections.deque = collections.deque()
        cfg = self.cfg
        self.reads_heads = (
            not cfg.is_ssl
            and getattr(cfg, "protocol", "http") == "http"
            and getattr(cfg, "http2_cleartext", "off") not in ("prior-knowledge", "both")
        )
        super().init_process()

    # -- the head reader (all in the worker's main thread) ---------------------------------------
    def enqueue_req(self, conn) -> None:  # noqa: ANN001 - gunicorn's TConn
        """Read ``conn``'s next request head before a thread gets it (gthread calls this for every
        new, kept-alive and read-ahead connection)."""
        if not self.reads_heads:
            super().enqueue_req(conn)
            return
        head = bytearray()
        if conn.parser is not None:  # kept alive: a body drain may have read into this head
            head += conn.parser.unreader.take_buffered()
        conn.takohost_head = head
        conn.takohost_deadline = time.monotonic() + self.header_timeout
        conn.takohost_polled = False
        conn.sock.setblocking(False)
        self.reading_heads.append(conn)
        if head_complete(bytes(head), limit_request_line=self._line_limit()):
            self._head_done(conn)
        else:
            self._on_head_readable(conn)

    def _line_limit(self) -> int:
        return self.cfg.limit_request_line if self.cfg.limit_request_line > 0 else 8190

    def _on_head_readable(self, conn, *_: object) -> None:  # noqa: ANN001
        head = conn.takohost_head
        while True:
            try:
                chunk = conn.sock.recv(_READ, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:  # the client went away before finishing its head
                self._drop(conn, None)
                return
            head += chunk
            if head_complete(bytes(head), limit_request_line=self._line_limit()):
                self._head_done(conn)
                return
            if len(head) > MAX_HEAD_BYTES:
                self._drop(conn, json_error_bytes(431, "Request Header Fields Too Large",
                                                  f"the request head is over {MAX_HEAD_BYTES} bytes"))
                return
        if not conn.takohost_polled:
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_head_readable, conn))
            conn.takohost_polled = True

    def _forget(self, conn) -> None:  # noqa: ANN001
        if conn.takohost_polled:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.takohost_polled = False
        try:
            self.reading_heads.remove(conn)
        except ValueError:
            pass

    def _head_done(self, conn) -> None:  # noqa: ANN001
        """Give the complete head back to gunicorn's parser and the connection to a thread."""
        self._forget(conn)
        if conn.parser is None:
            conn.parser = gunicorn_http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(conn.takohost_head))
        conn.takohost_head = None
        conn.data_ready = True  # the thread must not wait for socket data: it is in the parser
        super().enqueue_req(conn)

    def _drop(self, conn, answer: bytes | None) -> None:  # noqa: ANN001
        """Close ``conn`` (after ``answer``, best effort) and forget it."""
        self._forget(conn)
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
        """gthread's per-loop sweep, plus: close the heads past their deadline (``408``), and all
        of them once the worker is stopping."""
        super().murder_pending()
        now = time.monotonic()
        while self.reading_heads and (not self.alive or self.reading_heads[0].takohost_deadline <= now):
            conn = self.reading_heads[0]
            answer = None  # a stopping worker, or a connection that never sent a byte: just close
            if self.alive and conn.takohost_head:
                answer = json_error_bytes(
                    408, "Request Timeout", f"the request head did not arrive within {self.header_timeout:g} s"
                )
            self._drop(conn, answer)
