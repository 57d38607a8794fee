"""The API's OpenAPI 3 document, generated with apispec from the marshmallow schemas that validate
requests (``host_api.schemas``), served at ``GET /v2/openapi.json`` (docs/spec/host-features.md#hf-foundation).

Closed request schemas (``unknown=RAISE``) come out with ``additionalProperties: false``; the
create/update ``spec`` is a ``oneOf`` of the five Form spec schemas. Every route of the API is
described here, including the instance (docs/spec/http-api.md#api-inst) and cron-run (§7) routes; a test checks
that each Flask URL rule has a path here.
"""

from __future__ import annotations

import functools

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin

from host_api import schemas
from host_api.errors import STATUS_BY_CODE
from models import instances as inst_models
from services import ids, instance_pages, resources, tenant_logs, tokens

SPACE = {
    "name": "space",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": f"^{tokens.SPACE_RE.pattern}$"},
    "description": "the Space of the token (any other is 404 not_found)",
}
UID = {
    "name": "uid",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": ids.HOST_ID_PATTERN},
    "description": "resource UID (issued by the host; any other string is 404 not_found)",
}
OP_ID = {
    "name": "op_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": ids.HOST_ID_PATTERN},
    "description": "Operation id (issued by the host; any other string is 404 not_found)",
}
INSTANCE_ID = {
    "name": "instance_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": schemas.MAX_SCALAR_STRING},
    "description": "1-256 Unicode scalar values, percent-encoded as one path segment",
}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7e]+$"},
    "description": "same key + same request → the same Operation; another request → 422 (docs/spec/http-api.md#api-op)",
}
OPTIONAL_KEY = {**IDEMPOTENCY_KEY, "required": False}
PAGE_TOKEN = {
    "name": "pageToken",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "minLength": 1},
    "description": "the nextPageToken of the previous page, unchanged (anything else is 400 invalid_request)",
}


def _limit(maximum: int, default: int) -> dict:
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
        "description": "page size, in ASCII digits",
    }


RESOURCE_LIMIT = _limit(resources.MAX_PAGE_SIZE, resources.DEFAULT_PAGE_SIZE)
INSTANCE_LIMIT = _limit(instance_pages.MAX_PAGE, instance_pages.DEFAULT_PAGE)
LOG_LIMIT = _limit(tenant_logs.MAX_PAGE, tenant_logs.DEFAULT_PAGE)

SCHEMAS = {
    cls.__name__: cls
    for cls in (
        schemas.Reference,
        schemas.ModuleWorkerSpec,
        schemas.WorkflowBinding,
        schemas.WorkerVersionSpec,
        schemas.DeploymentEntry,
        schemas.WorkerDeploymentSpec,
        schemas.DurableWorkflowSpec,
        schemas.WorkerCronTriggerSpec,
        schemas.CreateResourceBody,
        schemas.UpdateResourceBody,
        schemas.ErrorDetail,
        schemas.ErrorBody,
        schemas.OperationError,
        schemas.OperationView,
        schemas.ResourceView,
        schemas.ResourceList,
        schemas.InstanceCreateBody,
        schemas.InstanceId,
        schemas.ReplayCheckBody,
        schemas.InstanceSummary,
        schemas.InstanceList,
        schemas.InstanceFailure,
        schemas.InstanceStatus,
        schemas.EventBody,
        schemas.QueuedEvent,
        schemas.EventList,
        schemas.TerminateAnswer,
        schemas.HistoryEvent,
        schemas.HistoryPage,
        schemas.ProgressStep,
        schemas.ProgressContext,
        schemas.InstanceProgress,
        schemas.CronStartedInstance,
        schemas.CronDeliveryView,
        schemas.CronRunView,
        schemas.CronRunList,
        schemas.LogLine,
        schemas.LogPage,
        schemas.RunLogLine,
        schemas.RunLogPage,
        schemas.QuotaUse,
        schemas.SpaceQuotas,
        schemas.SpaceUsage,
        schemas.Empty,
        schemas.Health,
    )
}
SPEC_SCHEMA_NAMES = [cls.__name__ for cls in schemas.SPEC_SCHEMAS.values()]


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(*codes: str) -> dict:
    """Responses for error ``codes`` (grouped by status), always with the §2.4 envelope."""
    by_status: dict[str, list[str]] = {}
    for code in ("unauthenticated", "not_found", *codes):
        by_status.setdefault(str(STATUS_BY_CODE[code]), []).append(code)
    return {
        status: _json("ErrorBody", "error: " + ", ".join(sorted(set(found))))
        for status, found in by_status.items()
    }


MUTATION_ERRORS = (
    "invalid_json",
    "idempotency_key_required",
    "idempotency_key_reused",
    "resource_busy",
    "document_too_large",
)


