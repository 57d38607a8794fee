"""The web console at ``/ui/``: server-rendered pages of one Space (issue 14).

Thin like the rest of ``host_api``: each view resolves the signed-in Space
(``host_api.ui.session``), reads through the services (``services.console`` for lists and
counts the JSON API has no call for; the instance, event, progress, stop, tenant-log and cron-run
services for the rest) and renders a Jinja template. Actions call the same service functions as the JSON
routes, so their errors are the API's (``code: message``), shown on the page. Instance ids travel
in the query string (``?id=``), where any Unicode id survives without the raw-path routing of the
JSON instance routes.

| page | what |
| --- | --- |
| ``GET /ui/`` | sign in with a Space token (``POST /ui/sign-in``; ``POST /ui/sign-out``) |
| ``GET /ui/workflows`` | DurableWorkflows: ready, instance counts by status |
| ``GET /ui/workflows/{uid}?status=&prefix=&page=`` | instances, newest first, keyset-paged |
| ``GET /ui/workflows/{uid}/instance?id=`` | one instance; ``…/live`` for its live part |
| ``GET /ui/workflows/{uid}/instance/history?id=&page=`` | its whole history, paged |
| ``POST /ui/workflows/{uid}/instance/events?id=`` / ``…/terminate?id=`` | actions |
| ``GET /ui/triggers``, ``GET /ui/triggers/{uid}?page=`` | cron triggers and a runs ledger |
| ``GET /ui/triggers/{uid}/run?t=`` | one run's log lines |
| ``GET /ui/operations?page=`` | Operations, newest first |
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import flask
from werkzeug import exceptions as wz

from host_api import errors
from host_api.ui import logs as console_logs
from host_api.ui import session as console_session
from host_api.ui import timeline as console_timeline
from host_api.ui import where as console_where
from models import db as models_db
from models import instances as inst_models
from models.base import utcnow
from models.errors import DomainError
from services import (
    console,
    cron_runs,
    instance_common,
    instance_events,
    instance_history,
    instance_progress,
    instance_stop,
)
from takohost.domain import jsonstrict

log = logging.getLogger(__name__)

bp = flask.Blueprint(
    "ui", __name__, url_prefix="/ui", template_folder="templates", static_folder="static"
)

#: How often a live instance page asks whether something changed (milliseconds).
POLL_MS = 1000
#: History events listed on the instance page (the newest); the history page lists them all.
HISTORY_SHOWN = 200
#: History events per page of the history page.
HISTORY_PAGE = 500
#: Step lanes drawn in the timeline (the most recent steps; the table below lists every segment).
MAX_LANES = 60
#: Notices after a successful action (Post/Redirect/Get), by the ``done`` query value.
NOTICES = {"event": "Event sent.", "terminate": "Instance terminated."}


def _user() -> console_session.SignedIn:
    return console_session.current()


def _render(template: str, http_status: int = 200, **context) -> flask.Response:
    user = getattr(flask.g, "console_user", None)
    html = flask.render_template(template, user=user, statuses=inst_models.STATUSES, **context)
    return flask.make_response(html, http_status)


@bp.app_template_filter("when")
def _when(value: dt.datetime | str | None) -> str:
    """An instant as ``2026-12-01 16:20:05.123 UTC`` (``""`` for none)."""
    return console_where.when_text(value)


@bp.app_template_filter("pretty")
def _pretty(value: object) -> str:
    """A document as indented JSON (one line, through the app's JSON provider, when it nests too
    deep for the standard encoder: documents have no depth limit, CONTRACT §8)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except RecursionError:
        return flask.current_app.json.dumps(value)


@bp.app_template_filter("duration")
def _duration(seconds: float) -> str:
    return console_timeline.duration_text(seconds)


@bp.app_template_global("instance_url")
def instance_url(uid: str, instance_id: str, endpoint: str = "ui.instance_page", **extra) -> str:
    """The console URL of an instance page (or of one of its actions)."""
    return flask.url_for(endpoint, uid=uid, id=instance_id, **extra)


