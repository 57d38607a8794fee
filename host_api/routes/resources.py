"""Resources and Operations over HTTP (docs/spec/http-api.md#api-res, docs/spec/http-api.md#api-op): parse, call a service, render.

Mutations answer ``202`` with the Operation and ``Location: /v2/spaces/{space}/operations/{id}``;
the reconcile is dispatched only after the accepting transaction committed.
"""

from __future__ import annotations

import flask

from host_api import apidoc, db, query, schemas
from host_api import body as request_body
from models.base import utcnow
from models.errors import DomainError
from services import dispatch, forms, operations, replay_checks, resources

bp = flask.Blueprint("resources", __name__)

FORM = {
    "name": "form",
    "in": "query",
    "required": False,
    "description": "a Form URL or its short name (ModuleWorker, DurableWorkflow, …)",
    "schema": {"type": "string", "enum": sorted(forms.FORM_URLS.values()) + sorted(forms.FORM_URLS)},
}


def _accepted(space: str, accepted: resources.Accepted) -> flask.Response:
    op = accepted.operation
    if accepted.new or op.state in operations.UNFINISHED:
        dispatch.reconcile_operation(op.id)
    response = flask.jsonify(schemas.OperationView().dump(op))
    response.status_code = 202
    response.headers["Location"] = f"/v2/spaces/{space}/operations/{op.id}"
    return response


@bp.post("/v2/spaces/<space>/resources")
@apidoc.operation(
    "create a resource of one of the five Forms (docs/spec/http-api.md#api-res)",
    apidoc.ACCEPTED,
    parameters=(apidoc.IDEMPOTENCY_KEY,),
    body=schemas.CreateResourceBody,
    errors=(*apidoc.MUTATION_ERRORS, "invalid_spec", "unsupported_form", "reference_not_found",
            "name_conflict", "dependency_conflict", "quota_exceeded"),
)
def create_resource(space: str) -> flask.Response:
    """``POST …/resources`` ``{"form", "name", "spec", "privateInputs"?}`` → ``202`` Operation."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_object_body()
    fingerprint = request_body.request_fingerprint(body)
    request = schemas.validate_create(body)
    with db.session() as session:
        accepted = resources.accept_create_txn(
            session,
            space=space,
            key=key,
            request_hash=fingerprint,
            form=request.form,
            name=request.name,
            spec=request.spec,
            now=utcnow(),
        )
    return _accepted(space, accepted)


@bp.get("/v2/spaces/<space>/resources")
@apidoc.operation(
    "list live resources, oldest first",
    apidoc.ok(schemas.ResourceList, "one page"),
    parameters=(FORM, apidoc.PAGE_TOKEN, apidoc.RESOURCE_LIMIT),
    errors=("unsupported_form", "invalid_request"),
)
def list_resources(space: str) -> flask.Response:
    """``GET …/resources[?form=&pageToken=&limit=]`` → ``{"resources", "nextPageToken"?}``.

    ``400 invalid_request`` for a ``limit`` outside 1..500 or not in ASCII digits and for a
    ``pageToken`` the API did not issue; ``400 unsupported_form`` for an unknown ``form``.
    ``form`` is a Form URL or its short name (``ModuleWorker``, ``DurableWorkflow``, …).
    """
    args = flask.request.args
    form = None
    if "form" in args:
        form = forms.FORM_BY_URL.get(args["form"])
        if form is None and args["form"] in forms.FORM_URLS:
            form = args["form"]
        if form is None:
            raise DomainError(
                "unsupported_form",
                f"unsupported Form {args['form']!r}: a Form URL or one of {', '.join(forms.FORM_URLS)}",
            )
    limit = query.count_param("limit")
    if limit is None:
        limit = resources.DEFAULT_PAGE_SIZE
    with db.session() as session:
        rows, next_token = resources.list_txn(
            session, space=space, form=form, page_token=args.get("pageToken"), limit=limit
        )
    return flask.jsonify(schemas.ResourceList().dump({"resources": rows, "next_page_token": next_token}))


@bp.get("/v2/spaces/<space>/resources/<uid>")
@apidoc.operation("one resource", apidoc.ok(schemas.ResourceView, "the resource"))
def get_resource(space: str, uid: str) -> flask.Response:
    """``GET …/resources/{uid}`` → the Resource (``404 not_found`` once deleted)."""
    with db.session() as session:
        resource = resources.get_txn(session, space=space, uid=uid)
    return flask.jsonify(schemas.ResourceView().dump(resource))


@bp.put("/v2/spaces/<space>/resources/<uid>")
@apidoc.operation(
    "replace the spec (whole replacement); a new generation and Operation",
    apidoc.ACCEPTED,
    parameters=(apidoc.IDEMPOTENCY_KEY,),
    body=schemas.UpdateResourceBody,
    errors=(*apidoc.MUTATION_ERRORS, "invalid_spec", "immutable_field", "reference_not_found",
            "dependency_conflict", "replay_check_failed"),
)
def update_resource(space: str, uid: str) -> flask.Response:
    """``PUT …/resources/{uid}`` ``{"spec", "privateInputs"?}`` → ``202`` Operation."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_object_body()
    fingerprint = request_body.request_fingerprint(body)
    with db.session() as session:
        accepted = resources.accept_update_txn(
            session,
            space=space,
            uid=uid,
            key=key,
            request_hash=fingerprint,
            body=body,
            validate=lambda b, form: schemas.validate_update(b, form=form),
            now=utcnow(),
        )
    return _accepted(space, accepted)


