"""The gunicorn worker of ``takohost api``: gunicorn's own error pages as the JSON envelope.

gunicorn answers requests it cannot parse (a request line over ``limit_request_line``: 414; a
header over ``limit_request_field_size``: 431; an invalid header, method or chunk: 400; …) itself,
before the app sees them, with an HTML page written by ``gunicorn.util.write_error``. CONTRACT
§2.4 says "No HTML error pages, ever", and gunicorn has no setting for the format, so this
worker — gunicorn's ``gthread`` worker otherwise — replaces that one function in its own process
with :func:`write_json_error`. gunicorn keeps deciding *which* status and message an error gets
(``Worker.handle_error``) and keeps logging it; only the rendering changes.
"""

from __future__ import annotations

import json

from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import ThreadWorker

#: Longest gunicorn message echoed in an error body (it may quote the offending request line).
MAX_MESSAGE = 300


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


class JsonErrorThreadWorker(ThreadWorker):
    """gunicorn's ``gthread`` worker whose own error responses are JSON (see the module doc)."""

    def init_process(self) -> None:
        """Swap the error writer in this worker process, then run as ``gthread`` does."""
        gunicorn_util.write_error = write_json_error
        super().init_process()