@bp.after_request
def _headers(response: flask.Response) -> flask.Response:
    """No caching of Space data; scripts and styles from this origin only; not framable; no
    Referer to other sites."""
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["X-Content-Type-Options"] = "nosniff"
    # same-origin, not no-referrer: under no-referrer a browser sends ``Origin: null`` with its
    # own same-origin form posts, which the sign-in's origin check must refuse. Other sites still
    # get no Referer at all.
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    return response


@bp.errorhandler(console_session.NotSignedIn)
def _not_signed_in(exc: Exception) -> flask.Response:
    if flask.request.endpoint == "ui.instance_live":
        return flask.make_response(flask.jsonify({"signedOut": True}), 401)
    return flask.redirect(flask.url_for("ui.index"), 303)


@bp.errorhandler(DomainError)
def _domain_error(exc: DomainError) -> flask.Response:
    return _render("error.html", _status(exc), code=exc.code, message=exc.message)


@bp.errorhandler(Exception)
def _unexpected(exc: Exception) -> flask.Response:
    """Anything else is a page too (a person reads it), never a stack trace."""
    if isinstance(exc, wz.HTTPException):
        return _render("error.html", exc.code or 400, code=str(exc.code), message=exc.description or exc.name)
    log.exception("console page failed", extra={"path": flask.request.path})
    return _render("error.html", 500, code="internal_error", message="the console could not show this page")


@bp.errorhandler(PermissionError)
def _forbidden(exc: PermissionError) -> flask.Response:
    return _render("error.html", 403, code="forbidden", message=str(exc))


# --------------------------------------------------------------------------------------------
# sign in / out


@bp.get("/", strict_slashes=False)
def index() -> flask.Response:
    """The sign-in page, or the workflows page when already signed in."""
    try:
        _user()
    except console_session.NotSignedIn:
        return _render("signin.html")
    return flask.redirect(flask.url_for("ui.workflows"), 303)


@bp.post("/sign-in")
def sign_in() -> flask.Response:
    """Check the posted token; on success set the cookie and go to the workflows page (only a
    form of this site: no login CSRF)."""
    console_session.check_origin(allow_null=False)
    token = flask.request.form.get("token", "").strip()
    response = flask.redirect(flask.url_for("ui.workflows"), 303)
    if not token or not console_session.sign_in(response, token):
        return _render("signin.html", 401, error="That token is not valid for any Space.")
    return response


@bp.post("/sign-out")
def sign_out() -> flask.Response:
    """End the session and clear the cookie (CSRF-checked, so another site cannot sign you out)."""
    user = _user()
    console_session.check_post(user)
    response = flask.redirect(flask.url_for("ui.index"), 303)
    console_session.sign_out(response, user)
    return response


# --------------------------------------------------------------------------------------------
# workflows and instances


@bp.get("/workflows")
def workflows() -> flask.Response:
    """Every DurableWorkflow of the Space with ``ready`` and its instance counts by status."""
    user = _user()
    with models_db.session_scope() as session:
        rows = console.workflows_txn(session, space=user.space)
    return _render("workflows.html", workflows=rows)


@bp.get("/workflows/<uid>")
def instances_page(uid: str) -> flask.Response:
    """A workflow's instances, newest first, filtered by ``status`` and ``prefix``, keyset-paged."""
    user = _user()
    args = flask.request.args
    status = args.get("status") or None
    prefix = args.get("prefix") or None
    page = args.get("page") or None
    with models_db.session_scope() as session:
        workflow = console.workflow_txn(session, space=user.space, uid=uid)
        counts = console.status_counts_txn(session, workflow_uid=uid)
        rows, next_page = console.instance_page_txn(
            session, space=user.space, workflow_uid=uid, status=status, prefix=prefix, page_token=page
        )
        name = workflow.name
    return _render(
        "instances.html",
        uid=uid,
        name=name,
        counts=counts,
        instances=rows,
        status=status or "",
        prefix=prefix or "",
        next_page=next_page,
        paged=page is not None,
    )


def _traceback(events: list[dict]) -> tuple[str, str] | None:
    """``(title, text)`` of the newest traceback in the history: the ``run_threw`` of an errored
    instance, else the last failed attempt's; None when the history has none."""
    for event in reversed(events):
        attrs = event.get("attributes") or {}
        if event["eventType"] == "InstanceErrored":
            text = console_where.traceback_text(attrs)
            if text:
                return f"Traceback ({attrs.get('reason', 'errored')})", text
        elif event["eventType"] == "StepAttemptFailed" and isinstance(attrs.get("error"), dict):
            text = console_where.traceback_text(attrs["error"])
            if text:
                title = f"Traceback of the last failed attempt (“{attrs.get('name')}”, attempt {attrs.get('attempt')})"
                return title, text
    return None