@bp.delete("/v2/spaces/<space>/resources/<uid>")
@apidoc.operation(
    "delete the resource",
    apidoc.ACCEPTED,
    parameters=(apidoc.IDEMPOTENCY_KEY,),
    errors=(*apidoc.MUTATION_ERRORS, "dependency_conflict"),
)
def delete_resource(space: str, uid: str) -> flask.Response:
    """``DELETE …/resources/{uid}`` → ``202`` Operation (the body, if any, is ignored)."""
    key = request_body.idempotency_key(required=True)
    fingerprint = request_body.request_fingerprint(None)
    with db.session() as session:
        accepted = resources.accept_delete_txn(
            session, space=space, uid=uid, key=key, request_hash=fingerprint, now=utcnow()
        )
    return _accepted(space, accepted)


@bp.post("/v2/spaces/<space>/resources/<uid>/check")
@apidoc.operation(
    "replay a WorkerVersion against the live instances of its Worker's DurableWorkflows "
    "(an Operation of kind check; the outcome is the Version's observed.replayCheck)",
    apidoc.ACCEPTED,
    parameters=(apidoc.IDEMPOTENCY_KEY,),
    body=schemas.ReplayCheckBody,
    body_required=False,
    errors=(*apidoc.MUTATION_ERRORS, "invalid_request", "unsupported_form"),
)
def check_version(space: str, uid: str) -> flask.Response:
    """``POST …/resources/{versionUid}/check`` ``{"terminal"?: N}`` → ``202`` Operation of kind
    ``check``: replay the Version against live instances (``services.replay_checks``)."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_body(required=False)
    if body is not None and not isinstance(body, dict):
        raise DomainError("invalid_request", "the request body must be a JSON object")
    fingerprint = request_body.request_fingerprint(body)
    with db.session() as session:
        accepted = replay_checks.accept_check_txn(
            session, space=space, uid=uid, key=key, request_hash=fingerprint,
            request=replay_checks.parse_request(body), now=utcnow(),
        )
    return _accepted(space, accepted)


@bp.get("/v2/spaces/<space>/operations/<op_id>")
@apidoc.operation("an Operation", apidoc.ok(schemas.OperationView, "the Operation"))
def get_operation(space: str, op_id: str) -> flask.Response:
    """``GET …/operations/{id}`` → the Operation."""
    with db.session() as session:
        op = operations.get_txn(session, space=space, op_id=op_id)
    return flask.jsonify(schemas.OperationView().dump(op))
