"""Resources and Operations over HTTP (docs/spec/http-api.md#api-res, docs/spec/http-api.md#api-op): parse, call a service, render.

Mutations answer ``202`` with the Operation and ``Location: /v2/spaces/{space}/operations/{id}``;
the reconcile is dispatched only after the accepting transaction committed.
"""

from __future__ import annotations

from collections.abc import Callable

import flask
import marshmallow as ma

from host_api import apidoc, db, query, schemas
from host_api import body as request_body
from models.base import utcnow
from models.errors import DomainError
from services import dispatch, forms, operations, replay_checks, resources
from services.idempotency import KeyedRequest

bp = flask.Blueprint("resources", __name__)

FORM = {
    "name": "form",
    "in": "query",
    "required": False,
    "description": "a Form URL or its short name (ModuleWorker, DurableWorkflow, …)",
    "schema": {"type": "string", "enum": sorted(forms.FORM_URLS.values()) + sorted(forms.FORM_URLS)},
}


def _mutation(
    summary: str,
    *,
    errors: tuple[str, ...],
    body: type[ma.Schema] | None = None,
    body_required: bool = True,
) -> Callable[[apidoc.F], apidoc.F]:
    """``apidoc.operation`` of a mutation: ``202`` with the Operation (:func:`_accept`), a
    required ``Idempotency-Key``, the mutation errors of every such route and then ``errors``."""
    return apidoc.operation(
        summary,
        apidoc.ACCEPTED,
        parameters=(apidoc.IDEMPOTENCY_KEY,),
        body=body,
        body_required=body_required,
        errors=(*apidoc.MUTATION_ERRORS, *errors),
    )


def _accept(
    space: str, *, key: str, parsed: object, accept: Callable[..., resources.Accepted], **fields: object
) -> flask.Response:
    """Accept a mutation in one transaction and answer ``202``: ``accept`` (an ``accept_*_txn``)
    with the session, ``space``, the Idempotency-Key ``key``, the fingerprint of the request
    (``parsed``: what its body parsed to, ``None`` for none), now and ``fields``; the reconcile
    is dispatched after the commit."""
    fingerprint = request_body.request_fingerprint(parsed)
    with db.session() as session:
        accepted = accept(
            session, space=space, idempotency=KeyedRequest(key, fingerprint), now=utcnow(), **fields
        )
    op = accepted.operation
    if accepted.new or op.state in operations.UNFINISHED:
        dispatch.reconcile_operation(op.id)
    response = flask.jsonify(schemas.OperationView().dump(op))
    response.status_code = 202
    response.headers["Location"] = f"/v2/spaces/{space}/operations/{op.id}"
    return response


@bp.post("/v2/spaces/<space>/resources")
@_mutation(
    "create a resource of one of the five Forms (docs/spec/http-api.md#api-res)",
    body=schemas.CreateResourceBody,
    errors=("invalid_spec", "unsupported_form", "reference_not_found", "name_conflict",
            "dependency_conflict", "quota_exceeded"),
)
def create_resource(space: str) -> flask.Response:
    """``POST …/resources`` ``{"form", "name", "spec", "privateInputs"?}`` → ``202`` Operation."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_object_body()
    request = schemas.validate_create(body)
    return _accept(
        space, key=key, parsed=body, accept=resources.accept_create_txn,
        form=request.form, name=request.name, spec=request.spec,
    )


@bp.get("/v2/spaces/<space>/resources")
@apidoc.page(
    "list live resources, oldest first",
    schemas.ResourceList,
    filters=(FORM,),
    limit=apidoc.RESOURCE_LIMIT,
    errors=("unsupported_form",),
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
    page = query.page()
    with db.session() as session:
        rows, next_token = resources.list_txn(session, space=space, form=form, page=page)
    return flask.jsonify(schemas.ResourceList().dump({"resources": rows, "next_page_token": next_token}))


@bp.get("/v2/spaces/<space>/resources/<uid>")
@apidoc.operation("one resource", apidoc.ok(schemas.ResourceView, "the resource"))
def get_resource(space: str, uid: str) -> flask.Response:
    """``GET …/resources/{uid}`` → the Resource (``404 not_found`` once deleted)."""
    with db.session() as session:
        resource = resources.get_txn(session, space=space, uid=uid)
    return flask.jsonify(schemas.ResourceView().dump(resource))


@bp.put("/v2/spaces/<space>/resources/<uid>")
@_mutation(
    "replace the spec (whole replacement); a new generation and Operation",
    body=schemas.UpdateResourceBody,
    errors=("invalid_spec", "immutable_field", "reference_not_found", "dependency_conflict",
            "replay_check_failed"),
)
def update_resource(space: str, uid: str) -> flask.Response:
    """``PUT …/resources/{uid}`` ``{"spec", "privateInputs"?}`` → ``202`` Operation."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_object_body()
    return _accept(
        space, key=key, parsed=body, accept=resources.accept_update_txn,
        uid=uid, body=body, validate=lambda b, form: schemas.validate_update(b, form=form),
    )


@bp.delete("/v2/spaces/<space>/resources/<uid>")
@_mutation("delete the resource", errors=("dependency_conflict",))
def delete_resource(space: str, uid: str) -> flask.Response:
    """``DELETE …/resources/{uid}`` → ``202`` Operation (the body, if any, is ignored)."""
    key = request_body.idempotency_key(required=True)
    return _accept(space, key=key, parsed=None, accept=resources.accept_delete_txn, uid=uid)


@bp.post("/v2/spaces/<space>/resources/<uid>/check")
@_mutation(
    "replay a WorkerVersion against the live instances of its Worker's DurableWorkflows "
    "(an Operation of kind check; the outcome is the Version's observed.replayCheck)",
    body=schemas.ReplayCheckBody,
    body_required=False,
    errors=("invalid_request", "unsupported_form"),
)
def check_version(space: str, uid: str) -> flask.Response:
    """``POST …/resources/{versionUid}/check`` ``{"terminal"?: N}`` → ``202`` Operation of kind
    ``check``: replay the Version against live instances (``services.replay_checks``)."""
    key = request_body.idempotency_key(required=True)
    body = request_body.json_body(required=False)
    if body is not None and not isinstance(body, dict):
        raise DomainError("invalid_request", "the request body must be a JSON object")
    return _accept(
        space, key=key, parsed=body, accept=replay_checks.accept_check_txn,
        uid=uid, request=replay_checks.parse_request(body),
    )


@bp.get("/v2/spaces/<space>/operations/<op_id>")
@apidoc.operation("an Operation", apidoc.ok(schemas.OperationView, "the Operation"))
def get_operation(space: str, op_id: str) -> flask.Response:
    """``GET …/operations/{id}`` → the Operation."""
    with db.session() as session:
        op = operations.get_txn(session, space=space, op_id=op_id)
    return flask.jsonify(schemas.OperationView().dump(op))
