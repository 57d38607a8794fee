"""Binding calls from workflow code: ``env.NAME.create/get/status/sendEvent/terminate`` (docs/spec/durable-workflow.md#dw-binding).

The sandbox child of a replay context (``workers.engine.context``) or of a scheduled handler
(``workers.cron_tasks``) relays each call of a workflow binding; both answer it through
``workers.sandbox.jobs.answer_binding``, which calls :func:`call_binding` and maps its
``DomainError`` code to the error name the child raises. :func:`call_binding` checks the call's
shape and runs it through the same functions as HTTP (``instances``, ``instance_events``,
``instance_stop``), so a binding and a request fail with the same ``DomainError`` codes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from models.errors import DomainError
from services import instance_common, instance_events, instance_stop, instances

#: Per call: (the ``args`` keys it may carry, the keys it must carry).
_BINDING_ARGS = {
    "create": ({"id", "params"}, set()),
    "get": ({"id"}, {"id"}),
    "status": ({"id"}, {"id"}),
    "send_event": ({"id", "type", "payload"}, {"id", "type"}),
    "terminate": ({"id"}, {"id"}),
}


def call_binding(
    *, space: str, workflow_uid: str, call: str, args: dict, now: dt.datetime | None = None
) -> Any:
    """Run one binding call from workflow code (docs/spec/durable-workflow.md#dw-binding), the same code path as HTTP.

    ``args`` as the sandbox sends them (``id``, ``params``, ``type``, ``payload``; absent keys are
    "not given"). Returns the ``binding_result`` value: ``{"id"}`` for create/get, the status
    document for status, ``None`` otherwise. Raises DomainError (its ``code`` is the SDK error
    name the child raises; ``invalid_request`` becomes ``TypeError`` there).
    """
    allowed, required = _BINDING_ARGS.get(call, (None, None))
    if allowed is None or required is None or type(args) is not dict or not required <= set(args) <= allowed:
        raise DomainError("invalid_request", f"malformed binding call {call!r}")
    if call == "create":
        new_id = instances.create(
            space=space,
            workflow_uid=workflow_uid,
            instance_id=args.get("id"),
            params=args.get("params", instance_common.ABSENT),
            now=now,
        )
        return {"id": new_id}
    if call == "get":
        return {"id": instances.get(space=space, workflow_uid=workflow_uid, instance_id=args["id"])}
    if call == "status":
        return instances.status(space=space, workflow_uid=workflow_uid, instance_id=args["id"])
    if call == "send_event":
        instance_events.send_event(
            space=space,
            workflow_uid=workflow_uid,
            instance_id=args["id"],
            event_type=args["type"],
            payload=args.get("payload", instance_common.ABSENT),
            now=now,
        )
        return None
    instance_stop.terminate(space=space, workflow_uid=workflow_uid, instance_id=args["id"], now=now)
    return None
