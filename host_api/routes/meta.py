"""``GET /healthz`` and ``GET /v2/openapi.json`` (no token needed)."""

from __future__ import annotations

import flask
import sqlalchemy as sa

from host_api import apidoc, db, openapi, schemas
from host_api.errors import ApiError

bp = flask.Blueprint("meta", __name__)


@bp.get("/healthz")
@apidoc.operation(
    "liveness: the database answers", apidoc.ok(schemas.Health, "ok"), errors=("backend_unavailable",), public=True
)
def healthz() -> flask.Response:
    """``200 {"ok": true}`` once the database answers; ``503 backend_unavailable`` otherwise."""
    try:
        with db.session() as session:
            session.execute(sa.text("SELECT 1"))
    except Exception:
        raise ApiError("backend_unavailable", "the database is unreachable") from None
    return flask.jsonify(schemas.Health().dump({"ok": True}))


@bp.get("/v2/openapi.json", endpoint="openapi")
@apidoc.operation("this document", apidoc.ok(None, "OpenAPI 3 document"), public=True)
def openapi_document() -> flask.Response:
    """The API's OpenAPI 3 document, generated from the URL map and the marshmallow schemas."""
    return flask.jsonify(openapi.document())