def _paths() -> dict[str, dict]:
    resources = "/v2/spaces/{space}/resources"
    instances = resources + "/{uid}/instances"
    accepted = {
        "202": {
            **_json("OperationView", "accepted: the Operation (see Location)"),
            "headers": {
                "Location": {
                    "schema": {"type": "string"},
                    "description": "/v2/spaces/{space}/operations/{id}",
                }
            },
        }
    }
    return {
        "/healthz": {
            "get": {
                "summary": "liveness: the database answers",
                "security": [],
                "responses": {"200": _json("Health", "ok"), "503": _json("ErrorBody", "backend_unavailable")},
            }
        },
        "/v2/openapi.json": {
            "get": {
                "summary": "this document",
                "security": [],
                "responses": {"200": {"description": "OpenAPI 3 document"}},
            }
        },
        resources: {
            "parameters": [SPACE],
            "post": {
                "summary": "create a resource of one of the five Forms (docs/spec/http-api.md#api-res)",
                "parameters": [IDEMPOTENCY_KEY],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("CreateResourceBody")}},
                },
                "responses": {
                    **accepted,
                    **_errors(
                        *MUTATION_ERRORS,
                        "invalid_spec",
                        "unsupported_form",
                        "reference_not_found",
                        "name_conflict",
                        "dependency_conflict",
                        "quota_exceeded",
                    ),
                },
            },
            "get": {
                "summary": "list live resources, oldest first",
                "parameters": [
                    {
                        "name": "form",
                        "in": "query",
                        "required": False,
                        "description": "a Form URL or its short name (ModuleWorker, DurableWorkflow, …)",
                        "schema": {
                            "type": "string",
                            "enum": sorted(schemas.forms.FORM_URLS.values()) + sorted(schemas.forms.FORM_URLS),
                        },
                    },
                    PAGE_TOKEN,
                    RESOURCE_LIMIT,
                ],
                "responses": {
                    "200": _json("ResourceList", "one page"),
                    **_errors("unsupported_form", "invalid_request"),
                },
            },
        },
        resources + "/{uid}": {
            "parameters": [SPACE, UID],
            "get": {
                "summary": "one resource",
                "responses": {"200": _json("ResourceView", "the resource"), **_errors()},
            },
            "put": {
                "summary": "replace the spec (whole replacement); a new generation and Operation",
                "parameters": [IDEMPOTENCY_KEY],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("UpdateResourceBody")}},
                },
                "responses": {
                    **accepted,
                    **_errors(
                        *MUTATION_ERRORS,
                        "invalid_spec",
                        "immutable_field",
                        "reference_not_found",
                        "dependency_conflict",
                        "replay_check_failed",
                    ),
                },
            },
            "delete": {
                "summary": "delete the resource",
                "parameters": [IDEMPOTENCY_KEY],
                "responses": {**accepted, **_errors(*MUTATION_ERRORS, "dependency_conflict")},
            },
        },
        resources + "/{uid}/check": {
            "parameters": [SPACE, UID],
            "post": {
                "summary": "replay a WorkerVersion against the live instances of its Worker's DurableWorkflows "
                "(an Operation of kind check; the outcome is the Version's observed.replayCheck)",
                "parameters": [IDEMPOTENCY_KEY],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("ReplayCheckBody")}},
                },
                "responses": {**accepted, **_errors(*MUTATION_ERRORS, "invalid_request", "unsupported_form")},
            },
        },
        "/v2/spaces/{space}/usage": {
            "parameters": [SPACE],
            "get": {
                "summary": "what the Space holds against each of its quotas",
                "responses": {"200": _json("SpaceUsage", "usage and limits"), **_errors("invalid_request")},
            },
        },
        "/v2/spaces/{space}/operations/{op_id}": {
            "parameters": [SPACE, OP_ID],
            "get": {
                "summary": "an Operation",
                "responses": {"200": _json("OperationView", "the Operation"), **_errors()},
            },
        },
        resources + "/{uid}/runs": {
            "parameters": [SPACE, UID],
            "get": {
                "summary": "a WorkerCronTrigger's recorded and skipped matches, newest first (§7)",
                "parameters": [PAGE_TOKEN],
                "responses": {"200": _json("CronRunList", "one page"), **_errors("invalid_request")},
            },
        },
        resources + "/{uid}/runs/{scheduledTime}/logs": {
            "parameters": [
                SPACE,
                UID,
                {
                    "name": "scheduledTime",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "the run's scheduledTime as the ledger writes it (RFC 3339 UTC), or epoch ms",
                },
            ],
            "get": {
                "summary": "what one cron run's handler printed (every delivery of the match), oldest first",
                "parameters": [PAGE_TOKEN, LOG_LIMIT],
                "responses": {
                    "200": _json("RunLogPage", "one page"),
                    **_errors("not_found", "invalid_request"),
                },
            },
        },
        instances: {
            "parameters": [SPACE, UID],
            "post": {
                "summary": "create an instance (§2.5)",
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": _ref("InstanceCreateBody")}},
                },
                "responses": {
                    "201": _json("InstanceId", "created"),
                    **_errors(
                        "invalid_json",
                        "invalid_request",
                        "invalid_params",
                        "document_too_large",
                        "instance_exists",
                        "quota_exceeded",
                        "backend_unavailable",
                    ),
                },
            },
            "get": {
                "summary": "list instances",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": list(inst_models.STATUSES)},
                    },
                    PAGE_TOKEN,
                    INSTANCE_LIMIT,
                ],
                "responses": {"200": _json("InstanceList", "one page"), **_errors("invalid_request")},
            },
        },
        instances + "/{instance_id}": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "get": {
                "summary": "an instance's status",
                "responses": {
                    "200": _json("InstanceStatus", "status"),
                    **_errors("unknown_instance", "invalid_request"),
                },
            },
        },
        instances + "/{instance_id}/events": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "post": {
                "summary": "send an event (optional Idempotency-Key replays the first answer)",
                "parameters": [OPTIONAL_KEY],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("EventBody")}},
                },
                "responses": {
                    "202": _json("Empty", "accepted"),
                    **_errors(
                        "invalid_json",
                        "invalid_request",
                        "invalid_params",
                        "document_too_large",
                        "unknown_instance",
                        "instance_terminal",
                        "event_queue_full",
                        "quota_exceeded",
                        "idempotency_key_reused",
                    ),
                },
            },
            "get": {
                "summary": "unconsumed events in acceptance order",
                "responses": {"200": _json("EventList", "events"), **_errors("unknown_instance")},
            },
        },
        instances + "/{instance_id}/terminate": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "post": {
                "summary": "terminate (answers once the stop is proven)",
                "responses": {
                    "200": _json("TerminateAnswer", "terminated"),
                    **_errors("unknown_instance", "backend_unavailable"),
                },
            },
        },
        instances + "/{instance_id}/history": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "get": {
                "summary": "the SWF-style history, newest last (§6)",
                "parameters": [PAGE_TOKEN, INSTANCE_LIMIT],
                "responses": {
                    "200": _json("HistoryPage", "one page"),
                    **_errors("unknown_instance", "invalid_request"),
                },
            },
        },
        instances + "/{instance_id}/logs": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "get": {
                "summary": "what the instance's code printed, by step and attempt, oldest first",
                "parameters": [PAGE_TOKEN, LOG_LIMIT],
                "responses": {
                    "200": _json("LogPage", "one page"),
                    **_errors("unknown_instance", "invalid_request"),
                },
            },
        },
        instances + "/{instance_id}/progress": {
            "parameters": [SPACE, UID, INSTANCE_ID],
            "get": {
                "summary": "where is it: the step it runs, its next retry, a sleep's wake time, the awaited "
                "event and its timeout, or why it is queued",
                "responses": {
                    "200": _json("InstanceProgress", "what it does now"),
                    **_errors("unknown_instance", "invalid_request"),
                },
            },
        },
    }


