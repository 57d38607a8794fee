"""DurableWorkflow instances over HTTP (docs/spec/http-api.md#api-inst): parse, call the instance services
(``services.instances``, ``instance_events``, ``instance_history``, ``instance_stop``),
render. The same service functions serve ``env.NAME`` bindings from workflow code (§4.5).

Instance ids are 1–256 Unicode scalar values and may contain ``/``, ``%``, ``?``, spaces, emoji
or U+0000 (API-inst-id). These routes are in Flask's URL map like every other, with each path
variable a ``<segment:…>``: ``host_api.routing`` keeps the request's raw path for them, so an
id's ``%2F`` stays inside its segment, and decodes each segment as strict UTF-8 (anything else
is ``400 invalid_request``). The Space is the token's and the uid a host id, checked before any
view runs (``host_api.auth``, ``host_api.app.check_path_ids``).

| method | path after ``/v2/spaces/{space}/resources/{uid}/instances`` | answer |
| --- | --- | --- |
| POST | (none, or ``/``) | create → ``201 {"id"}`` |
| GET | (none, or ``/``) | list (``status``, ``pageToken``, ``limit``) |
| GET | ``/{id}`` | ``{"id", "status", "output"?, "error"?}`` |
| POST / GET | ``/{id}/events`` | send_event (``202 {}``, optional Idempotency-Key) / inbox |
| POST | ``/{id}/terminate`` | terminate → ``{"status"}`` |
| GET | ``/{id}/history`` | history (``pageToken``, ``limit``) |
| GET | ``/{id}/logs`` | tenant log lines (``pageToken``, ``limit``; ``services.tenant_logs``) |
| GET | ``/{id}/progress`` | where is it: what it runs or waits for (``instance_progress``) |
"""

from __future__ import annotations

from collections.abc import Callable

import flask
import marshmallow as ma

from host_api import apidoc, query, schemas
from host_api import body as request_body
from host_api.errors import ApiError
from models import instances as inst_models
from services import (
    instance_common,
    instance_events,
    instance_history,
    instance_progress,
    instance_stop,
    instances,
    tenant_logs,
)
from services.idempotency import KeyedRequest

bp = flask.Blueprint("instances", __name__)

#: The collection; it also answers with a trailing slash (``…/instances/``), as it always did.
COLLECTION = "/v2/spaces/<segment:space>/resources/<segment:uid>/instances"
#: One instance (a non-empty id).
ONE = COLLECTION + "/<segment(minlength=1):instance_id>"
#: The prefix of an instance's sub-resources (an empty id reaches the service, which refuses it).
OF_ONE = COLLECTION + "/<segment:instance_id>"
_CREATE_KEYS = {"id", "params"}
_EVENT_KEYS = {"type", "payload"}
STATUS = {
    "name": "status",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": list(inst_models.STATUSES)},
}


def _unknown_keys(body: dict, allowed: set[str]) -> None:
    extra = sorted(set(body) - allowed)
    if extra:
        raise ApiError("invalid_request", f"unknown body key(s): {', '.join(map(repr, extra))}")


def _json(value: object, status: int = 200) -> flask.Response:
    response = flask.jsonify(value)
    response.status_code = status
    return response


def _page(read: Callable[..., object], schema: type[ma.Schema], **instance: str) -> flask.Response:
    """The page of an instance's ``read`` (``instance_history.history``, ``tenant_logs.instance_logs``)
    that the query's ``pageToken`` and ``limit`` ask for (``query.page``), dumped through ``schema``."""
    return _json(schema().dump(read(**instance, page=query.page())))


def _object_or_empty_body() -> dict:
    """The body as a JSON object; an empty body means ``{}``. Any other root (``null``, ``[]``, a
    number) is ``invalid_request`` — ``null`` is a body, not the absence of one."""
    body = request_body.json_body(required=False)
    if body is None and not request_body.raw_body():
        return {}
    if not isinstance(body, dict):
        raise ApiError("invalid_request", "the request body must be a JSON object")
    return body


@bp.post(COLLECTION, strict_slashes=False)
@apidoc.operation(
    "create an instance (§2.5)",
    apidoc.Answer(201, schemas.InstanceId, "created"),
    body=schemas.InstanceCreateBody,
    body_required=False,
    errors=("invalid_json", "invalid_request", "invalid_params", "document_too_large",
            "instance_exists", "quota_exceeded", "backend_unavailable"),
)
def create_instance(space: str, uid: str) -> flask.Response:
    """``POST …/instances`` ``{"id"?, "params"?}`` → ``201 {"id"}``."""
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
    return _json(schemas.InstanceId().dump({"id": new_id}), 201)


@bp.get(COLLECTION, strict_slashes=False)
@apidoc.page("list instances", schemas.InstanceList, filters=(STATUS,), limit=apidoc.INSTANCE_LIMIT)
def list_instances(space: str, uid: str) -> flask.Response:
    """``GET …/instances[?status=&pageToken=&limit=]`` → ``{"instances", "nextPageToken"?}``."""
    page = instances.list_instances(
        space=space, workflow_uid=uid, status_filter=flask.request.args.get("status"), page=query.page()
    )
    return _json(schemas.InstanceList().dump(page))


