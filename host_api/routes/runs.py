"""``GET /v2/spaces/{space}/resources/{uid}/runs``: a WorkerCronTrigger's runs ledger (CONTRACT §7).

Thin: authentication put the token's Space in ``flask.g.space``; the service builds the page.
"""

from __future__ import annotations

import flask

from host_api import db
from host_api.errors import ApiError
from workers.services import cron_runs

bp = flask.Blueprint("runs", __name__)


@bp.get("/v2/spaces/<space>/resources/<uid>/runs")
def list_runs(space: str, uid: str) -> flask.Response:
    """``200 {"runs": [...], "nextPageToken"?}``, newest match first (recorded and skipped).

    ``404 not_found`` for a resource that is not a live WorkerCronTrigger of this Space;
    ``400 invalid_request`` for a malformed ``pageToken`` or an unknown query parameter.
    """
    unknown = set(flask.request.args) - {"pageToken"}
    if unknown:
        raise ApiError("invalid_request", f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    with db.session() as session:
        body = cron_runs.list_runs_txn(
            session, space=space, trigger_uid=uid, page_token=flask.request.args.get("pageToken")
        )
    return flask.jsonify(body)
