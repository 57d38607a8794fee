"""Request bodies (docs/spec/http-api.md API-json, §2.4) and Idempotency-Key fingerprints (§2.3 API-op).

Every route reads its body through :func:`raw_body` (directly or via :func:`json_body`), which
reads the WSGI input itself with a hard limit of ``MAX_CONTENT_LENGTH`` bytes: more is
``413 document_too_large`` whether the size was announced by ``Content-Length`` or only found
while reading a chunked body. (Werkzeug's own reader stops at the limit *without* an error for a
body of unknown length, so an oversized chunked body used to be silently truncated.)
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import typing

import flask
import rfc8785

from host_api import admission
from host_api.errors import ApiError
from takohost.domain import jsonstrict

log = logging.getLogger(__name__)

_KEY_RE = re.compile(r"[\x20-\x7e]{1,255}")
#: Bytes asked of the input stream per read.
_READ_CHUNK = 64 * 1024
#: Where :func:`raw_body` keeps the bytes it read, on ``flask.g``.
_CACHE = "_takohost_raw_body"


def _too_large(limit: int) -> ApiError:
    return ApiError("document_too_large", f"request body exceeds {limit} bytes")


def raw_body() -> bytes:
    """The request body, read once per request and at most ``MAX_CONTENT_LENGTH`` bytes.

    With ``Content-Length``: a value above the limit is refused before reading, and exactly that
    many bytes are read. Without it (``Transfer-Encoding: chunked``, where the server sets
    ``wsgi.input_terminated``): at most limit + 1 bytes are read, and reading the extra byte
    means the body is too large. A body of unknown length on a server that cannot terminate the
    stream is treated as empty (Werkzeug's safe fallback). Afterwards ``request.get_data()``
    returns the same bytes; call this (not ``get_data``) first, so that the limit applies.

    Raises:
        ApiError: ``document_too_large`` (413); ``invalid_request`` when the stream breaks off or
            is malformed (a bad chunk, a body shorter than its ``Content-Length``).
    """
    cached = getattr(flask.g, _CACHE, None)
    if cached is not None:
        return cached
    request = flask.request
    limit = int(flask.current_app.config["MAX_CONTENT_LENGTH"])
    length = request.content_length
    if length is not None:
        if length > limit:
            raise _too_large(limit)
        want = length
    elif request.environ.get("wsgi.input_terminated"):
        want = limit + 1
    else:
        want = 0
    chunks: list[bytes] = []
    total = 0
    stream = request.environ["wsgi.input"]
    try:
        while total < want:
            chunk = stream.read(min(_READ_CHUNK, want - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except Exception as exc:  # the server's parser (bad chunk framing), a reset connection
        log.info("request body could not be read", extra={"error": type(exc).__name__})
        raise ApiError(
            "invalid_request", "the request body could not be read (malformed or cut off)"
        ) from None
    if total > limit:
        raise _too_large(limit)
    if length is not None and total < length:
        raise ApiError("invalid_request", "the request body is shorter than its Content-Length")
    data = b"".join(chunks)
    # After reading, not before: a slow sender holds a thread, never a large-body slot.
    admission.admit(total)
    setattr(flask.g, _CACHE, data)
    # Later readers through Werkzeug (``request.get_data()``, ``request.stream``) see exactly
    # these bytes, not an exhausted input; Werkzeug injects its ``stream`` the same way.
    request.__dict__["stream"] = io.BytesIO(data)
    return data


def json_body(*, required: bool = True) -> object:
    """Parse the request body strictly: NaN/Infinity, duplicate keys, lone surrogates and
    invalid UTF-8 are ``400 invalid_json``. An empty body is ``None`` when not ``required``.

    Raises:
        ApiError: ``invalid_json``; ``document_too_large`` and ``invalid_request`` from
            :func:`raw_body`.
    """
    raw = raw_body()
    if not raw:
        if required:
            raise ApiError("invalid_json", "a JSON request body is required")
        return None
    mimetype = flask.request.mimetype
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise ApiError("invalid_json", f"content type must be application/json, not {mimetype}")
    try:
        return jsonstrict.loads_strict(raw)
    except jsonstrict.StrictJSONError as exc:
        raise ApiError("invalid_json", f"request body is not valid JSON: {exc}") from None


def json_object_body() -> dict:
    """Like :func:`json_body` but the root must be an object (else ``invalid_request``)."""
    body = json_body()
    if not isinstance(body, dict):
        raise ApiError("invalid_request", "the request body must be a JSON object")
    return body


@typing.overload
def idempotency_key(*, required: typing.Literal[True] = ...) -> str: ...
@typing.overload
def idempotency_key(*, required: bool) -> str | None: ...
def idempotency_key(*, required: bool = True) -> str | None:
    """The ``Idempotency-Key`` header: 1–255 printable ASCII characters (API-op).

    Raises:
        ApiError: ``idempotency_key_required`` when missing (and required) or malformed.
    """
    key = flask.request.headers.get("Idempotency-Key")
    if key is None:
        if required:
            raise ApiError("idempotency_key_required", "this call requires an Idempotency-Key header")
        return None
    if not _KEY_RE.fullmatch(key):
        raise ApiError("idempotency_key_required", "Idempotency-Key must be 1-255 printable ASCII characters")
    return key


def request_fingerprint(body: object) -> str:
    """SHA-256 hex of method, path and the canonical JSON body (API-op: same request?).

    ``body`` is what :func:`json_body` returned (or ``None`` for "no body"). Total: computed
    before validation, it never fails on a body that parsed (see :func:`canonical_json`).
    """
    canonical = b"" if body is None else canonical_json(body)
    digest = hashlib.sha256()
    digest.update(flask.request.method.encode())
    digest.update(b"\0")
    digest.update(flask.request.path.encode("utf-8", "surrogatepass"))
    digest.update(b"\0")
    digest.update(canonical)
    return digest.hexdigest()


def canonical_json(value: object) -> bytes:
    """Canonical bytes of a parsed JSON value: RFC 8785 (JCS), extended to every integer.

    For every value ``rfc8785.dumps`` accepts, the bytes are exactly its output (so fingerprints
    stored before stay valid). Two extensions make the function total on anything
    ``jsonstrict.loads_strict`` returns: integers outside ±(2**53−1), which RFC 8785 refuses,
    are written as their exact decimal digits (distinct integers stay distinct; an integer and a
    float of the same mathematical value write the same digits, as JCS does for safe ones); and
    containers are written by an iterative loop, so nesting depth is bounded by the parser only
    (``rfc8785.dumps`` recurses once per level). Object members are sorted by the UTF-16 code
    units of their names (RFC 8785 §3.2.3).

    Raises:
        TypeError: for a value that is not parsed JSON (a tuple, bytes, a non-str key…).
        rfc8785.FloatDomainError: for NaN or ±infinity (strict JSON has neither).
    """
    out: list[bytes] = []
    # Work stack, popped from the end: bytes are written as they are, anything else is a value.
    work: list[object] = [value]
    while work:
        item = work.pop()
        kind = type(item)
        if kind is bytes:
            out.append(item)  # type: ignore[arg-type]
        elif kind is dict:
            members = list(item.items())  # type: ignore[attr-defined]
            if any(type(name) is not str for name, _ in members):
                raise TypeError("object member names must be str")
            members.sort(key=lambda member: member[0].encode("utf-16-be"))
            out.append(b"{")
            work.append(b"}")
            for index in range(len(members) - 1, -1, -1):
                name, member = members[index]
                work.append(member)
                work.append((b"," if index else b"") + rfc8785.dumps(name) + b":")
        elif kind is list:
            out.append(b"[")
            work.append(b"]")
            for index in range(len(item) - 1, -1, -1):  # type: ignore[arg-type]
                work.append(item[index])  # type: ignore[index]
                if index:
                    work.append(b",")
        elif kind is int:
            try:
                out.append(str(item).encode("ascii"))
            except ValueError:  # beyond the interpreter's int-to-str digit limit (the parser has it too)
                out.append(f"0x{item:x}".encode("ascii"))  # never a JSON number's spelling: no collision
        elif item is None or kind is bool or kind is str or kind is float:
            out.append(rfc8785.dumps(item))  # type: ignore[arg-type]
        else:
            raise TypeError(f"not a parsed JSON value: {kind.__name__}")
    return b"".join(out)