@functools.cache
def document() -> dict:
    """Build the OpenAPI 3.0.3 document (a dict; built once per process)."""
    spec = APISpec(
        title="takohost Host API",
        version="2",
        openapi_version="3.0.3",
        plugins=[MarshmallowPlugin()],
        info={
            "description": "Host API v2 as takohost renders it (docs/spec/http-api.md). Every error body is "
            '{"error": {"code", "message", "details"?}}.'
        },
    )
    spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer"})
    for name, schema in SCHEMAS.items():
        spec.components.schema(name, schema=schema)
    for path, operations in _paths().items():
        operations = dict(operations)
        spec.path(path=path, operations=operations, parameters=operations.pop("parameters", None))
    result = spec.to_dict()
    result["security"] = [{"bearer": []}]
    one_of = {
        "oneOf": [_ref(name) for name in SPEC_SCHEMA_NAMES],
        "description": "the spec of the Form named by `form`",
    }
    components = result["components"]["schemas"]
    components["CreateResourceBody"]["properties"]["spec"] = one_of
    components["UpdateResourceBody"]["properties"]["spec"] = one_of
    for name in ("CreateResourceBody", "UpdateResourceBody"):
        components[name]["properties"]["privateInputs"] = {
            "type": "object",
            "maxProperties": 0,
            "description": "must be absent or empty for all five Forms",
        }
    components["WorkerVersionSpec"]["properties"]["modules"].update(
        {
            # Characters ≤ UTF-8 bytes: a necessary bound (the byte limits are in the description).
            "additionalProperties": {"type": "string", "maxLength": schemas.MAX_MODULE_BYTES},
            "minProperties": 1,
            "maxProperties": schemas.MAX_MODULES,
        }
    )
    _ecma_patterns(result)
    return result


def _ecma_patterns(node: object) -> None:
    """Rewrite Python-only regex anchors (``\\A``, ``\\Z``) in ``pattern`` values for OpenAPI (ECMA 262)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                node[key] = value.replace("\\A", "^").replace("\\Z", "$")
            else:
                _ecma_patterns(value)
    elif isinstance(node, list):
        for item in node:
            _ecma_patterns(item)
