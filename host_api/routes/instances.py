"""DurableWorkflow instances over HTTP (docs/spec/http-api.md#api-inst): parse, call the instance services
(``services.instances``, ``instance_events``, ``instance_history``, ``instance_stop``),
render. The same service functions serve ``env.NAME`` bindings from workflow code (§4.5).

Instance ids are 1–256 Unicode scalar values and may contain ``/``, ``%``, ``?``, spaces, emoji
or U+0000 (API-inst-id). Werkzeug decodes ``%2F`` into ``/`` before routing and merges or
redirects empty segments, so these routes are NOT matched by the URL map: a hook running after
authentication reads the raw request target (``RAW_URI`` from gunicorn and the Werkzeug server
and test client, or ``REQUEST_URI``), splits it on ``/`` and percent-decodes the id segment itself
(strict UTF-8; anything else is ``400 invalid_request``).

| method | raw path after ``/v2/spaces/{space}/resources/{uid}/instances`` | handler |
| --- | --- | --- |
| POST | (none) | create → ``201 {"id"}`` |
| GET | (none) | list (``status``, ``pageToken``, ``limit``) |
| GET | ``/{id}`` | get → ``{"id", "status", "output"?, "error"?}`` |
| POST / GET | ``/{id}/events`` | send_event (``202 {}``, optional Idempotency-Key) / inbox |
| POST | ``/{id}/terminate`` | terminate → ``{"status"}`` |
| GET | ``/{id}/history`` | history (``pageToken``, ``limit``) |
| GET | ``/{id}/logs`` | tenant log lines (``pageToken``, ``limit``; ``services.tenant_logs``) |
| GET | ``/{id}/progress`` | where is it: what it runs or waits for (``instance_progress``) |
"""

from __future__ import annotations

import re
import urllib.parse

import flask

from host_api import body as request_body
from host_api import query
from host_api.errors import ApiError
from services import (
    ids,
    instance_common,
    instance_events,
    instance_history,
    instance_progress,
    instance_stop,
    instances,
    tenant_logs,
)

bp = flask.Blueprint("instances", __name__)

_PREFIX = re.compile(
    r"^/v2/spaces/(?P<space>[^/?#]*)/resources/(?P<uid>[^/?#]*)/instances(?P<rest>/[^?#]*)?$"
)
_ACTIONS = {"events", "terminate", "history", "progress", "logs"}
_CREATE_KEYS = {"id", "params"}
_EVENT_KEYS = {"type", "payload"}


def _raw_path() -> str:
    environ = flask.request.environ
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw is None:  # a server without the raw target: re-quote what routing saw (ids with '/' break)
        raw = urllib.parse.quote(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""), safe="/")
    if "://" in raw.split("?", 1)[0]:  # absolute-form request target
        raw = urllib.parse.urlsplit(raw)._replace(scheme="", netloc="").geturl()
    return raw.split("?", 1)[0].split("#", 1)[0]


def _decode(segment: str, *, what: str) -> str:
    """Percent-decode one raw path segment as strict UTF-8 (``invalid_request`` otherwise)."""
    try:
        raw = urllib.parse.unquote_to_bytes(segment)
        return raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise ApiError("invalid_request", f"the {what} in the path is not percent-encoded UTF-8") from None


