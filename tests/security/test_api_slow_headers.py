"""Slow-header (slowloris) connections cannot take the API down (docs/spec/host-features.md#hf-isolation).

A real ``takohost api`` (gunicorn, two worker processes, default settings) gets 50 loopback
connections that send part of a request line or of the headers and never finish it — some stay
silent, some trickle one byte a second. Meanwhile normal authenticated requests are answered at
once, and every slow connection is dropped by the header timeout (``takohost api
--header-timeout``, 10 s by default) with a JSON ``408``.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse

import pytest
import requests

from host_api import server
from tests.support import processes

SLOW = 50
#: How long after the header timeout a slow connection may still be open (the worker's loop
#: looks at the deadlines about once a second; the machine is shared).
GRACE = 6.0


@pytest.fixture()
def api(db_url):
    process = processes.start_api()
    yield process
    process.stop()


def _partial(kind: int, space: str) -> bytes:
    return (
        f"GET /v2/spaces/{space}/resources HTTP/1.1\r\nHost: t\r\n".encode(),  # headers never end
        b"GET /v2/spaces/",  # the request line never ends
        b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ",  # trickles one byte a second
    )[kind % 3]


def _closed(sock: socket.socket) -> tuple[bool, bytes]:
    """Whether the server closed ``sock`` (reading what it sent first), without blocking."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (BlockingIOError, InterruptedError):
        return False, data
    except OSError:  # reset by the server
        return True, data
    return True, data


def test_slow_header_connections_do_not_block_the_api_and_are_dropped(api, space_token):
    space, token = space_token
    parts = urllib.parse.urlsplit(api.extra["url"])
    addr = (parts.hostname, parts.port)
    assert addr[0] == "127.0.0.1"
    listing = f"{api.extra['url']}/v2/spaces/{space}/resources"
    auth = {"Authorization": f"Bearer {token}"}
    slow: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for i in range(SLOW):
            sock = socket.create_connection(addr, timeout=5)
            sock.sendall(_partial(i, space))
            sock.setblocking(False)
            slow.append(sock)
        time.sleep(1.5)  # every slow connection has reached a worker

        # Normal requests are answered at once, on new connections and on a kept-alive one.
        with requests.Session() as session:
            for _ in range(5):
                started = time.monotonic()
                response = session.get(listing, headers=auth, timeout=5)
                assert response.status_code == 200, response.text[:300]
                assert time.monotonic() - started < 2.0
                started = time.monotonic()
                assert requests.get(listing, headers=auth, timeout=5).status_code == 200
                assert time.monotonic() - started < 2.0
                for i, sock in enumerate(slow):
                    if i % 3 == 2:
                        try:
                            sock.send(b"x")
                        except OSError:
                            pass

        # A client that sends its head in pieces, but within the timeout, is answered.
        with socket.create_connection(addr, timeout=10) as sock:
            head = f"GET /v2/spaces/{space}/resources HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n"
            for piece in (head[:20], head[20:], "Connection: close\r\n", "\r\n"):
                sock.sendall(piece.encode())
                time.sleep(0.7)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer[:300]

        # Pipelined requests on one kept-alive connection, the second head split: both answered.
        with socket.create_connection(addr, timeout=10) as sock:
            one = f"GET /v2/spaces/{space}/resources HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n\r\n"
            two = one.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
            sock.sendall((one + two[:30]).encode())
            time.sleep(0.5)
            sock.sendall(two[30:].encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            assert answer.count(b"HTTP/1.1 200") == 2, answer[:600]

        # Every slow connection is dropped by the header timeout, the tricklers too.
        deadline = opened + server.DEFAULT_HEADER_TIMEOUT + GRACE
        open_ones = dict(enumerate(slow))
        answers: dict[int, bytes] = {}
        while open_ones and time.monotonic() < deadline:
            for i, sock in list(open_ones.items()):
                closed, data = _closed(sock)
                answers[i] = answers.get(i, b"") + data
                if closed:
                    del open_ones[i]
                elif i % 3 == 2:
                    try:
                        sock.send(b"x")
                    except OSError:
                        pass
            time.sleep(1.0)
        assert not open_ones, f"{len(open_ones)} slow connections still open"
        for i, data in answers.items():
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), (i, data[:300])
            assert json.loads(body)["error"]["code"] == "invalid_request"
        assert api.alive()
        assert requests.get(listing, headers=auth, timeout=5).status_code == 200
    finally:
        for sock in slow:
            sock.close()
