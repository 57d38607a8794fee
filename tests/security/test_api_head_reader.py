"""``host_api.server.head_complete``: when the API's head reader hands a connection to a thread
(docs/spec/host-features.md#hf-isolation). Pure."""

from __future__ import annotations

import pytest

from host_api import server

LIMIT = 8190


@pytest.mark.parametrize("head, complete", [
    (b"", False),
    (b"GET /v2/spa", False),
    (b"GET / HTTP/1.1\r\nHost: t\r\n", False),
    (b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nHost: t\r\n\r\n{\"body\": 1}", True),
    (b"\r\nGET / HTTP/1.1\r\n", False),                      # one empty line before the request line
    (b"GET / HTTP/1.1\nHost: t", True),                       # bare LF: gunicorn rejects it at once
    (b"GET /" + b"a" * LIMIT, True),                          # request line over the limit: 414 at once
    (b"GET /" + b"a" * (LIMIT - 10), False),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"b" * 9000, False),      # gunicorn's 431 needs the whole head
], ids=["empty", "partial-line", "partial-headers", "complete", "with-body", "leading-crlf", "bare-lf",
        "long-line", "line-within-limit", "long-header"])
def test_head_complete(head, complete):
    assert server.head_complete(head, limit_request_line=LIMIT) is complete


def test_the_header_timeout_is_configurable_per_worker_class():
    worker = server.JsonErrorThreadWorker.with_header_timeout(2.5)
    assert issubclass(worker, server.JsonErrorThreadWorker) and worker.header_timeout == 2.5
    assert server.JsonErrorThreadWorker.header_timeout == server.DEFAULT_HEADER_TIMEOUT == 10.0
    with pytest.raises(ValueError):
        server.JsonErrorThreadWorker.with_header_timeout(0)


def test_the_body_timeout_is_configurable_beside_the_header_timeout():
    worker = server.JsonErrorThreadWorker.with_timeouts(header=3.0, body=7.5)
    assert (worker.header_timeout, worker.body_timeout) == (3.0, 7.5)
    assert server.JsonErrorThreadWorker.body_timeout == server.DEFAULT_BODY_TIMEOUT == 30.0
    assert server.JsonErrorThreadWorker.with_header_timeout(2.0).body_timeout == 30.0
    with pytest.raises(ValueError):
        server.JsonErrorThreadWorker.with_timeouts(header=1.0, body=0)
