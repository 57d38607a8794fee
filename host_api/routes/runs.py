"""``GET /v2/spaces/{space}/resources/{uid}/runs``: a WorkerCronTrigger's runs ledger (docs/spec/cron-trigger.md#cr-runs).

Thin: authentication put the token's Space in ``flask.g.space``; the service builds the page.
"""

from __future__ import annotations

import flask

from host_api import apidoc, db, query, schemas
from host_api.errors import ApiError
from services import cron_runs, tenant_logs

bp = flask.Blueprint("runs", __name__)


@bp.get("/v2/spaces/<space>/resources/<uid>/runs")
@apidoc.page("a WorkerCronTrigger's recorded and skipped matches, newest first (§7)", schemas.CronRunList)
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


@bp.get("/v2/spaces/<space>/resources/<uid>/runs/<scheduled_time>/logs")
@apidoc.page(
    "what one cron run's handler printed (every delivery of the match), oldest first",
    schemas.RunLogPage,
    limit=apidoc.LOG_LIMIT,
    errors=("not_found",),
)
def run_logs(space: str, uid: str, scheduled_time: str) -> flask.Response:
    """``200 {"logs": [{"time", "delivery", "stream", "message"}], "nextPageToken", "removedLines"}``:
    the tenant log lines of every delivery of the run at ``scheduled_time`` (as the runs ledger
    writes it, RFC 3339 UTC, or epoch milliseconds), oldest first (``services.tenant_logs``).

    ``404 not_found`` for a resource that is not a live WorkerCronTrigger of this Space or a time
    with no recorded match; ``400 invalid_request`` for a malformed time, ``pageToken`` or ``limit``.
    """
    if getattr(flask.g, "space", None) != space:
        raise ApiError("not_found", "no such resource or route")
    unknown = set(flask.request.args) - {"pageToken", "limit"}
    if unknown:
        raise ApiError("invalid_request", f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    page = tenant_logs.run_logs(
        space=space, trigger_uid=uid, scheduled_time=scheduled_time, page=query.page()
    )
    return flask.jsonify(schemas.RunLogPage().dump(page))