def _unknown_keys(body: dict, allowed: set[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise ApiError("invalid_request", f"unknown body key(s): {', '.join(map(repr, extra))}")


def _json(value: object, status: int = 200) -> flask.Response:
    response = flask.jsonify(value)
    response.status_code = status
    return response


def _limit() -> int | None:
    """``limit`` in ASCII digits (``str.isdigit`` would accept ``²`` or Arabic-Indic digits, which
    ``int()`` refuses); the service checks the range 1..1000."""
    return query.count_param("limit")


def _object_or_empty_body() -> dict:
    """The body as a JSON object; an empty body means ``{}``. Any other root (``null``, ``[]``, a
    number) is ``invalid_request`` — ``null`` is a body, not the absence of one."""
    body = request_body.json_body(required=False)
    if body is None and not request_body.raw_body():
        return {}
    if not isinstance(body, dict):
        raise ApiError("invalid_request", "the request body must be a JSON object")
    return body


@bp.before_app_request
def route_instances() -> flask.Response | None:
    """Serve every ``…/resources/{uid}/instances…`` request from the raw path (see module doc).

    Runs after ``auth.authenticate`` (registered earlier), which set ``flask.g.space``; the path's
    Space must be the token's Space (``404 not_found`` otherwise, as elsewhere).
    """
    match = _PREFIX.match(_raw_path())
    if match is None:
        return None
    space = _decode(match["space"], what="Space")
    if getattr(flask.g, "space", None) != space:
        raise ApiError("not_found", "no such resource or route")
    uid = ids.require_host_id(_decode(match["uid"], what="resource uid"))  # never a NUL into SQL
    rest = match["rest"]
    method = flask.request.method
    if rest is None or rest == "/":
        if method == "POST":
            return _create(space, uid)
        if method == "GET":
            return _list(space, uid)
        raise ApiError("method_not_allowed", f"method {method} not allowed here")
    segments = rest[1:].split("/")
    action = None
    if len(segments) == 2 and segments[1] in _ACTIONS:
        action = segments[1]
    elif len(segments) != 1:
        raise ApiError("not_found", "no such resource or route")
    instance_id = _decode(segments[0], what="instance id")
    key = (method, action)
    if key == ("GET", None):
        return _json(instances.describe(space=space, workflow_uid=uid, instance_id=instance_id))
    if key == ("POST", "events"):
        return _send_event(space, uid, instance_id)
    if key == ("GET", "events"):
        return _json(instance_events.inbox(space=space, workflow_uid=uid, instance_id=instance_id))
    if key == ("POST", "terminate"):
        _unknown_keys(_object_or_empty_body(), set())  # no body, or {}
        return _json(instance_stop.terminate(
            space=space, workflow_uid=uid, instance_id=instance_id, by=f"API (Space {space})"
        ))
    if key == ("GET", "progress"):
        return _json(instance_progress.progress(space=space, workflow_uid=uid, instance_id=instance_id))
    if key == ("GET", "logs"):
        return _json(
            tenant_logs.instance_logs(
                space=space,
                workflow_uid=uid,
                instance_id=instance_id,
                page_token=flask.request.args.get("pageToken"),
                limit=_limit(),
            )
        )
    if key == ("GET", "history"):
        return _json(
            instance_history.history(
                space=space,
                workflow_uid=uid,
                instance_id=instance_id,
                page_token=flask.request.args.get("pageToken"),
                limit=_limit(),
            )
        )
    raise ApiError("method_not_allowed", f"method {method} not allowed here")


def _create(space: str, uid: str) -> flask.Response:
    body = _object_or_empty_body()
    _unknown_keys(body, _CREATE_KEYS)
    if "id" in body and not isinstance(body["id"], str):
        raise ApiError("invalid_request", "id must be a string of 1-256 Unicode scalar values")
    new_id = instances.create(
        space=space,
        workflow_uid=uid,
        instance_id=body.get("id"),
        params=body.get("params", instance_common.ABSENT),
    )
    return _json({"id": new_id}, 201)


def _list(space: str, uid: str) -> flask.Response:
    args = flask.request.args
    return _json(
        instances.list_instances(
            space=space,
            workflow_uid=uid,
            status_filter=args.get("status"),
            page_token=args.get("pageToken"),
            limit=_limit(),
        )
    )


def _send_event(space: str, uid: str, instance_id: str) -> flask.Response:
    key = request_body.idempotency_key(required=False)
    body = request_body.json_object_body()
    _unknown_keys(body, _EVENT_KEYS)
    if "type" not in body:
        raise ApiError("invalid_request", "type is required")
    idempotency = None if key is None else (key, request_body.request_fingerprint(body))
    answer = instance_events.send_event(
        space=space,
        workflow_uid=uid,
        instance_id=instance_id,
        event_type=body["type"],
        payload=body.get("payload", instance_common.ABSENT),
        idempotency=idempotency,
    )
    return _json(answer, 202)
