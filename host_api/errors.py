"""The JSON error envelope and the one table from error codes to HTTP statuses (docs/spec/http-api.md#api-errors).

``{"error": {"code", "message", "details"?}}`` — never an HTML page, never a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import flask
from werkzeug import exceptions as wz

from models.errors import DomainError

log = logging.getLogger(__name__)

STATUS_BY_CODE: dict[str, int] = {
    "invalid_json": 400,
    "invalid_spec": 400,
    "invalid_request": 400,
    "invalid_params": 400,
    "unsupported_form": 400,
    "idempotency_key_required": 400,
    "unauthenticated": 401,
    "not_found": 404,
    "reference_not_found": 404,
    "unknown_instance": 404,
    "method_not_allowed": 405,
    "name_conflict": 409,
    "dependency_conflict": 409,
    "resource_busy": 409,
    "replay_check_failed": 409,
    "instance_exists": 409,
    "instance_terminal": 409,
    "immutable_field": 409,
    "document_too_large": 413,
    "unsupported_media_type": 415,
    "idempotency_key_reused": 422,
    "event_queue_full": 429,
    "quota_exceeded": 429,
    "internal_error": 500,
    "backend_unavailable": 503,
}


class ApiError(DomainError):
    """A DomainError raised by the HTTP layer itself (bad JSON, auth, routing).

    ``headers`` are added to the error response (e.g. ``Allow`` on a 405).
    """

    def __init__(
        self, code: str, message: str, details: dict | None = None, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(code, message, details)
        self.headers = dict(headers or {})


def method_not_allowed(allowed: Iterable[str]) -> ApiError:
    """``405 method_not_allowed`` with the ``Allow`` header listing ``allowed`` (RFC 9110 §15.5.6).

    For a view that refuses a method itself; the URL map's own 405s (every route's, the
    instance routes' too) get their ``Allow`` header from Werkzeug.
    """
    methods = sorted(set(allowed) | ({"HEAD"} if "GET" in allowed else set()))
    return ApiError(
        "method_not_allowed",
        f"method {flask.request.method} not allowed here; allowed: {', '.join(methods)}",
        headers={"Allow": ", ".join(methods)},
    )


def error_response(code: str, message: str, details: dict | None = None) -> flask.Response:
    """Build the envelope with the status of ``code`` (500 for an unknown code)."""
    body: dict = {"code": code, "message": message}
    if details:
        body["details"] = details
    response = flask.jsonify({"error": body})
    response.status_code = STATUS_BY_CODE.get(code, 500)
    return response


def _code_for_status(status: int) -> str:
    """The §2.4 code for a bare HTTP status (responses not made by :func:`error_response`)."""
    return {
        404: "not_found",
        405: "method_not_allowed",
        413: "document_too_large",
        415: "unsupported_media_type",
    }.get(status, "internal_error" if status >= 500 else "invalid_request")


def register(app: flask.Flask) -> None:
    """Install handlers so that every error leaves as the JSON envelope."""

    @app.errorhandler(DomainError)
    def _domain(exc: DomainError) -> flask.Response:
        response = error_response(exc.code, exc.message, exc.details)
        response.headers.update(getattr(exc, "headers", None) or {})
        return response

    @app.errorhandler(wz.RequestEntityTooLarge)
    def _too_large(exc: wz.HTTPException) -> flask.Response:
        limit = app.config.get("MAX_CONTENT_LENGTH")
        return error_response("document_too_large", f"request body exceeds {limit} bytes")

    @app.errorhandler(wz.NotFound)
    def _not_found(exc: wz.HTTPException) -> flask.Response:
        return error_response("not_found", "no such resource or route")

    @app.errorhandler(wz.MethodNotAllowed)
    def _method(exc: wz.MethodNotAllowed) -> flask.Response:
        allowed = sorted(exc.valid_methods or ())
        response = error_response(
            "method_not_allowed",
            f"method {flask.request.method} not allowed here; allowed: {', '.join(allowed)}",
        )
        if allowed:
            response.headers["Allow"] = ", ".join(allowed)
        return response

    @app.errorhandler(wz.HTTPException)
    def _http(exc: wz.HTTPException) -> flask.Response:
        status = exc.code or 400
        response = error_response(_code_for_status(status), exc.description or exc.name)
        response.status_code = status
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> flask.Response:
        log.exception("unhandled error", extra={"path": flask.request.path})
        return error_response("internal_error", "internal error; the request may not have been applied")

    @app.after_request
    def _never_html(response: flask.Response) -> flask.Response:
        """Last guard of "no HTML error pages, ever" (§2.4): a non-JSON response of status 300 or
        more (a Werkzeug routing redirect, an HTTPException used as a response) becomes the
        envelope. The API never redirects, so a 3xx is answered as ``404 not_found``. The web
        console's pages (blueprint ``ui``, under ``/ui/``) are HTML for people and keep theirs."""
        if response.status_code < 300 or response.mimetype == "application/json":
            return response
        if flask.request.blueprint == "ui":
            return response
        status = 404 if response.status_code < 400 else response.status_code
        replacement = error_response(
            _code_for_status(status),
            "no such resource or route" if status == 404 else f"request failed with HTTP status {status}",
        )
        replacement.status_code = status
        if "Allow" in response.headers:
            replacement.headers["Allow"] = response.headers["Allow"]
        return replacement
