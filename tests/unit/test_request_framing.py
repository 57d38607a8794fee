"""``host_api.framing``: where a request body ends, as the API's main-loop reader sees it before
a thread takes the request (docs/spec/host-features.md#hf-neighbours). Pure."""

from __future__ import annotations

import pytest

from host_api import framing

HEAD = b"POST /v2/x HTTP/1.1\r\nHost: t\r\n"


@pytest.mark.parametrize("headers, kind, length", [
    (b"", framing.NONE, 0),
    (b"Content-Length: 0\r\n", framing.NONE, 0),
    (b"Content-Length: 12\r\n", framing.LENGTH, 12),
    (b"content-length:  7 \r\n", framing.LENGTH, 7),
    (b"Transfer-Encoding: chunked\r\n", framing.CHUNKED, 0),
    (b"Transfer-Encoding: gzip, chunked\r\n", framing.CHUNKED, 0),
    # What gunicorn rejects from the head alone: handed over without waiting for a body.
    (b"Content-Length: 5\r\nContent-Length: 5\r\n", framing.PASS, 0),
    (b"Content-Length: -1\r\n", framing.PASS, 0),
    (b"Content-Length: 0x10\r\n", framing.PASS, 0),
    (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", framing.PASS, 0),
    (b"Transfer-Encoding: chunked, gzip\r\n", framing.PASS, 0),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", framing.PASS, 0),
], ids=["none", "zero", "length", "lowercase-spaces", "chunked", "gzip-chunked", "two-lengths",
        "negative", "hex-length", "length-and-chunked", "chunked-not-last", "chunked-twice"])
def test_body_framing(headers, kind, length):
    head = HEAD + headers + b"\r\n"
    result = framing.body_framing(head + b"body")
    assert (result.kind, result.length) == (kind, length)
    if kind in (framing.LENGTH, framing.CHUNKED, framing.NONE):
        assert result.body_start == len(head)


def test_chunked_http10_and_incomplete_heads_pass():
    assert framing.body_framing(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n").kind == framing.PASS
    assert framing.body_framing(b"POST / HTTP/1.1\nHost: t\n\n").kind == framing.PASS


def test_expect_continue_is_located_on_http11_only():
    head = HEAD + b"Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n"
    span = framing.body_framing(head).expect_continue
    assert span is not None and head[span[0]:span[1]] == b"Expect: 100-Continue\r\n"
    old = head.replace(b"HTTP/1.1", b"HTTP/1.0")
    assert framing.body_framing(old).expect_continue is None


def _scan(body: bytes, *, limit: int = 100, step: int = 1) -> tuple[str, framing.ChunkedScan]:
    """Feed ``body`` ``step`` bytes at a time; the first result that is not MORE."""
    scan = framing.ChunkedScan(0, limit=limit)
    buf = bytearray()
    state = scan.MORE
    for i in range(0, len(body), step):
        buf += body[i:i + step]
        state = scan.advance(buf)
        if state != scan.MORE:
            break
    return state, scan


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_chunked_scan_finds_the_end_byte_by_byte(step):
    body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    state, scan = _scan(body + b"GET / HTTP/1.1\r\n", step=step)
    assert state == scan.DONE and scan.pos == len(body) and scan.decoded == 11


def test_chunked_scan_stops_at_the_limit_before_the_data_arrives():
    state, scan = _scan(b"65\r\n", limit=100)  # 0x65 = 101 bytes announced
    assert state == scan.TOO_LARGE
    state, scan = _scan(b"32\r\n" + b"a" * 50 + b"\r\n33\r\n", limit=100)  # 50 + 51
    assert state == scan.TOO_LARGE


@pytest.mark.parametrize("body", [
    b"zz\r\n", b"5\r\nhelloXX", b"\r\n", b"5" * 5000,
], ids=["not-hex", "no-crlf-after-data", "empty-size", "endless-size-line"])
def test_chunked_scan_reports_bad_framing(body):
    state, scan = _scan(body, step=1000)
    assert state == scan.BAD


def test_chunked_scan_waits_for_more():
    assert _scan(b"5\r\nhel")[0] == framing.ChunkedScan.MORE
    assert _scan(b"0\r\nX-Trailer: 1\r\n")[0] == framing.ChunkedScan.MORE