def _where(user: console_session.SignedIn, uid: str, instance_id: str, *, terminal: bool) -> str | None:
    if terminal:
        return None
    try:
        body = instance_progress.progress(space=user.space, workflow_uid=uid, instance_id=instance_id)
    except DomainError:  # gone since the page's other reads
        return None
    return console_where.where_text(dict(body))


def _instance_context(user: console_session.SignedIn, uid: str, instance_id: str) -> dict:
    with models_db.session_scope() as session:
        workflow = console.workflow_txn(session, space=user.space, uid=uid)
        detail = console.instance_detail_txn(
            session, space=user.space, workflow_uid=uid, instance_id=instance_id
        )
        name = workflow.name
    events, history_cut = detail["history"], detail["historyCut"]
    inbox = detail["inbox"]
    terminal = detail["status"] in inst_models.TERMINAL_STATUSES
    chart = console_timeline.build(events, now=utcnow(), terminal=terminal)
    hidden_lanes = console_timeline.keep_recent_lanes(chart, MAX_LANES)
    logs = console_logs.instance_logs(space=user.space, workflow_uid=uid, instance_id=instance_id)
    version = console.page_version(detail["status"], detail["nextEventId"], detail["inboxCount"], detail["stopping"])
    return {
        "uid": uid,
        "name": name,
        "instance": detail,
        "events": events[-HISTORY_SHOWN:],
        "event_count": detail["nextEventId"] - 1,
        "timeline_cap": console.HISTORY_CAP,
        "history_cut": history_cut,
        "hidden_lanes": hidden_lanes,
        "inbox": inbox,
        "timeline": chart,
        "traceback": _traceback(events),
        "where": _where(user, uid, instance_id, terminal=terminal),
        "logs": logs,
        "terminal": terminal,
        "version": version,
        "poll_ms": POLL_MS,
    }


@bp.get("/workflows/<uid>/instance")
def instance_page(uid: str) -> flask.Response:
    """One instance: status, params, output or error, timeline, history, inbox, logs, actions."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    context = _instance_context(user, uid, instance_id)
    notice = NOTICES.get(flask.request.args.get("done", ""))
    return _render("instance.html", notice=notice, action_error=None, form={}, **context)


@bp.get("/workflows/<uid>/instance/history")
def history_page(uid: str) -> flask.Response:
    """An instance's whole history, oldest first, :data:`HISTORY_PAGE` events a page (the history
    service of ``GET …/history``, with its page tokens)."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    page = flask.request.args.get("page") or None
    with models_db.session_scope() as session:
        name = console.workflow_txn(session, space=user.space, uid=uid).name
    body = instance_history.history(
        space=user.space, workflow_uid=uid, instance_id=instance_id, page_token=page, limit=HISTORY_PAGE
    )
    return _render(
        "history.html",
        uid=uid,
        name=name,
        instance_id=instance_id,
        events=body["events"],
        next_page=body.get("nextPageToken"),
        paged=page is not None,
    )


