"""Hostile clients cannot stall the API (docs/spec/host-features.md#hf-neighbours).

The attack, as an anonymous internet client would make it: before the fix, 32 connections that
each sent a complete ``POST`` head with ``Content-Length: 1000000`` and then one body byte every
few seconds held every thread of a real ``takohost api`` (2 processes of 4 threads), and a
victim's GETs took up to 25 s or timed out. Now the API's worker reads request bodies in its
main loop, as it reads heads, under a deadline (``takohost api --body-timeout``), and a request
reaches a thread only once it is complete (``host_api/server.py``).

Here a real ``takohost api`` (default settings) gets 400 slowloris and 400 slow-body loopback
connections, half anonymous and half with the Space's token, reopened as soon as the server
closes one, for longer than both timeouts. Meanwhile a victim's GETs (fresh connections) keep a
median of at most 50 ms and none fails; a body posted at normal speed reaches the application;
every slow connection the server closed got a JSON ``408``. Bodies over the limit get a JSON
``413`` (announced or chunked), read to the end rather than reset.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse

import pytest
import requests

from host_api import app as app_module
from host_api import server
from tests.support import processes, slow_clients

pytestmark = pytest.mark.slow

#: Longer than the body timeout: attackers are cut off and come back during the measurement.
ATTACK_S = server.DEFAULT_BODY_TIMEOUT + 8


@pytest.fixture()
def api(db_url):
    slow_clients.raise_fd_limit(4096)
    process = processes.start_api()
    yield process
    process.stop()


def _addr(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname == "127.0.0.1"
    return parts.hostname, parts.port


def _json_error(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_slowloris_and_slow_bodies_do_not_stall_the_api(api, space_token):
    space, token = space_token
    url = api.extra["url"]
    listing = f"{url}/v2/spaces/{space}/resources"
    attack = slow_clients.SlowClients(_addr(url), space=space, token=token).start()
    try:
        assert attack.connect_errors == 0
        result = slow_clients.victim(listing, token=token, seconds=ATTACK_S)
        # A body sent at normal speed reaches the application (and is parsed: invalid JSON).
        posted = requests.post(listing, data=b'{"form": ', timeout=5,
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                        "Idempotency-Key": "k1"})
        assert posted.status_code == 400 and posted.json()["error"]["code"] == "invalid_json", posted.text
    finally:
        attack.stop()
    summary = result.summary()
    print(json.dumps({"victim": summary, "attack_connections_opened": attack.opened}))
    assert result.failures == [], (summary, result.failures[:5])
    assert summary["p50_ms"] <= 50, summary
    kinds = {kind for kind, _ in attack.answers}
    assert kinds == {"head", "body"}, f"the server closed no slow {({'head', 'body'} - kinds)} connection"
    for kind, answer in attack.answers:
        status, body = _json_error(answer)
        assert status == 408 and body["error"]["code"] == "invalid_request", (kind, answer[:300])
    assert api.alive()


def test_oversized_bodies_get_a_json_413_not_a_reset(api, space_token):
    space, token = space_token
    listing = f"{api.extra['url']}/v2/spaces/{space}/resources"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": "k"}
    too_big = b" " * (app_module.MAX_CONTENT_LENGTH + 1)
    announced = requests.post(listing, data=too_big, headers=headers, timeout=30)
    assert announced.status_code == 413, announced.text[:300]
    assert announced.json()["error"]["code"] == "document_too_large"

    def chunks():
        for _ in range(17):
            yield b" " * (1024 * 1024)

    chunked = requests.post(listing, data=chunks(), headers=headers, timeout=30)
    assert chunked.status_code == 413, chunked.text[:300]
    assert chunked.json()["error"]["code"] == "document_too_large"
    # Anonymous: refused for its size before anything else, the same way.
    anonymous = requests.post(listing, data=too_big, timeout=30)
    assert anonymous.status_code == 413 and anonymous.json()["error"]["code"] == "document_too_large"


def _read_all(sock: socket.socket) -> bytes:
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    return answer


def test_bodies_within_the_timeout_are_served_whole(api, space_token):
    """A body sent in pieces (in time), ``Expect: 100-continue`` (answered once) and pipelined
    requests with bodies all reach the application intact."""
    space, token = space_token
    addr = _addr(api.extra["url"])
    head = (f"POST /v2/spaces/{space}/resources HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nIdempotency-Key: k\r\n")
    body = b'{"form": '  # invalid JSON: the application parsed the whole body to say so
    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        for piece in (body[:3], body[3:]):
            time.sleep(0.7)
            sock.sendall(piece)
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400") and b"invalid_json" in answer, answer[:300]

    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(f"{head}Expect: 100-continue\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400") and b"invalid_json" in answer and b"100 Continue" not in answer

    chunked = b"3\r\n{\"f\r\n6\r\norm\": \r\n0\r\n\r\n"
    with socket.create_connection(addr, timeout=10) as sock:
        one = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
        two = f"{head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode() + chunked
        sock.sendall(one + two[:-7])
        time.sleep(0.5)
        sock.sendall(two[-7:])
        answer = _read_all(sock)
    assert answer.count(b"HTTP/1.1 400") == 2 and answer.count(b"invalid_json") == 2, answer[:800]
