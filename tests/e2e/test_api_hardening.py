"""Bad input on the wire, through the real gunicorn server (``takohost api``): every answer is the
§2.4 JSON envelope — also the ones gunicorn writes itself before the app runs (414, 431, bad
headers) — and a chunked body over 16 MiB is ``413``, never truncated and accepted.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import uuid

import pytest
import requests

FORM = "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/"
MAX_BODY = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def host(api_server, db_url) -> dict:
    from models import db as models_db
    from services import tokens

    space = f"hard-{uuid.uuid4().hex[:8]}"
    with models_db.session_scope(db_url) as session:
        token = tokens.create_token_txn(session, space=space)
    parts = urllib.parse.urlsplit(api_server.extra["url"])
    return {
        "url": api_server.extra["url"],
        "addr": (parts.hostname, parts.port),
        "space": space,
        "token": token,
        "auth": {"Authorization": f"Bearer {token}"},
    }


def _raw(host: dict, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` bytes as they are; read the answer to the connection's end."""
    with socket.create_connection(host["addr"], timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def _get(host: dict, target: str, extra_headers: str = "") -> tuple[int, dict[str, str], bytes]:
    request = (
        f"GET {target} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {host['token']}\r\n"
        f"{extra_headers}Connection: close\r\n\r\n"
    )
    return _raw(host, request.encode("latin-1"))


def _json_error(status: int, headers: dict[str, str], body: bytes) -> dict:
    assert headers.get("content-type", "").startswith("application/json"), (status, headers, body[:300])
    error = json.loads(body)["error"]
    assert error["code"] and error["message"], error
    return error


def _names(host: dict) -> set[str]:
    listing = requests.get(
        f"{host['url']}/v2/spaces/{host['space']}/resources?limit=500", headers=host["auth"]
    )
    assert listing.status_code == 200
    return {r["name"] for r in listing.json()["resources"]}


# --- gunicorn's own error pages -------------------------------------------------------------------


def test_a_request_line_over_gunicorns_limit_is_a_json_414(host):
    status, headers, body = _get(host, f"/v2/spaces/{host['space']}/resources?pageToken=" + "A" * 9000)
    assert status == 414
    assert _json_error(status, headers, body)["code"] == "invalid_request"


def test_a_request_line_of_6000_bytes_reaches_the_app(host):
    """The default limit (4094) answered HTML 414 here; the API answers it itself now."""
    status, headers, body = _get(host, f"/v2/spaces/{host['space']}/resources?pageToken=" + "A" * 6000)
    assert status == 400
    assert _json_error(status, headers, body)["code"] == "invalid_request"


def test_the_longest_instance_id_fits_in_a_request_line(host):
    longest = urllib.parse.quote("\U0001f600" * 256, safe="")  # 3072 bytes, as one path segment
    target = (
        f"/v2/spaces/{host['space']}/resources/{uuid.uuid4()}/instances/{longest}/history?pageToken="
        + "A" * 1500
    )
    status, headers, body = _get(host, target)
    assert status in (400, 404), (status, body[:300])
    _json_error(status, headers, body)


def test_a_header_over_gunicorns_limit_is_a_json_431(host):
    status, headers, body = _get(host, f"/v2/spaces/{host['space']}/resources", f"X-Big: {'b' * 9000}\r\n")
    assert status == 431
    assert _json_error(status, headers, body)["code"] == "invalid_request"


@pytest.mark.parametrize(
    "header",
    ["Bad\x01Name: x\r\n", "Bad Name: x\r\n", "X-Ctl: a\x00b\r\n", "NoColon\r\n", " folded: x\r\n"],
    ids=["ctl-in-name", "space-in-name", "nul-in-value", "no-colon", "leading-space"],
)
def test_an_invalid_header_is_a_json_400(host, header):
    status, headers, body = _get(host, f"/v2/spaces/{host['space']}/resources", header)
    assert status == 400, (status, body[:300])
    assert _json_error(status, headers, body)["code"] == "invalid_request"


def test_an_invalid_request_line_is_a_json_400(host):
    status, headers, body = _raw(host, b"GET\x01 / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert 400 <= status < 500
    _json_error(status, headers, body)


@pytest.mark.parametrize("connection", ["close", "keep-alive"])
def test_a_malformed_chunk_is_one_json_400(host, connection):
    request = (
        f"POST /v2/spaces/{host['space']}/resources HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: Bearer {host['token']}\r\nIdempotency-Key: {uuid.uuid4()}\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: {connection}\r\n\r\n"
        "zz\r\n{}\r\n0\r\n\r\n"
    )
    status, headers, body = _raw(host, request.encode())  # the server closes: the framing is lost
    assert status == 400, (status, body[:300])
    assert body.count(b"HTTP/1.1") == 0, body  # one answer, nothing written after it
    assert _json_error(status, headers, body)["code"] == "invalid_request"


# --- the app's answers through gunicorn -----------------------------------------------------------


def _padded_create(name: str, size: int) -> bytes:
    body = json.dumps({"form": FORM, "name": name, "spec": {}}).encode()
    return body + b" " * (size - len(body))


def _chunks(payload: bytes, size: int = 1 << 20):
    for start in range(0, len(payload), size):
        yield payload[start : start + size]


def test_a_chunked_body_over_16_mib_is_413_and_creates_nothing(host):
    name = f"chunked-{uuid.uuid4().hex[:8]}"
    payload = _padded_create(name, MAX_BODY) + b"this is past the limit"
    response = requests.post(
        f"{host['url']}/v2/spaces/{host['space']}/resources",
        data=_chunks(payload),  # a generator: requests sends Transfer-Encoding: chunked
        headers={**host["auth"], "Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["code"] == "document_too_large"
    assert name not in _names(host)


def test_a_chunked_body_within_the_limit_is_accepted(host):
    name = f"chunked-{uuid.uuid4().hex[:8]}"
    response = requests.post(
        f"{host['url']}/v2/spaces/{host['space']}/resources",
        data=_chunks(_padded_create(name, 2 * 1024 * 1024)),
        headers={**host["auth"], "Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"},
        timeout=120,
    )
    assert response.status_code == 202, response.text[:300]
    assert name in _names(host)


@pytest.mark.parametrize("target", ["/v2//spaces/{space}/resources", "/v2/spaces/{space}/resources/"])
def test_slash_variants_are_json_404_through_gunicorn(host, target):
    status, headers, body = _get(host, target.format(space=host["space"]))
    assert status == 404 and "location" not in headers
    assert _json_error(status, headers, body)["code"] == "not_found"


def test_nul_in_a_path_id_is_json_404_through_gunicorn(host):
    for target in ("resources/%00", "operations/%00", "resources/%00/runs"):
        status, headers, body = _get(host, f"/v2/spaces/{host['space']}/{target}")
        assert status == 404, (target, status, body[:300])
        assert _json_error(status, headers, body)["code"] == "not_found"


def test_405_through_gunicorn_has_allow(host):
    response = requests.patch(f"{host['url']}/v2/spaces/{host['space']}/resources", headers=host["auth"])
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    assert {"GET", "POST"} <= {m.strip() for m in response.headers["Allow"].split(",")}
