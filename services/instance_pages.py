"""Paging of the instance list and of an instance's history (docs/spec/http-api.md#api-inst, docs/spec/durable-workflow.md#dw-history).

A paged read (the instance list, the history, the tenant logs of ``services.tenant_logs``, and
the resource list of ``services.resources``, which keeps its own token and sizes) is asked for one page by a :class:`PageRequest`: the client's ``pageToken`` and ``limit``, as sent.

A page token is opaque to clients: unpadded URL-safe base64 of ``{"after": n}``, where ``n`` is
the last instance pk (list) or event id (history) of the previous page. :func:`decode_token`
accepts only what :func:`encode_token` can have produced, so a forged or mangled token is
``invalid_request`` (docs/spec/host-limits.md#hl-decisions), never a database error; :func:`page_size` checks ``limit``.
Pure functions: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json

from models.errors import DomainError

#: Page sizes of the list and history calls.
DEFAULT_PAGE = 100
MAX_PAGE = 1000
#: Largest ``after`` a page token may carry: instance pks are BIGINT, event ids INTEGER.
MAX_INSTANCE_PK = 2**63 - 1
MAX_EVENT_ID = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class PageRequest:
    """Which page a paged read answers: ``token`` the ``nextPageToken`` of the previous page
    (``None``: the first page), ``limit`` the page size asked for (``None``: the read's default).
    Both as the client sent them: the read checks them (:func:`decode_token` or its own token,
    :func:`page_size`), so a bad one is its ``invalid_request``."""

    token: str | None = None
    limit: int | None = None


#: The first page at the read's default size.
FIRST_PAGE = PageRequest()


def encode_token(value: int) -> str:
    """The page token that continues after ``value`` (an instance pk or event id)."""
    return base64.urlsafe_b64encode(json.dumps({"after": value}).encode()).decode().rstrip("=")


def decode_token(token: str | None, *, maximum: int) -> int | None:
    """The ``after`` of a page token; anything :func:`encode_token` cannot have produced for a
    value in ``0..maximum`` (another encoding, other keys, a number out of range) is
    ``invalid_request``, never a database error."""
    if token is None:
        return None
    try:
        if not token.isascii():
            raise ValueError
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after = data["after"]
        if type(after) is not int or not 0 <= after <= maximum or encode_token(after) != token:
            raise ValueError
        return after
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise DomainError("invalid_request", "pageToken is not a token this API issued") from None


def page_size(limit: int | None, *, default: int = DEFAULT_PAGE) -> int:
    """The page size of a ``limit`` (``None`` → ``default``); else ``invalid_request`` unless
    it is an integer ``1..MAX_PAGE`` (the tenant logs share it with their own default)."""
    if limit is None:
        return default
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise DomainError("invalid_request", f"limit must be an integer 1..{MAX_PAGE}")
    return limit
