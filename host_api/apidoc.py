"""What the OpenAPI document says of each operation, declared next to its view (docs/spec/host-features.md#hf-foundation).

A view is decorated with :func:`operation`; ``host_api.openapi`` walks the URL map and writes
each rule's path, methods and path parameters from the rule and the rest from the view's
:class:`Operation`: the summary, query and header parameters, the request schema, the answer's
status and schema, and the error codes (grouped by status, always with the envelope of
docs/spec/http-api.md#api-errors). The schemas are the marshmallow classes of ``host_api.schemas``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import marshmallow as ma

from host_api import schemas
from services import instance_pages, resources, tenant_logs

F = TypeVar("F", bound=Callable[..., object])

#: The view attribute holding its :class:`Operation`.
ATTRIBUTE = "__takohost_operation__"


@dataclasses.dataclass(frozen=True)
class Answer:
    """The success answer: HTTP ``status``, body ``schema`` (``None``: not a schema of ours),
    ``description`` and response ``headers`` (OpenAPI header objects by name)."""

    status: int
    schema: type[ma.Schema] | None
    description: str
    headers: dict[str, dict] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation's metadata (see :func:`operation`)."""

    summary: str
    answer: Answer
    errors: tuple[str, ...] = ()
    parameters: tuple[dict, ...] = ()
    body: type[ma.Schema] | None = None
    body_required: bool = True
    public: bool = False


def operation(
    summary: str,
    answer: Answer,
    *,
    errors: tuple[str, ...] = (),
    parameters: tuple[dict, ...] = (),
    body: type[ma.Schema] | None = None,
    body_required: bool = True,
    public: bool = False,
) -> Callable[[F], F]:
    """Decorator: attach an :class:`Operation` to a view. ``errors`` are §2.4 codes beside
    ``unauthenticated`` and ``not_found``, which every non-``public`` operation may answer;
    ``public`` operations need no token."""
    meta = Operation(summary, answer, tuple(errors), tuple(parameters), body, body_required, public)

    def attach(view: F) -> F:
        setattr(view, ATTRIBUTE, meta)
        return view

    return attach


def of(view: Callable[..., object]) -> Operation:
    """The :class:`Operation` of ``view``.

    Raises:
        LookupError: ``view`` was not decorated (every API route must be documented).
    """
    meta = getattr(view, ATTRIBUTE, None)
    if meta is None:
        raise LookupError(f"view {view.__module__}.{view.__qualname__} has no apidoc.operation")
    return meta


def ok(schema: type[ma.Schema] | None, description: str) -> Answer:
    """``200`` with ``schema``."""
    return Answer(200, schema, description)


#: ``202`` with the Operation and its ``Location`` (every resource mutation, docs/spec/http-api.md#api-op).
ACCEPTED = Answer(
    202,
    schemas.OperationView,
    "accepted: the Operation (see Location)",
    {"Location": {"schema": {"type": "string"}, "description": "/v2/spaces/{space}/operations/{id}"}},
)

IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
    "description": "same key + same request → the same Operation; another request → 422 (docs/spec/http-api.md#api-op)",
}
OPTIONAL_KEY = {**IDEMPOTENCY_KEY, "required": False}
PAGE_TOKEN = {
    "name": "pageToken",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "minLength": 1},
    "description": "the nextPageToken of the previous page, unchanged (anything else is 400 invalid_request)",
}


def _limit(maximum: int, default: int) -> dict:
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
        "description": "page size, in ASCII digits",
    }


RESOURCE_LIMIT = _limit(resources.MAX_PAGE_SIZE, resources.DEFAULT_PAGE_SIZE)
INSTANCE_LIMIT = _limit(instance_pages.MAX_PAGE, instance_pages.DEFAULT_PAGE)
LOG_LIMIT = _limit(tenant_logs.MAX_PAGE, tenant_logs.DEFAULT_PAGE)


def page(
    summary: str,
    schema: type[ma.Schema],
    *,
    limit: dict | None = None,
    filters: tuple[dict, ...] = (),
    errors: tuple[str, ...] = (),
) -> Callable[[F], F]:
    """Decorator: :func:`operation` for a paged read: ``200`` with one page of ``schema``; the query
    parameters ``filters``, then :data:`PAGE_TOKEN`, then ``limit`` (one of :data:`RESOURCE_LIMIT`,
    :data:`INSTANCE_LIMIT`, :data:`LOG_LIMIT`; ``None`` where the host sets the page size); the codes
    ``errors`` and ``invalid_request``, which every paged read answers for a ``pageToken`` the API
    did not issue (docs/spec/http-api.md#api-errors)."""
    parameters = (*filters, PAGE_TOKEN) if limit is None else (*filters, PAGE_TOKEN, limit)
    codes = (*errors, "invalid_request")
    return operation(summary, ok(schema, "one page"), parameters=parameters, errors=codes)


#: The error codes any resource mutation may answer.
MUTATION_ERRORS = (
    "invalid_json",
    "idempotency_key_required",
    "idempotency_key_reused",
    "resource_busy",
    "document_too_large",
)
