"""Where a request's body ends, decided from the bytes received so far (pure; docs/spec/host-features.md#hf-neighbours).

The API's worker (``host_api/server.py``) reads a request's body in its main loop, before a
thread takes the request, so it must know how much to wait for: :func:`body_framing` reads the
head the way gunicorn's parser will (``gunicorn.http.message.Message.set_body_reader``), and
:class:`ChunkedScan` follows ``Transfer-Encoding: chunked`` framing without decoding it (the
parser decodes the same bytes later). Anything gunicorn rejects from the head alone (two
``Content-Length`` fields, one that is not a number, ``Content-Length`` with ``chunked``, a coding
other than ``chunked`` last, chunked HTTP/1.0) is :data:`PASS`: the thread gets the request at
once and gunicorn answers ``400`` without reading a body.
"""

from __future__ import annotations

import dataclasses

#: No body: the request is complete with its head.
NONE = "none"
#: ``Content-Length`` bytes follow the head.
LENGTH = "length"
#: A chunked body follows the head.
CHUNKED = "chunked"
#: gunicorn rejects the head (or its framing) without reading on: hand it over as it is.
PASS = "pass"

_HEX = frozenset(b"0123456789abcdefABCDEF")
#: Longest chunk-size line (with extensions) or trailer line followed; longer is malformed.
MAX_CHUNK_LINE = 4096


@dataclasses.dataclass(frozen=True)
class Framing:
    """How the body of a request whose head ends at ``body_start`` is delimited.

    ``kind`` is one of :data:`NONE`, :data:`LENGTH`, :data:`CHUNKED`, :data:`PASS`; ``length``
    is the ``Content-Length`` (``LENGTH`` only); ``expect_continue`` is the byte range of an
    ``Expect: 100-continue`` line of an HTTP/1.1 head (to be answered once, by the reader).
    """

    kind: str
    body_start: int = 0
    length: int = 0
    expect_continue: tuple[int, int] | None = None


def body_framing(head: bytes) -> Framing:
    """The framing of the request whose head (and maybe more) is ``head``.

    ``head`` holds at least a complete head (a blank line), else the result is :data:`PASS`
    (a head gunicorn rejects as it is: a bare LF, a request line over its limit).
    """
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return Framing(PASS)
    start = 2 if head.startswith(b"\r\n") else 0
    line_end = head.find(b"\r\n", start)
    request_line = head[start:line_end]
    http11 = request_line.endswith(b"HTTP/1.1")
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expect: tuple[int, int] | None = None
    pos = line_end + 2
    while pos < end + 2:
        nxt = head.find(b"\r\n", pos)
        name, sep, value = head[pos:nxt].partition(b":")
        if sep:
            lname, value = name.lower(), value.strip(b" \t")
            if lname == b"content-length":
                lengths.append(value)
            elif lname == b"transfer-encoding":
                codings.extend(part.strip(b" \t").lower() for part in value.split(b","))
            elif lname == b"expect" and value.lower() == b"100-continue" and http11:
                expect = (pos, nxt + 2)
        pos = nxt + 2
    body_start = end + 4
    if codings:
        if codings[-1] != b"chunked" or codings.count(b"chunked") > 1 or lengths or not http11:
            return Framing(PASS)
        return Framing(CHUNKED, body_start, expect_continue=expect)
    if not lengths:
        return Framing(NONE, body_start)
    if len(lengths) > 1 or not lengths[0].isdigit():
        return Framing(PASS)
    length = int(lengths[0])
    if length == 0:
        return Framing(NONE, body_start)
    return Framing(LENGTH, body_start, length=length, expect_continue=expect)


class ChunkedScan:
    """Follows a chunked body in a growing buffer: call :meth:`advance` after each read.

    ``decoded`` counts the chunk data bytes seen so far (what the application will read).
    """

    #: :meth:`advance` results.
    MORE, DONE, BAD, TOO_LARGE = "more", "done", "bad", "too_large"

    def __init__(self, start: int, *, limit: int) -> None:
        self.pos = start  # where the next chunk-size (or trailer) line starts
        self.limit = limit
        self.decoded = 0
        self._trailers = False

    def advance(self, buf: bytes | bytearray) -> str:
        """``DONE`` once the last chunk and its trailers are in ``buf`` (``self.pos`` is then the
        end of the request), ``TOO_LARGE`` once the chunks announce more than ``limit`` bytes,
        ``BAD`` for framing gunicorn will reject, ``MORE`` otherwise."""
        while True:
            eol = buf.find(b"\r\n", self.pos)
            if eol < 0:
                return self.BAD if len(buf) - self.pos > MAX_CHUNK_LINE else self.MORE
            if eol - self.pos > MAX_CHUNK_LINE:
                return self.BAD
            line = bytes(buf[self.pos:eol])
            if self._trailers:
                self.pos = eol + 2
                if not line:
                    return self.DONE
                continue
            size_text = line.split(b";", 1)[0].rstrip(b" \t")
            if not size_text or len(size_text) > 16 or not set(size_text) <= _HEX:
                return self.BAD
            size = int(size_text, 16)
            if self.decoded + size > self.limit:
                return self.TOO_LARGE
            if size == 0:
                self._trailers = True
                self.pos = eol + 2
                continue
            end = eol + 2 + size
            if len(buf) < end + 2:
                return self.MORE
            if buf[end:end + 2] != b"\r\n":
                return self.BAD
            self.decoded += size
            self.pos = end + 2
