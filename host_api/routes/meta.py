"""``GET /healthz`` and ``GET /v2/openapi.json`` (no token needed)."""

from __future__ import annotations

import flask
import sqlalchemy as sa

from host_api import db, openapi
from host_api.errors import ApiError

bp = flask.Blueprint("meta", __name__)


@bp.get("/healthz")
def healthz() -> flask.Response:
    """``200 {"ok": true}`` once the database answers; ``503 backend_unavailable`` otherwise."""
    try:
        with db.session() as session:
            session.execute(sa.text("SELECT 1"))
    except Exception:
        raise ApiError("backend_unavailable", "the database is unreachable") from None
    return flask.jsonify({"ok": True})


@bp.get("/v2/openapi.json", endpoint="openapi")
def openapi_document() -> flask.Response:
    """The API's OpenAPI 3 document, generated from the marshmallow schemas."""
    return flask.jsonify(openapi.document())

