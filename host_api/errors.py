"""The JSON error envelope and the one table from error codes to HTTP statuses (CONTRACT §2.4).

``{"error": {"code", "message", "details"?}}`` — never an HTML page, never a stack trace.
"""

from __future__ import annotations

import logging

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
    "instance_exists": 409,
    "instance_terminal": 409,
    "immutable_field": 409,
    "document_too_large": 413,
    "unsupported_media_type": 415,
    "idempotency_key_reused": 422,
    "event_queue_full": 429,
    "internal_error": 500,
    "backend_unavailable": 503,
}


class ApiError(DomainError):
    """A DomainError raised by the HTTP layer itself (bad JSON, auth, routing)."""


def error_response(code: str, message: str, details: dict | None = None) -> flask.Response:
    """Build the envelope with the status of ``code`` (500 for an unknown code)."""
    body: dict = {"code": code, "message": message}
    if details:
        body["details"] = details
    response = flask.jsonify({"error": body})
    response.status_code = STATUS_BY_CODE.get(code, 500)
    return response


def register(app: flask.Flask) -> None:
    """Install handlers so that every error leaves as the JSON envelope."""

    @app.errorhandler(DomainError)
    def _domain(exc: DomainError) -> flask.Response:
        return error_response(exc.code, exc.message, exc.details)

    @app.errorhandler(wz.RequestEntityTooLarge)
    def _too_large(exc: wz.HTTPException) -> flask.Response:
        limit = app.config.get("MAX_CONTENT_LENGTH")
        return error_response("document_too_large", f"request body exceeds {limit} bytes")

    @app.errorhandler(wz.NotFound)
    def _not_found(exc: wz.HTTPException) -> flask.Response:
        return error_response("not_found", "no such resource or route")

    @app.errorhandler(wz.MethodNotAllowed)
    def _method(exc: wz.HTTPException) -> flask.Response:
        return error_response("method_not_allowed", f"method {flask.request.method} not allowed here")

    @app.errorhandler(wz.HTTPException)
    def _http(exc: wz.HTTPException) -> flask.Response:
        response = error_response("invalid_request", exc.description or exc.name)
        response.status_code = exc.code or 400
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> flask.Response:
        log.exception("unhandled error", extra={"path": flask.request.path})
        return error_response("internal_error", "internal error; the request may not have been applied")
