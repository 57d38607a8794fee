"""The web console at ``/ui/``: server-rendered pages of one Space (docs/spec/host-features.md#hf-console).

Thin like the rest of ``host_api``: each view resolves the signed-in Space
(``host_api.ui.session``), reads through the services (``services.console`` for lists and
counts the JSON API has no call for; the instance, event, progress, stop, tenant-log and cron-run
services for the rest) and renders a Jinja template. Actions call the same service functions as the JSON
routes, so their errors are the API's (``code: message``), shown on the page. A workflow's URLs
name it (``/ui/workflows/order-fulfilment``; its UID works too). Instance ids travel
in the query string (``?id=``), where any Unicode id survives without the raw-segment routing of
the JSON instance routes (``host_api.routing``).

| page | what |
| --- | --- |
| ``GET /ui/`` | sign in with a Space token (``POST /ui/sign-in``; ``POST /ui/sign-out``) |
| ``GET /ui/workflows`` | DurableWorkflows: ready, instance counts by status |
| ``GET /ui/go?id=`` | go to the instance with that id, in whichever workflow has it |
| ``GET /ui/workflows/{name}?status=…&status=…&prefix=&from=&to=&page=&at=`` | instances, newest first, keyset-paged, live |
| ``GET /ui/workflows/{name}/instance?id=`` | one instance; ``…/live`` for its live part |
| ``GET /ui/workflows/{name}/instance/history?id=&page=`` | its whole history, paged |
| ``GET /ui/workflows/{name}/instance/logs?id=&step=&attempt=&stream=&before=`` | its log lines, filtered, paged back |
| ``POST /ui/workflows/{name}/instances`` | start an instance (id, params) |
| ``POST /ui/workflows/{name}/instance/events?id=`` / ``…/terminate?id=`` | actions (terminate with a reason) |
| ``GET /ui/triggers``, ``GET /ui/triggers/{uid}?page=`` | cron triggers and a runs ledger |
| ``GET /ui/triggers/{uid}/run?t=`` | one run's log lines |
| ``GET /ui/operations?page=`` | Operations, newest first |
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.parse

import flask
import markupsafe
from werkzeug import exceptions as wz
from werkzeug.wrappers import Response

from host_api import errors, schemas
from host_api.ui import logs as console_logs
from host_api.ui import session as console_session
from host_api.ui import timeline as console_timeline
from host_api.ui import usage as console_usage
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
    instances,
    quotas,
)
from services.instance_pages import PageRequest
from takohost.domain import deepjson, divergence, jsonstrict
from takohost.domain import tenant_logs as tenant_log_domain

log = logging.getLogger(__name__)

bp = flask.Blueprint(
    "ui", __name__, url_prefix="/ui", template_folder="templates", static_folder="static"
)

#: How often a live instance page asks whether something changed (milliseconds).
POLL_MS = 1000
#: How often an instance list's first page refreshes itself (milliseconds).
LIST_REFRESH_MS = 5000
#: History events listed on the instance page (the newest); the history page lists them all.
HISTORY_SHOWN = 200
#: History events per page of the history page.
HISTORY_PAGE = 500
#: Step lanes drawn in the timeline (the most recent steps; the table below lists every segment).
MAX_LANES = 60
#: Failed attempts listed under "Attempt errors" on the instance page (the newest; the history
#: lists them all).
ATTEMPT_ERRORS_SHOWN = 50
#: Notices after a successful action (Post/Redirect/Get), by the ``done`` query value.
NOTICES = {"event": "Event sent.", "terminate": "Instance terminated.", "start": "Instance started."}


def _user() -> console_session.SignedIn:
    return console_session.current()


def _render(template: str, http_status: int = 200, **context) -> Response:
    user = getattr(flask.g, "console_user", None)
    html = flask.render_template(template, user=user, statuses=inst_models.STATUSES, **context)
    return flask.make_response(html, http_status)


@bp.app_template_filter("when")
def _when(value: dt.datetime | str | None) -> str:
    """An instant as ``2026-12-01 16:20:05.123 UTC`` (``""`` for none)."""
    return console_where.when_text(value)


@bp.app_template_filter("ago")
def _ago(value: dt.datetime | str | None) -> markupsafe.Markup:
    """An instant as ``<time>`` reading "3 min ago" / "in 2 h", its UTC instant (to the
    millisecond) on hover; the console's script keeps the text current. ``""`` for none."""
    if value is None or value == "":
        return markupsafe.Markup("")
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return markupsafe.Markup("{}").format(value)
    utc = value.astimezone(dt.UTC)
    return markupsafe.Markup('<time datetime="{}" title="{}" data-rel>{}</time>').format(
        utc.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        console_where.when_text(utc),
        console_where.relative_text(utc, now=utcnow()),
    )


