"""Query-string parameters (docs/spec/http-api.md#api-errors: a malformed one is ``400 invalid_request``)."""

from __future__ import annotations

import re

import flask

from host_api.errors import ApiError
from services.instance_pages import PageRequest

#: A count parameter: ASCII digits only (``int()`` would also take ``" 5"``, ``"+5"``, ``"1_0"``
#: and non-ASCII digits, and ``str.isdigit`` takes ``"²"``, which ``int()`` then refuses).
_COUNT_RE = re.compile(r"[0-9]{1,9}")


def count_param(name: str = "limit") -> int | None:
    """The query parameter ``name`` as a non-negative ``int`` of 1–9 ASCII digits, ``None`` when
    absent. Range checks (e.g. ``limit`` 1..N) stay with the caller, which knows N.

    Raises:
        ApiError: ``invalid_request`` for anything else (empty, signs, spaces, other digits).
    """
    raw = flask.request.args.get(name)
    if raw is None:
        return None
    if _COUNT_RE.fullmatch(raw) is None:
        raise ApiError("invalid_request", f"{name} must be a positive integer written in ASCII digits")
    return int(raw)


def page() -> PageRequest:
    """The page a paged read is asked for: ``pageToken`` as sent (the read checks it) and ``limit``
    as a :func:`count_param` (the read checks its range).

    Raises:
        ApiError: ``invalid_request`` for a ``limit`` that is not ASCII digits.
    """
    return PageRequest(token=flask.request.args.get("pageToken"), limit=count_param("limit"))
