"""Strict request-body parsing (CONTRACT API-json) and Idempotency-Key extraction (API-op)."""

from __future__ import annotations

import hashlib
import re

import flask
import rfc8785

from host_api.errors import ApiError
from takohost.domain import jsonstrict

_KEY_RE = re.compile(r"[\x20-\x7e]{1,255}")


def json_body(*, required: bool = True) -> object:
    """Parse the request body strictly: NaN/Infinity, duplicate keys, lone surrogates and
    invalid UTF-8 are ``400 invalid_json``. An empty body is ``None`` when not ``required``.

    Raises:
        ApiError: ``invalid_json``; ``unsupported_media_type`` for a non-JSON content type.
    """
    raw = flask.request.get_data(cache=True)
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
        raise ApiError("idempotency_key_required",
                       "Idempotency-Key must be 1-255 printable ASCII characters")
    return key


def request_fingerprint(body: object) -> str:
    """SHA-256 hex of method, path and the canonical JSON body (API-op: same request?)."""
    canonical = b"" if body is None else rfc8785.dumps(body)
    digest = hashlib.sha256()
    digest.update(flask.request.method.encode())
    digest.update(b"\0")
    digest.update(flask.request.path.encode("utf-8", "surrogatepass"))
    digest.update(b"\0")
    digest.update(canonical)
    return digest.hexdigest()
