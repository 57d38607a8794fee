"""The API's OpenAPI 3 document, generated with apispec from the URL map and the marshmallow
schemas (``host_api.schemas``), served at ``GET /v2/openapi.json`` (docs/spec/host-features.md#hf-foundation).

Each URL rule of the API (every blueprint but the web console's) gives a path, its methods and
its path parameters (:data:`PATH_PARAMETERS`, by rule variable); the view's
``host_api.apidoc.operation`` gives the rest. A view without one is an error here, so no route
goes undocumented and no documented path is unrouted. Closed request schemas (``unknown=RAISE``)
come out with ``additionalProperties: false``; the create/update ``spec`` is a ``oneOf`` of the
five Form spec schemas.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import flask
import marshmallow as ma
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from werkzeug import routing

from host_api import apidoc, schemas
from host_api.errors import STATUS_BY_CODE
from services import ids, tokens

#: The path parameter each rule variable is documented as.
PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "space": {
        "name": "space",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": f"^{tokens.SPACE_RE.pattern}$"},
        "description": "the Space of the token (any other is 404 not_found)",
    },
    "uid": {
        "name": "uid",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": ids.HOST_ID_PATTERN},
        "description": "resource UID (issued by the host; any other string is 404 not_found)",
    },
    "op_id": {
        "name": "op_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": ids.HOST_ID_PATTERN},
        "description": "Operation id (issued by the host; any other string is 404 not_found)",
    },
    "instance_id": {
        "name": "instance_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": schemas.MAX_SCALAR_STRING},
        "description": "1-256 Unicode scalar values, percent-encoded as one path segment",
    },
    "scheduled_time": {
        "name": "scheduledTime",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "the run's scheduledTime as the ledger writes it (RFC 3339 UTC), or epoch ms",
    },
}
#: Every public marshmallow schema of ``host_api.schemas``, as a component of its class name.
SCHEMAS = {
    name: cls
    for name, cls in vars(schemas).items()
    if isinstance(cls, type) and issubclass(cls, ma.Schema)
    and cls.__module__ == schemas.__name__ and not name.startswith("_")
}
SPEC_SCHEMA_NAMES = [cls.__name__ for cls in schemas.SPEC_SCHEMAS.values()]
#: Blueprints that are not part of the API (the web console's HTML pages at ``/ui/``).
UNDOCUMENTED_BLUEPRINTS = ("ui.",)
_VARIABLE = re.compile(r"<(?:[^:>]+:)?([^>]+)>")


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(codes: tuple[str, ...]) -> dict:
    """Responses for error ``codes`` (grouped by status), always with the §2.4 envelope."""
    by_status: dict[str, list[str]] = {}
    for code in codes:
        by_status.setdefault(str(STATUS_BY_CODE[code]), []).append(code)
    return {
        status: _json("ErrorBody", "error: " + ", ".join(sorted(set(found))))
        for status, found in by_status.items()
    }


def _operation(meta: apidoc.Operation) -> dict:
    """The OpenAPI operation object of ``meta``."""
    answer = meta.answer
    success: dict = {"description": answer.description}
    if answer.schema is not None:
        success = _json(answer.schema.__name__, answer.description)
    if answer.headers:
        success["headers"] = answer.headers
    codes = meta.errors if meta.public else ("unauthenticated", "not_found", *meta.errors)
    result: dict = {"summary": meta.summary, "responses": {str(answer.status): success, **_errors(codes)}}
    if meta.parameters:
        result["parameters"] = list(meta.parameters)
    if meta.body is not None:
        result["requestBody"] = {
            "required": meta.body_required,
            "content": {"application/json": {"schema": _ref(meta.body.__name__)}},
        }
    if meta.public:
        result["security"] = []
    return result


def documented_rules(app: flask.Flask) -> list[routing.Rule]:
    """The URL rules of ``app`` that belong in the document (all but the web console's)."""
    return [
        rule for rule in app.url_map.iter_rules()
        if rule.endpoint != "static" and not rule.endpoint.startswith(UNDOCUMENTED_BLUEPRINTS)
    ]


def openapi_path(rule: routing.Rule) -> str:
    """``rule``'s path in OpenAPI form: ``<segment:instance_id>`` → ``{instance_id}``."""
    return _VARIABLE.sub(lambda m: "{" + PATH_PARAMETERS[m[1]]["name"] + "}", rule.rule)


def paths(app: flask.Flask) -> dict[str, dict]:
    """The ``paths`` of ``app``'s URL map: ``{path: {"parameters", method: operation}}``.

    Raises:
        LookupError: a documented rule's view has no ``apidoc.operation``, or a rule variable
            has no :data:`PATH_PARAMETERS` entry.
    """
    result: dict[str, dict] = {}
    for rule in documented_rules(app):
        meta = apidoc.of(app.view_functions[rule.endpoint])
        variables = _VARIABLE.findall(rule.rule)
        missing = [name for name in variables if name not in PATH_PARAMETERS]
        if missing:
            raise LookupError(f"{rule.rule}: no PATH_PARAMETERS entry for {missing}")
        item = result.setdefault(openapi_path(rule), {"parameters": [PATH_PARAMETERS[n] for n in variables]})
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            item[method.lower()] = _operation(meta)
    return result


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
    from host_api import app as app_module  # the app imports the meta routes, which import this

    for path, operations in paths(app_module.url_map_app()).items():
        parameters = operations.pop("parameters") or None
        spec.path(path=path, operations=operations, parameters=parameters)
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