@bp.get("/workflows/<uid>/instance/live")
def instance_live(uid: str) -> flask.Response:
    """The live part of an instance page: ``204`` while ``v`` is still current, else
    ``{"v", "html", "terminal"}`` (the page's script swaps ``html`` in)."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    with models_db.session_scope() as session:
        version = console.instance_version_txn(
            session, space=user.space, workflow_uid=uid, instance_id=instance_id
        )
    if version == flask.request.args.get("v"):
        return flask.make_response("", 204)
    context = _instance_context(user, uid, instance_id)
    html = flask.render_template("_instance_live.html", user=user, **context)
    return flask.jsonify({"v": context["version"], "html": html, "terminal": context["terminal"]})


def _action_failed(
    user: console_session.SignedIn, uid: str, instance_id: str, *, message: str, status: int, form: dict
) -> flask.Response:
    """The instance page again, with the refusal shown plainly and the form as it was sent."""
    context = _instance_context(user, uid, instance_id)
    return _render("instance.html", status, notice=None, action_error=message, form=form, **context)


@bp.post("/workflows/<uid>/instance/events")
def send_event(uid: str) -> flask.Response:
    """Send the form's event (type + JSON payload) through the sendEvent service."""
    user = _user()
    console_session.check_post(user)
    instance_id = flask.request.args.get("id", "")
    form = {"type": flask.request.form.get("type", ""), "payload": flask.request.form.get("payload", "")}
    payload = instance_common.ABSENT
    if form["payload"].strip():
        try:
            payload = jsonstrict.loads_strict(form["payload"].encode("utf-8", "surrogatepass"))
        except ValueError as exc:
            message = f"invalid_json: the payload is not valid JSON ({exc})"
            return _action_failed(user, uid, instance_id, message=message, status=400, form=form)
    try:
        instance_events.send_event(
            space=user.space, workflow_uid=uid, instance_id=instance_id, event_type=form["type"], payload=payload
        )
    except DomainError as exc:
        return _action_failed(
            user, uid, instance_id, message=f"{exc.code}: {exc.message}", status=_status(exc), form=form
        )
    return flask.redirect(instance_url(uid, instance_id, done="event"), 303)


@bp.post("/workflows/<uid>/instance/terminate")
def terminate(uid: str) -> flask.Response:
    """Terminate the instance through the terminate service (waits until the stop is proven)."""
    user = _user()
    console_session.check_post(user)
    instance_id = flask.request.args.get("id", "")
    try:
        instance_stop.terminate(space=user.space, workflow_uid=uid, instance_id=instance_id)
    except DomainError as exc:
        return _action_failed(
            user, uid, instance_id, message=f"{exc.code}: {exc.message}", status=_status(exc), form={}
        )
    return flask.redirect(instance_url(uid, instance_id, done="terminate"), 303)


def _status(exc: DomainError) -> int:
    return errors.STATUS_BY_CODE.get(exc.code, 400)


# --------------------------------------------------------------------------------------------
# cron triggers and Operations


@bp.get("/triggers")
def triggers() -> flask.Response:
    """Every WorkerCronTrigger of the Space: expression and ``nextMatchAt``."""
    user = _user()
    with models_db.session_scope() as session:
        rows = console.triggers_txn(session, space=user.space, now=utcnow())
    return _render("triggers.html", triggers=rows)


@bp.get("/triggers/<uid>")
def trigger_page(uid: str) -> flask.Response:
    """A trigger's runs ledger, newest first: deliveries, outcomes, errors, skip reasons, logs."""
    user = _user()
    page = flask.request.args.get("page") or None
    with models_db.session_scope() as session:
        trigger = console.trigger_txn(session, space=user.space, uid=uid, now=utcnow())
        ledger = cron_runs.list_runs_txn(session, space=user.space, trigger_uid=uid, page_token=page)
    return _render(
        "trigger.html",
        trigger=trigger,
        runs=ledger["runs"],
        next_page=ledger.get("nextPageToken"),
        paged=page is not None,
    )


@bp.get("/triggers/<uid>/run")
def run_page(uid: str) -> flask.Response:
    """One run of a trigger (``?t=`` its ``scheduledTime`` as the ledger writes it): the log lines
    of its deliveries (the service of the API's ``…/runs/{scheduledTime}/logs``)."""
    user = _user()
    scheduled = flask.request.args.get("t", "")
    with models_db.session_scope() as session:
        trigger = console.trigger_txn(session, space=user.space, uid=uid, now=utcnow())
    logs = console_logs.run_logs(space=user.space, trigger_uid=uid, scheduled_time=scheduled)
    return _render("run.html", trigger=trigger, scheduled=scheduled, logs=logs)


@bp.get("/operations")
def operations_page() -> flask.Response:
    """The Space's Operations, newest first, with state, effect and error."""
    user = _user()
    page = flask.request.args.get("page") or None
    with models_db.session_scope() as session:
        rows, next_page = console.operations_page_txn(session, space=user.space, page_token=page)
    return _render("operations.html", operations=rows, next_page=next_page, paged=page is not None)