@bp.get(ONE)
@apidoc.operation(
    "an instance's status",
    apidoc.ok(schemas.InstanceStatus, "status"),
    errors=("unknown_instance", "invalid_request"),
)
def describe_instance(space: str, uid: str, instance_id: str) -> flask.Response:
    """``GET …/instances/{id}`` → ``{"id", "status", "output"?, "error"?}``."""
    return _json(schemas.InstanceStatus().dump(instances.describe(space=space, workflow_uid=uid, instance_id=instance_id)))


@bp.post(OF_ONE + "/events")
@apidoc.operation(
    "send an event (optional Idempotency-Key replays the first answer)",
    apidoc.Answer(202, schemas.Empty, "accepted"),
    parameters=(apidoc.OPTIONAL_KEY,),
    body=schemas.EventBody,
    errors=("invalid_json", "invalid_request", "invalid_params", "document_too_large", "unknown_instance",
            "instance_terminal", "event_queue_full", "quota_exceeded", "idempotency_key_reused"),
)
def send_event(space: str, uid: str, instance_id: str) -> flask.Response:
    """``POST …/instances/{id}/events`` ``{"type", "payload"?}`` → ``202 {}``."""
    key = request_body.idempotency_key(required=False)
    body = request_body.json_object_body()
    _unknown_keys(body, _EVENT_KEYS)
    if "type" not in body:
        raise ApiError("invalid_request", "type is required")
    idempotency = None if key is None else KeyedRequest(key, request_body.request_fingerprint(body))
    instance_events.send_event(
        space=space,
        workflow_uid=uid,
        instance_id=instance_id,
        event_type=body["type"],
        payload=body.get("payload", instance_common.ABSENT),
        idempotency=idempotency,
    )
    return _json(schemas.Empty().dump({}), 202)


@bp.get(OF_ONE + "/events")
@apidoc.operation(
    "unconsumed events in acceptance order",
    apidoc.ok(schemas.EventList, "events"),
    errors=("unknown_instance",),
)
def inbox(space: str, uid: str, instance_id: str) -> flask.Response:
    """``GET …/instances/{id}/events`` → ``{"events"}``."""
    events = instance_events.inbox(space=space, workflow_uid=uid, instance_id=instance_id)
    return _json(schemas.EventList().dump({"events": events}))


@bp.post(OF_ONE + "/terminate")
@apidoc.operation(
    "terminate (answers once the stop is proven)",
    apidoc.ok(schemas.TerminateAnswer, "terminated"),
    errors=("unknown_instance", "backend_unavailable"),
)
def terminate(space: str, uid: str, instance_id: str) -> flask.Response:
    """``POST …/instances/{id}/terminate`` (no body, or ``{}``) → ``{"status"}``."""
    _unknown_keys(_object_or_empty_body(), set())
    answer = instance_stop.terminate(
        space=space, workflow_uid=uid, instance_id=instance_id, by=f"API (Space {space})"
    )
    return _json(schemas.TerminateAnswer().dump(answer))


@bp.get(OF_ONE + "/history")
@apidoc.page(
    "the SWF-style history, newest last (§6)",
    schemas.HistoryPage,
    limit=apidoc.INSTANCE_LIMIT,
    errors=("unknown_instance",),
)
def history(space: str, uid: str, instance_id: str) -> flask.Response:
    """``GET …/instances/{id}/history[?pageToken=&limit=]`` → ``{"events", "nextPageToken"?}``."""
    return _page(instance_history.history, schemas.HistoryPage, space=space, workflow_uid=uid, instance_id=instance_id)


@bp.get(OF_ONE + "/logs")
@apidoc.page(
    "what the instance's code printed, by step and attempt, oldest first",
    schemas.LogPage,
    limit=apidoc.LOG_LIMIT,
    errors=("unknown_instance",),
)
def logs(space: str, uid: str, instance_id: str) -> flask.Response:
    """``GET …/instances/{id}/logs[?pageToken=&limit=]`` → ``{"logs", "nextPageToken", "removedLines"}``."""
    return _page(tenant_logs.instance_logs, schemas.LogPage, space=space, workflow_uid=uid, instance_id=instance_id)


@bp.get(OF_ONE + "/progress")
@apidoc.operation(
    "where is it: the step it runs, its next retry, a sleep's wake time, the awaited "
    "event and its timeout, or why it is queued",
    apidoc.ok(schemas.InstanceProgress, "what it does now"),
    errors=("unknown_instance", "invalid_request"),
)
def progress(space: str, uid: str, instance_id: str) -> flask.Response:
    """``GET …/instances/{id}/progress`` → what it runs or waits for."""
    answer = instance_progress.progress(space=space, workflow_uid=uid, instance_id=instance_id)
    return _json(schemas.InstanceProgress().dump(answer))
