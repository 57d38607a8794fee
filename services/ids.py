"""Host-generated identifiers: resource UIDs and Operation ids (docs/spec/http-api.md#api-res, docs/spec/http-api.md#api-op).

The host makes every UID and Operation id itself, as the canonical lowercase text of a random
UUID (``3f2b…-…``, 36 characters). A value of any other shape therefore names nothing, and is
answered as such (``404 not_found``, or ``404 reference_not_found`` inside a spec) *before* it
reaches the database — which matters because a path or body may carry characters a database
cannot hold at all (Postgres ``text`` rejects U+0000, which used to surface as a 500).

Instance ids are not host-generated (any 1–256 Unicode scalar values, API-inst-id): this module
is not for them.
"""

from __future__ import annotations

import re
import uuid

from models.errors import DomainError

#: The only shape :func:`new_id` produces (and so the only one any lookup can find).
HOST_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: ``HOST_ID_RE`` for documents (OpenAPI ``pattern``, ECMA 262).
HOST_ID_PATTERN = "^" + HOST_ID_RE.pattern + "$"


def new_id() -> str:
    """A fresh resource UID or Operation id: canonical lowercase UUID4 text (36 characters)."""
    return str(uuid.uuid4())


def is_host_id(value: object) -> bool:
    """Whether ``value`` is a ``str`` of the shape :func:`new_id` produces (pure, total)."""
    return type(value) is str and HOST_ID_RE.fullmatch(value) is not None


def require_host_id(value: object, *, what: str = "resource", code: str = "not_found") -> str:
    """Return ``value`` if :func:`is_host_id`; otherwise raise the "no such thing" error.

    ``what`` names the thing in the message (``"resource"``, ``"Operation"``); ``code`` is
    ``not_found`` for a path id and ``reference_not_found`` for a spec reference. The message
    never echoes the value (it may hold control characters).

    Raises:
        DomainError: ``code`` (404).
    """
    if not is_host_id(value):
        raise DomainError(code, f"no such {what} in this Space (not an id this host issued)")
    return value  # type: ignore[return-value]