@bp.app_template_filter("pretty")
def _pretty(value: object) -> str:
    """A document as indented JSON (one compact line when it nests too deep for the standard
    encoder: documents have no depth limit)."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except RecursionError:
        return deepjson.dumps(value)


@bp.app_template_filter("json")
def _json(value: object) -> str:
    """A document as one line of JSON text, characters as they are (``<lambda>``, ``'``, ``é``):
    Jinja's autoescape makes it safe in HTML, unlike ``tojson``, whose ``\\u003c`` escapes are for
    a ``<script>`` and show as escape codes in a page (docs/spec/host-features.md#hf-console)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except RecursionError:
        return deepjson.dumps(value)


@bp.app_template_filter("duration")
def _duration(seconds: float) -> str:
    return console_timeline.duration_text(seconds)


@bp.app_template_global("instance_url")
def instance_url(uid: str, instance_id: str, endpoint: str = "ui.instance_page", **extra) -> str:
    """The console URL of an instance page (or of one of its actions)."""
    return flask.url_for(endpoint, ref=uid, id=instance_id, **extra)


@bp.after_request
def _headers(response: Response) -> Response:
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
def _not_signed_in(exc: Exception) -> Response:
    """The sign-in page, which brings a GET back to the page asked for (``?next=``)."""
    if flask.request.endpoint == "ui.instance_live":
        return flask.make_response(flask.jsonify({"signedOut": True}), 401)
    if flask.request.method == "GET" and flask.request.endpoint != "ui.index":
        target = flask.request.full_path.rstrip("?")
        return flask.redirect(flask.url_for("ui.index", next=target), 303)
    return flask.redirect(flask.url_for("ui.index"), 303)


def _next_page(value: str | None) -> str:
    """Where to go after signing in: ``value`` when it is a path of this console (``/ui/…``, no
    scheme, host or backslash: never another site, an open redirect), else the workflows page."""
    if value:
        parts = urllib.parse.urlsplit(value)
        if (not parts.scheme and not parts.netloc and parts.path.startswith("/ui/")
                and "\\" not in value and not value.startswith("//")):
            return value
    return flask.url_for("ui.workflows")


@bp.errorhandler(DomainError)
def _domain_error(exc: DomainError) -> Response:
    return _render("error.html", _status(exc), code=exc.code, message=exc.message)


@bp.errorhandler(Exception)
def _unexpected(exc: Exception) -> Response:
    """Anything else is a page too (a person reads it), never a stack trace."""
    if isinstance(exc, wz.HTTPException):
        return _render("error.html", exc.code or 400, code=str(exc.code), message=exc.description or exc.name)
    log.exception("console page failed", extra={"path": flask.request.path})
    return _render("error.html", 500, code="internal_error", message="the console could not show this page")


@bp.errorhandler(PermissionError)
def _forbidden(exc: PermissionError) -> Response:
    return _render("error.html", 403, code="forbidden", message=str(exc))


# --------------------------------------------------------------------------------------------
# sign in / out


@bp.get("/", strict_slashes=False)
def index() -> Response:
    """The sign-in page, or the workflows page when already signed in."""
    next_page = flask.request.args.get("next", "")
    try:
        _user()
    except console_session.NotSignedIn:
        return _render("signin.html", next_page=next_page)
    return flask.redirect(_next_page(next_page), 303)


@bp.post("/sign-in")
def sign_in() -> Response:
    """Check the posted token; on success set the cookie and go to the page asked for before
    signing in (``next``), else the workflows page (only a form of this site: no login CSRF)."""
    console_session.check_origin(allow_null=False)
    token = flask.request.form.get("token", "").strip()
    next_page = flask.request.form.get("next", "")
    response = flask.redirect(_next_page(next_page), 303)
    if not token or not console_session.sign_in(response, token):
        return _render("signin.html", 401, error="That token is not valid for any Space.", next_page=next_page)
    return response


@bp.post("/sign-out")
def sign_out() -> Response:
    """End the session and clear the cookie (CSRF-checked, so another site cannot sign you out)."""
    user = _user()
    console_session.check_post(user)
    response = flask.redirect(flask.url_for("ui.index"), 303)
    console_session.sign_out(response, user)
    return response


# --------------------------------------------------------------------------------------------
# workflows and instances


@bp.get("/workflows")
def workflows() -> Response:
    """Every DurableWorkflow of the Space with ``ready`` and its instance counts by status."""
    user = _user()
    with models_db.session_scope() as session:
        rows = console.workflows_txn(session, space=user.space)
    usage_rows = console_usage.rows(quotas.usage(user.space))
    return _render("workflows.html", workflows=rows, usage_rows=usage_rows)


def _workflow_ids(user: console_session.SignedIn, ref: str) -> tuple[str, str]:
    """``(uid, name)`` of the Space's DurableWorkflow named (or with UID) ``ref`` (``not_found``)."""
    with models_db.session_scope() as session:
        workflow = console.workflow_by_ref_txn(session, space=user.space, ref=ref)
        return workflow.uid, workflow.name


@bp.get("/go")
def go_to_instance() -> Response:
    """"Go to instance": the instance with id ``?id=`` in any workflow of the Space (the header's
    search box, ``/`` focuses it): its page when one workflow has it, a list to choose from when
    several do, a 404 page saying so when none does."""
    user = _user()
    instance_id = flask.request.args.get("id", "").strip()
    if not instance_id:
        return flask.redirect(flask.url_for("ui.workflows"), 303)
    with models_db.session_scope() as session:
        found = console.find_instance_txn(session, space=user.space, instance_id=instance_id)
    if len(found) == 1:
        return flask.redirect(instance_url(found[0]["workflowName"], found[0]["id"]), 303)
    return _render("go.html", 200 if found else 404, instance_id=instance_id, found=found)


@bp.get("/workflows/<ref>")
def instances_page(ref: str) -> Response:
    """A workflow's instances, newest first, filtered by ``status`` and ``prefix``, keyset-paged."""
    return _instances_response(_user(), ref)


def _instances_response(
    user: console_session.SignedIn, ref: str, *, status: int = 200, start_error: str | None = None,
    start_form: dict | None = None,
) -> Response:
    args = flask.request.args
    statuses = [s for s in args.getlist("status") if s]
    prefix = args.get("prefix") or None
    page = args.get("page") or None
    since, until = _instant_arg("from"), _instant_arg("to")
    try:
        at = max(0, int(args.get("at") or 0)) if page else 0
    except ValueError:
        at = 0
    with models_db.session_scope() as session:
        workflow = console.workflow_by_ref_txn(session, space=user.space, ref=ref)
        uid, name = workflow.uid, workflow.name
        counts = console.status_counts_txn(session, workflow_uid=uid)
        deployed = console.deployed_versions_txn(session, space=user.space, worker_uid=workflow.worker_uid)
        rows, next_page = console.instance_page_txn(
            session, space=user.space, workflow_uid=uid, status=statuses, prefix=prefix, page_token=page,
            created_after=since, created_before=until,
        )
    filters = {"status": statuses, "prefix": prefix or "", "from": args.get("from") or "", "to": args.get("to") or ""}
    total = None if (prefix or since or until) else sum(n for s, n in counts.items() if not statuses or s in statuses)
    return _render(
        "instances.html",
        status,
        uid=name,
        workflow_uid=uid,
        name=name,
        counts=counts,
        deployed=deployed,
        instances=rows,
        selected=statuses,
        prefix=prefix or "",
        filters=filters,
        filter_args={k: v for k, v in filters.items() if v},
        filtered=bool(statuses or prefix or since or until),
        next_page=next_page,
        paged=page is not None,
        at=at,
        total=total,
        now=utcnow(),
        refresh_ms=LIST_REFRESH_MS,
        start_error=start_error,
        start_form=start_form or {},
    )


def _instant_arg(name: str) -> dt.datetime | None:
    """A ``datetime-local`` query value (``2026-12-01T16:20``, read as UTC) or an RFC 3339 one."""
    text = flask.request.args.get(name) or ""
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise DomainError("invalid_request", f"{name} is not a date and time ({text!r})") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


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


def _progress(user: console_session.SignedIn, uid: str, instance_id: str, *, terminal: bool) -> dict:
    """The progress body of a live instance, as the API answers it (``{}`` for an ended one, or one
    gone since)."""
    if terminal:
        return {}
    try:
        answer = instance_progress.progress(space=user.space, workflow_uid=uid, instance_id=instance_id)
        return schemas.InstanceProgress().dump(answer)
    except DomainError:  # gone since the page's other reads
        return {}


def _instance_context(user: console_session.SignedIn, ref: str, instance_id: str) -> dict:
    """What the instance page shows; ``uid`` in it is the workflow's name (its URLs' reference)."""
    with models_db.session_scope() as session:
        workflow = console.workflow_by_ref_txn(session, space=user.space, ref=ref)
        uid, name = workflow.uid, workflow.name
        detail = console.instance_detail_txn(
            session, space=user.space, workflow_uid=uid, instance_id=instance_id
        )
        log_tail = console.instance_log_tail_txn(session, instance_pk=detail["pk"])
    events, history_cut = detail["history"], detail["historyCut"]
    inbox = detail["inbox"]
    terminal = detail["status"] in inst_models.TERMINAL_STATUSES
    now = utcnow()
    chart = console_timeline.build(events, now=now, terminal=terminal)
    hidden_lanes = console_timeline.keep_recent_lanes(chart, MAX_LANES)
    progress = _progress(user, uid, instance_id, terminal=terminal)
    in_flight = console_where.in_flight(progress)
    if in_flight is not None:
        console_timeline.add_in_flight(chart, name=in_flight["name"], attempt=in_flight["attempt"],
                                       since=in_flight["since"], now=now)
    failures = console_where.attempt_errors(events)
    version = console.page_version(detail["status"], detail["nextEventId"], detail["inboxCount"], detail["stopping"],
                                   log_tail["latestSeq"])
    return {
        "uid": name,
        "workflow_uid": uid,
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
        "attempt_errors": failures[-ATTEMPT_ERRORS_SHOWN:],
        "attempt_errors_total": len(failures),
        "diverged": divergence.divergence_text(events),
        "where": console_where.where_text(progress) if progress else None,
        "in_flight": in_flight,
        "now": now,
        "logs": log_tail,
        "logs_text": "\n".join(console_logs.line_text(line) for line in log_tail["lines"]),
        "terminal": terminal,
        "version": version,
        "poll_ms": POLL_MS,
    }


@bp.get("/workflows/<ref>/instance")
def instance_page(ref: str) -> Response:
    """One instance: status, params, output or error, timeline, history, inbox, logs, actions."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    context = _instance_context(user, ref, instance_id)
    notice = NOTICES.get(flask.request.args.get("done", ""))
    return _render("instance.html", notice=notice, action_error=None, form={}, **context)


@bp.get("/workflows/<ref>/instance/history")
def history_page(ref: str) -> Response:
    """An instance's whole history, oldest first, :data:`HISTORY_PAGE` events a page (the history
    service of ``GET …/history``, with its page tokens)."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    page = PageRequest(token=flask.request.args.get("page") or None, limit=HISTORY_PAGE)
    with models_db.session_scope() as session:
        workflow = console.workflow_by_ref_txn(session, space=user.space, ref=ref)
        uid, name = workflow.uid, workflow.name
    body = instance_history.history(space=user.space, workflow_uid=uid, instance_id=instance_id, page=page)
    return _render(
        "history.html",
        uid=name,
        name=name,
        instance_id=instance_id,
        events=body.events,
        next_page=body.next_page_token,
        paged=page.token is not None,
    )


@bp.get("/workflows/<ref>/instance/logs")
def logs_page(ref: str) -> Response:
    """An instance's log lines, newest last, :data:`services.console.LOG_PAGE` a page, filtered by
    ``step``, ``attempt`` and ``stream``; ``before`` (a line's ``seq``) pages back past any cap."""
    user = _user()
    args = flask.request.args
    instance_id = args.get("id", "")
    filters = {"step": args.get("step") or None, "stream": args.get("stream") or None}
    try:
        attempt = int(args["attempt"]) if args.get("attempt") else None
        before = int(args["before"]) if args.get("before") else None
    except ValueError:
        raise DomainError("invalid_request", "attempt and before are whole numbers") from None
    if filters["stream"] is not None and filters["stream"] not in tenant_log_domain.STREAMS:
        raise DomainError("invalid_request", f"stream is one of {', '.join(tenant_log_domain.STREAMS)}")
    with models_db.session_scope() as session:
        workflow = console.workflow_by_ref_txn(session, space=user.space, ref=ref)
        instance_id = instance_common.id_or_error(instance_id, what="instance id")
        row = instance_common.instance_txn(session, workflow_uid=workflow.uid, instance_id=instance_id)
        steps = console.step_names_txn(session, instance_pk=row.pk)
        page = console.instance_log_tail_txn(
            session, instance_pk=row.pk, limit=console.LOG_PAGE, attempt=attempt, before=before, **filters
        )
    return _render(
        "logs.html",
        uid=workflow.name,
        name=workflow.name,
        instance_id=instance_id,
        steps=steps,
        streams=tenant_log_domain.STREAMS,
        filters={**filters, "attempt": attempt},
        filter_args={k: v for k, v in {**filters, "attempt": attempt}.items() if v is not None},
        page=page,
        text="\n".join(console_logs.line_text(line) for line in page["lines"]),
        paged=before is not None,
    )


@bp.get("/workflows/<ref>/instance/live")
def instance_live(ref: str) -> Response:
    """The live part of an instance page: ``204`` while ``v`` is still current, else
    ``{"v", "html", "terminal"}`` (the page's script swaps ``html`` in)."""
    user = _user()
    instance_id = flask.request.args.get("id", "")
    with models_db.session_scope() as session:
        workflow_uid = console.workflow_by_ref_txn(session, space=user.space, ref=ref).uid
        version = console.instance_version_txn(
            session, space=user.space, workflow_uid=workflow_uid, instance_id=instance_id
        )
    if version == flask.request.args.get("v"):
        return flask.make_response("", 204)
    context = _instance_context(user, ref, instance_id)
    html = flask.render_template("_instance_live.html", user=user, **context)
    return flask.jsonify({"v": context["version"], "html": html, "terminal": context["terminal"]})


def _action_failed(
    user: console_session.SignedIn, ref: str, instance_id: str, *, message: str, status: int, form: dict
) -> Response:
    """The instance page again, with the refusal shown plainly and the form as it was sent."""
    context = _instance_context(user, ref, instance_id)
    return _render("instance.html", status, notice=None, action_error=message, form=form, **context)


@bp.post("/workflows/<ref>/instance/events")
def send_event(ref: str) -> Response:
    """Send the form's event (type + JSON payload) through the sendEvent service."""
    user = _user()
    console_session.check_post(user)
    instance_id = flask.request.args.get("id", "")
    uid, ref = _workflow_ids(user, ref)
    form = {"type": flask.request.form.get("type", ""), "payload": flask.request.form.get("payload", "")}
    payload = instance_common.ABSENT
    if form["payload"].strip():
        try:
            payload = jsonstrict.loads_strict(form["payload"].encode("utf-8", "surrogatepass"))
        except ValueError as exc:
            message = f"invalid_json: the payload is not valid JSON ({exc})"
            return _action_failed(user, ref, instance_id, message=message, status=400, form=form)
    try:
        instance_events.send_event(
            space=user.space, workflow_uid=uid, instance_id=instance_id, event_type=form["type"], payload=payload
        )
    except DomainError as exc:
        return _action_failed(
            user, ref, instance_id, message=f"{exc.code}: {exc.message}", status=_status(exc), form=form
        )
    return flask.redirect(instance_url(ref, instance_id, done="event"), 303)


@bp.post("/workflows/<ref>/instance/terminate")
def terminate(ref: str) -> Response:
    """Terminate the instance through the terminate service (waits until the stop is proven), with
    the form's reason and the console's Space as the actor, both recorded in ``InstanceTerminated``."""
    user = _user()
    console_session.check_post(user)
    instance_id = flask.request.args.get("id", "")
    uid, ref = _workflow_ids(user, ref)
    reason = flask.request.form.get("reason", "").strip() or None
    try:
        instance_stop.terminate(
            space=user.space, workflow_uid=uid, instance_id=instance_id, reason=reason,
            by=f"console (Space {user.space})",
        )
    except DomainError as exc:
        return _action_failed(
            user, ref, instance_id, message=f"{exc.code}: {exc.message}", status=_status(exc),
            form={"reason": reason or ""},
        )
    return flask.redirect(instance_url(ref, instance_id, done="terminate"), 303)


@bp.post("/workflows/<ref>/instances")
def start_instance(ref: str) -> Response:
    """Start an instance with the form's id (optional) and params (a JSON object, optional) through
    the create service of ``POST …/instances``; its page on success, the list with the error and
    the form as sent otherwise."""
    user = _user()
    console_session.check_post(user)
    uid, name = _workflow_ids(user, ref)
    form = {"id": flask.request.form.get("id", "").strip(), "params": flask.request.form.get("params", "")}
    try:
        params = instance_common.ABSENT
        if form["params"].strip():
            try:
                params = jsonstrict.loads_strict(form["params"].encode("utf-8", "surrogatepass"))
            except ValueError as exc:
                raise DomainError("invalid_json", f"the params are not valid JSON ({exc})") from None
        new_id = instances.create(space=user.space, workflow_uid=uid, instance_id=form["id"] or None, params=params)
    except DomainError as exc:
        return _instances_response(
            user, name, status=_status(exc), start_error=f"{exc.code}: {exc.message}", start_form=form
        )
    return flask.redirect(instance_url(name, new_id, done="start"), 303)


def _status(exc: DomainError) -> int:
    return errors.STATUS_BY_CODE.get(exc.code, 400)


# --------------------------------------------------------------------------------------------
# cron triggers and Operations


@bp.get("/triggers")
def triggers() -> Response:
    """Every WorkerCronTrigger of the Space: expression and ``nextMatchAt``."""
    user = _user()
    with models_db.session_scope() as session:
        rows = console.triggers_txn(session, space=user.space, now=utcnow())
        last = console.last_runs_txn(session, trigger_uids=[t["uid"] for t in rows])
    return _render("triggers.html", triggers=rows, last=last)


@bp.get("/triggers/<uid>")
def trigger_page(uid: str) -> Response:
    """A trigger's runs ledger, newest first: deliveries, outcomes, errors, skip reasons, logs."""
    user = _user()
    page = flask.request.args.get("page") or None
    now = utcnow()
    with models_db.session_scope() as session:
        trigger = console.trigger_txn(session, space=user.space, uid=uid, now=now, upcoming=console.UPCOMING)
        ledger = cron_runs.list_runs_txn(session, space=user.space, trigger_uid=uid, page_token=page)
    for run in ledger["runs"]:
        if run.get("outcome") != "skipped":
            run["late"] = console.lateness_text(run, now=now)
    return _render(
        "trigger.html",
        trigger=trigger,
        runs=ledger["runs"],
        next_page=ledger.get("nextPageToken"),
        paged=page is not None,
    )


@bp.get("/triggers/<uid>/run")
def run_page(uid: str) -> Response:
    """One run of a trigger (``?t=`` its ``scheduledTime`` as the ledger writes it): the instances
    its handler started, linked, and the log lines of its deliveries (the service of the API's
    ``…/runs/{scheduledTime}/logs``). 404 for a time at which the trigger has no run."""
    user = _user()
    scheduled = flask.request.args.get("t", "")
    with models_db.session_scope() as session:
        trigger = console.trigger_txn(session, space=user.space, uid=uid, now=utcnow())
        kind = console.run_kind_txn(session, trigger_uid=uid, scheduled_time=scheduled)
        started = console.run_instances_txn(session, space=user.space, trigger_uid=uid, scheduled_time=scheduled)
    if kind is None:
        raise DomainError("not_found", f"trigger {trigger['name']} has no run scheduled at {scheduled!r}")
    logs = console_logs.run_logs(space=user.space, trigger_uid=uid, scheduled_time=scheduled)
    return _render("run.html", trigger=trigger, scheduled=scheduled, logs=logs, kind=kind, started=started)


@bp.get("/operations")
def operations_page() -> Response:
    """The Space's Operations, newest first, with state, effect and error."""
    user = _user()
    page = flask.request.args.get("page") or None
    with models_db.session_scope() as session:
        rows, next_page = console.operations_page_txn(session, space=user.space, page_token=page)
    answer = schemas.OperationView()
    shown = [
        {**answer.dump(row.operation), "resourceName": row.resource_name, "resourceForm": row.resource_form}
        for row in rows
    ]
    return _render("operations.html", operations=shown, next_page=next_page, paged=page is not None)
