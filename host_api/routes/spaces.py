"""``GET /v2/spaces/{space}/usage``: what the Space holds against each quota (docs/spec/host-features.md#hf-neighbours).

Thin: authentication put the token's Space in ``flask.g.space``; ``services.quotas`` reads the
counters (one primary-key read) and the limits.
"""

from __future__ import annotations

import flask

from host_api import apidoc, schemas
from host_api.errors import ApiError
from services import quotas

bp = flask.Blueprint("spaces", __name__)


@bp.get("/v2/spaces/<space>/usage")
@apidoc.operation(
    "what the Space holds against each of its quotas",
    apidoc.ok(schemas.SpaceUsage, "usage and limits"),
    errors=("invalid_request",),
)
def usage(space: str) -> flask.Response:
    """``200 {"space", "quotas": {name: {"used", "limit"}}}`` (``limit`` 0: none), dumped
    through ``schemas.SpaceUsage``; ``400 invalid_request`` for any query parameter."""
    if flask.request.args:
        raise ApiError("invalid_request", f"unknown query parameter(s): {', '.join(sorted(flask.request.args))}")
    return flask.jsonify(schemas.SpaceUsage().dump(quotas.usage(space)))
