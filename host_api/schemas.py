"""Request and response schemas (marshmallow, closed: ``unknown=RAISE``) for the Host API.

One schema per Form spec (docs/spec/worker-forms.md; docs/spec/durable-workflow.md "入力、観測、CRUD" and 003 "入力", "未知の
フィールド") plus the create/update envelopes of docs/spec/http-api.md#api-res. The same schemas generate the
OpenAPI document (``host_api.openapi``). Validation here is pure: it never reads the database;
cross-resource rules live in ``services.forms``.

Every rejection is ``400 invalid_spec`` with ``details.pointer`` (RFC 6901, relative to the
request body: ``/spec/worker/name``) and ``details.errors`` (every ``{pointer, message}``); an
unknown Form URL is ``400 unsupported_form``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from core import cron, progress
from models.errors import DomainError
from services import forms, ids, instance_common, operations, replay_checks
from takohost.domain import documents, identifiers
from takohost.domain import requirements as pins

MAX_MODULES = 64
MAX_MODULE_BYTES = 1024 * 1024
MAX_TOTAL_MODULE_BYTES = 4 * 1024 * 1024
MAX_BINDINGS = 64
MAX_DESCRIPTION = 1024
#: Instance ids and event types: 1..256 Unicode scalar values (docs/spec/durable-workflow.md#dw-doc; documentation here, the
#: instance service validates).
MAX_SCALAR_STRING = identifiers.MAX_SCALAR_STRING_LENGTH


class _Closed(ma.Schema):
    """Base of every request schema: unknown keys are errors (closed specs)."""

    class Meta:
        unknown = ma.RAISE


class Reference(_Closed):
    """``{"resourceUid": string}`` and nothing else (docs/spec/http-api.md#api-auth)."""

    resourceUid = fields.String(
        required=True,
        validate=validate.Length(min=1, max=64),
        metadata={
            "pattern": ids.HOST_ID_PATTERN,
            "description": "a UID this host issued; any other string is 404 reference_not_found",
        },
    )


# --- per-Form specs ---------------------------------------------------------------------------


class ModuleWorkerSpec(_Closed):
    """ModuleWorker 0.3.0 spec: ``{}`` or ``{"description": string ≤ 1024}`` (docs/spec/worker-forms.md#wf-worker)."""

    description = fields.String(validate=validate.Length(max=MAX_DESCRIPTION))


class WorkflowBinding(_Closed):
    """``{"name": VAR_NAME, "resource": {"resourceUid"}}``: ``env.NAME`` (docs/spec/worker-forms.md#wf-version, docs/spec/durable-workflow.md#dw-binding)."""

    name = fields.String(
        required=True,
        validate=validate.Regexp(identifiers.VAR_NAME_RE, error="must match ^[A-Z_][A-Z0-9_]*$"),
    )
    resource = fields.Nested(Reference, required=True)


class WorkerVersionSpec(_Closed):
    """WorkerVersion 0.5.0 spec (docs/spec/worker-forms.md#wf-version): an immutable code snapshot.

    ``modules``: 1–64 files named ``^[A-Za-z_][A-Za-z0-9_]*\\.py$`` (optionally under package
    directories), each ≤ 1 MiB of UTF-8, total ≤ 4 MiB; ``mainModule`` one of them; ``vars``
    a document (docs/spec/durable-workflow.md#dw-doc) keyed by ``^[A-Z_][A-Z0-9_]*$``; binding names distinct and not
    colliding with a var; ``requirements`` at most 64 exact pins ``name==version`` (optionally
    `` --hash=sha256:<hex>``), each package once (``takohost.domain.requirements``).
    """

    worker = fields.Nested(Reference, required=True)
    mainModule = fields.String(
        required=True,
        metadata={"pattern": identifiers.MODULE_NAME_RE.pattern, "description": "one of the module names"},
    )
    modules = fields.Dict(
        required=True,
        metadata={
            "description": "file name (^[A-Za-z_][A-Za-z0-9_]*\\.py$, optionally under package "
            "directories) → source; each at most 1 MiB of UTF-8, all together at most 4 MiB"
        },
    )
    vars = fields.Dict(
        metadata={
            "description": "a document (docs/spec/durable-workflow.md#dw-doc) keyed by ^[A-Z_][A-Z0-9_]*$; integers within "
            "±(2**53-1), nesting at most 512 levels",
            "maxProperties": documents.MAX_KEYS,
        }
    )
    workflowBindings = fields.List(fields.Nested(WorkflowBinding), validate=validate.Length(max=MAX_BINDINGS))
    requirements = fields.List(
        fields.String(validate=validate.Length(min=1, max=pins.MAX_PIN_CHARS)),
        validate=validate.Length(max=pins.MAX_REQUIREMENTS),
        metadata={
            "description": "third-party packages the host installs from wheels onto the Version's "
            "sys.path: exact pins 'name==version', optionally followed by ' --hash=sha256:<hex>'; "
            "each package once (docs/packages.md)"
        },
    )

    @ma.validates_schema
    def _rules(self, data: dict, **kwargs: object) -> None:
        errors: dict = {}
        if "requirements" in data:
            try:
                pins.parse_requirements(data["requirements"])
            except pins.RequirementError as exc:
                if exc.index is None:
                    errors["requirements"] = [exc.message]
                else:
                    errors["requirements"] = {exc.index: [exc.message]}
        modules = data["modules"]
        if not 1 <= len(modules) <= MAX_MODULES:
            errors["modules"] = [f"must hold 1 to {MAX_MODULES} modules, not {len(modules)}"]
        total = 0
        for name, source in modules.items():
            if not identifiers.MODULE_NAME_RE.match(name):
                errors.setdefault("modules", {})[name] = [
                    "module names must match ^[A-Za-z_][A-Za-z0-9_]*\\.py$ (or pkg/mod.py)"
                ]
            elif type(source) is not str:
                errors.setdefault("modules", {})[name] = ["module source must be a string"]
            else:
                size = len(source.encode("utf-8"))
                total += size
                if size > MAX_MODULE_BYTES:
                    errors.setdefault("modules", {})[name] = [
                        f"module is {size} bytes; at most {MAX_MODULE_BYTES}"
                    ]
        if total > MAX_TOTAL_MODULE_BYTES and "modules" not in errors:
            errors["modules"] = [f"modules total {total} bytes; at most {MAX_TOTAL_MODULE_BYTES}"]
        if data["mainModule"] not in modules:
            errors["mainModule"] = ["must name one of the modules"]
        var_map = data.get("vars", {})
        for name in var_map:
            if not identifiers.VAR_NAME_RE.match(name):
                errors.setdefault("vars", {})[name] = ["var names must match ^[A-Z_][A-Z0-9_]*$"]
        if "vars" not in errors:
            try:
                documents.canonical_document(var_map, allow_none=False, max_depth=documents.VARS_MAX_DEPTH)
            except documents.InvalidDocument as exc:
                errors["vars"] = [PointedMessage(f"not a document: {exc.message}", pointer=exc.pointer)]
            except documents.DocumentTooLargeError as exc:
                errors["vars"] = [str(exc)]
        seen: set[str] = set()
        for index, binding in enumerate(data.get("workflowBindings", [])):
            name = binding["name"]
            if name in var_map:
                errors.setdefault("workflowBindings", {})[index] = {"name": [f"collides with var {name!r}"]}
            elif name in seen:
                errors.setdefault("workflowBindings", {})[index] = {"name": [f"binding {name!r} is repeated"]}
            seen.add(name)
        if errors:
            raise ma.ValidationError(errors)


class PointedMessage(str):
    """An error message that carries its own RFC 6901 ``pointer`` below the field holding it.

    A document error may sit 512 levels deep; spelled as marshmallow's nested error dict it
    would be copied recursively by marshmallow (``copy_containers``) and overflow the stack — a
    500 instead of ``400 invalid_spec``. Kept flat, :func:`_flatten` appends the pointer.
    """

    pointer: str

    def __new__(cls, message: str, *, pointer: str) -> PointedMessage:
        """``message`` (the text) at ``pointer`` (already escaped, ``""`` = the field itself)."""
        self = super().__new__(cls, message)
        self.pointer = pointer
        return self


class DeploymentEntry(_Closed):
    """``{"version": {"resourceUid"}, "weight": 1..100}`` (docs/spec/worker-forms.md#wf-deployment)."""

    version = fields.Nested(Reference, required=True)
    weight = fields.Integer(required=True, strict=True, validate=validate.Range(min=1, max=100))


class WorkerDeploymentSpec(_Closed):
    """WorkerDeployment 0.4.0 spec: 1–10 distinct Versions, weights summing to 100 (docs/spec/worker-forms.md#wf-deployment)."""

    worker = fields.Nested(Reference, required=True)
    versions = fields.List(
        fields.Nested(DeploymentEntry),
        required=True,
        validate=validate.Length(min=1, max=10),
        metadata={"description": "distinct Versions of this Worker whose weights sum to 100"},
    )

    @ma.validates_schema
    def _rules(self, data: dict, **kwargs: object) -> None:
        seen: set[str] = set()
        for index, entry in enumerate(data["versions"]):
            uid = entry["version"]["resourceUid"]
            if uid in seen:
                raise ma.ValidationError(
                    {"versions": {index: {"version": {"resourceUid": ["each Version may appear once"]}}}}
                )
            seen.add(uid)
        total = sum(entry["weight"] for entry in data["versions"])
        if total != 100:
            raise ma.ValidationError({"versions": [f"weights must sum to 100, not {total}"]})


class DurableWorkflowSpec(_Closed):
    """DurableWorkflow 0.3.0 spec (docs/spec/durable-workflow.md#dw-abi "specはworker…とclassName…だけを必須とする")."""

    worker = fields.Nested(Reference, required=True)
    className = fields.String(
        required=True,
        validate=validate.Regexp(
            identifiers.CLASS_NAME_RE, error="must match ^[A-Za-z_$][A-Za-z0-9_$]{{0,63}}$"
        ),
    )


def _valid_cron(expression: str) -> None:
    try:
        cron.parse(expression)
    except cron.CronSyntaxError as exc:
        raise ma.ValidationError(str(exc)) from None


class WorkerCronTriggerSpec(_Closed):
    """WorkerCronTrigger 0.3.0 spec (docs/spec/cron-trigger.md "入力"): ``worker`` and a UTC ``cron``, nothing else."""

    worker = fields.Nested(Reference, required=True)
    cron = fields.String(
        required=True,
        validate=_valid_cron,
        metadata={"minLength": 9, "description": "a strict 5-field UTC cron expression (docs/spec/durable-workflow.md)"},
    )


SPEC_SCHEMAS: dict[str, type[ma.Schema]] = {
    "ModuleWorker": ModuleWorkerSpec,
    "WorkerVersion": WorkerVersionSpec,
    "WorkerDeployment": WorkerDeploymentSpec,
    "DurableWorkflow": DurableWorkflowSpec,
    "WorkerCronTrigger": WorkerCronTriggerSpec,
}


# --- envelopes ----------------------------------------------------------------------------------


class CreateResourceBody(_Closed):
    """``POST …/resources`` body: ``{"form", "name", "spec", "privateInputs"?}`` (docs/spec/http-api.md#api-res).

    ``spec`` is checked against the Form's schema separately; ``privateInputs`` must be absent
    or ``{}``: none of the five Forms takes secret inputs (docs/spec/durable-workflow.md "既定値も秘密入力もない";
    docs/spec/cron-trigger.md#cr-crud "空でない privateInputs は拒否します"; docs/spec/worker-forms.md#wf-worker, docs/spec/worker-forms.md#wf-deployment define none).
    """

    form = fields.String(required=True, metadata={"enum": sorted(forms.FORM_URLS.values())})
    name = fields.String(
        required=True,
        validate=validate.Regexp(
            identifiers.RESOURCE_NAME_RE,
            error="must be 1-63 characters matching ^[a-z0-9]([a-z0-9-]{{0,61}}[a-z0-9])?$",
        ),
        metadata={"minLength": 1, "maxLength": 63},
    )
    spec = fields.Dict(required=True, metadata={"description": "the Form's spec (see the *Spec schemas)"})
    privateInputs = fields.Dict(metadata={"description": "must be absent or empty for all five Forms"})


class UpdateResourceBody(_Closed):
    """``PUT …/resources/{uid}`` body: ``{"spec", "privateInputs"?}``, a whole replacement."""

    spec = fields.Dict(required=True)
    privateInputs = fields.Dict()


@dataclasses.dataclass(frozen=True)
class ValidatedCreate:
    """A create request that passed every pure check: short ``form`` name, ``name``, ``spec``."""

    form: str
    name: str
    spec: dict


def validate_create(body: dict) -> ValidatedCreate:
    """Check a create body (already strict-parsed JSON object) against the envelope and Form schema.

    Raises:
        DomainError: ``invalid_spec`` (with ``details.pointer``), ``unsupported_form``.
    """
    _load(CreateResourceBody, body, prefix="")
    form = forms.FORM_BY_URL.get(body["form"])
    if form is None:
        raise DomainError(
            "unsupported_form",
            f"unsupported Form URL {body['form']!r}",
            {"pointer": "/form", "supported": sorted(forms.FORM_URLS.values())},
        )
    _check_private_inputs(body)
    _load(SPEC_SCHEMAS[form], body["spec"], prefix="/spec")
    return ValidatedCreate(form=form, name=body["name"], spec=body["spec"])


def validate_update(body: dict, *, form: str) -> dict:
    """Check a PUT body for a resource of Form ``form`` (short name); returns the new spec.

    Raises:
        DomainError: ``invalid_spec`` (with ``details.pointer``).
    """
    _load(UpdateResourceBody, body, prefix="")
    _check_private_inputs(body)
    _load(SPEC_SCHEMAS[form], body["spec"], prefix="/spec")
    return body["spec"]


def _check_private_inputs(body: dict) -> None:
    if body.get("privateInputs"):
        raise DomainError(
            "invalid_spec",
            "this Form takes no private inputs; privateInputs must be empty",
            {
                "pointer": "/privateInputs",
                "errors": [{"pointer": "/privateInputs", "message": "must be absent or {}"}],
            },
        )


def _load(schema: type[ma.Schema], data: object, *, prefix: str) -> None:
    try:
        schema().load(data)  # type: ignore[arg-type]
    except ma.ValidationError as exc:
        errors = list(_flatten(exc.messages, prefix))
        pointer, message = errors[0] if errors else (prefix, "invalid")
        raise DomainError(
            "invalid_spec",
            f"{pointer or '/'}: {message}",
            {
                "pointer": pointer,
                "errors": [{"pointer": p, "message": m} for p, m in errors],
            },
        ) from None


def _flatten(messages: object, pointer: str):  # noqa: ANN202 - generator of (pointer, message)
    """Yield ``(JSON pointer, message)`` for marshmallow's nested error dict."""
    if isinstance(messages, dict):
        for key, value in messages.items():
            if key == "_schema":
                yield from _flatten(value, pointer)
            else:
                yield from _flatten(value, pointer + "/" + _escape(key))
    elif isinstance(messages, list):
        for item in messages:
            yield from _flatten(item, pointer)
    elif isinstance(messages, PointedMessage):
        yield pointer + messages.pointer, str(messages)
    else:
        yield pointer, str(messages)


def _escape(token: object) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


# --- response and documentation-only shapes (OpenAPI) -----------------------------------------


class _Answer(ma.Schema):
    """Base of the answer schemas the views dump through (``Schema().dump(value)``).

    ``value`` is a domain value (an ORM row such as ``models.resources.Operation``, or a mapping
    keyed by the schema's snake_case attribute names); each field's ``data_key`` is its camelCase
    wire name. A mapping key the schema does not declare raises ``ValueError`` instead of
    vanishing, so an answer and the OpenAPI document cannot drift apart unnoticed (the suite
    answers 500 first). The wire keys in :attr:`OMITTED_WHEN_NONE` are left out of the answer
    when their value is ``None`` (optional members); every other key is always present, in
    declaration order (the app's JSON provider does not sort keys).
    """

    #: Wire names (``data_key``) of optional members, absent from the answer when ``None``.
    OMITTED_WHEN_NONE: tuple[str, ...] = ()

    @ma.pre_dump(pass_collection=False)
    def _declared_only(self, data: Any, **kwargs: Any) -> Any:
        if isinstance(data, Mapping):
            declared = {field.attribute or name for name, field in self.fields.items()}
            extra = sorted(set(data) - declared)
            if extra:
                raise ValueError(f"{type(self).__name__} does not declare {extra}")
        return data

    @ma.post_dump(pass_collection=False)
    def _omit_absent(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        for key in self.OMITTED_WHEN_NONE:
            if key in data and data[key] is None:
                del data[key]
        return data


class _Timestamp(fields.String):
    """An aware ``datetime`` on the wire as RFC 3339 UTC (``services.operations.rfc3339``:
    ``2026-10-05T12:05:00.123456Z``, microseconds only when non-zero); ``None`` stays ``None``."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else operations.rfc3339(value)


class _Milliseconds(fields.String):
    """An aware ``datetime`` on the wire as RFC 3339 UTC with milliseconds (``services.instance_common.rfc3339``:
    ``2026-10-05T12:05:00.123Z``), the time format of the instance and log answers."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else instance_common.rfc3339(value)


class ErrorDetail(ma.Schema):
    """The error object of docs/spec/http-api.md#api-errors."""

    code = fields.String(required=True)
    message = fields.String(required=True)
    details = fields.Dict()


class ErrorBody(ma.Schema):
    """``{"error": {"code", "message", "details"?}}`` (docs/spec/http-api.md#api-errors)."""

    error = fields.Nested(ErrorDetail, required=True)


class OperationError(_Answer):
    """Why an Operation failed: ``{"code", "message", "details"?}`` (``details.package``: the
    package a WorkerVersion's requirements could not install, docs/packages.md)."""

    code = fields.String(required=True)
    message = fields.String(required=True)
    details = fields.Dict()


class _CheckProgress(fields.Dict):
    """A replay check's progress (``services.operations.check_progress`` of the Operation row);
    ``None`` for every other kind and for a check that has not reported any."""

    def get_value(self, obj: Any, attr: str, accessor: Any = None, default: Any = ma.missing) -> Any:
        return operations.check_progress(obj)


class OperationView(_Answer):
    """An Operation (docs/spec/http-api.md#api-op), dumped from its ``models.resources.Operation``
    row: ``{"id", "kind", "resourceUid", "generation", "state", "effect"?, "error"?, "progress"?,
    "createdAt", "updatedAt"}``; ``effect`` and ``error`` only once failed, ``progress`` only for
    a replay check's."""

    OMITTED_WHEN_NONE = ("effect", "error", "progress")

    id = fields.String(required=True)
    kind = fields.String(required=True, validate=validate.OneOf(["create", "update", "delete", "check"]))
    resource_uid = fields.String(required=True, data_key="resourceUid")
    generation = fields.Integer(required=True)
    state = fields.String(
        required=True, validate=validate.OneOf(["pending", "running", "succeeded", "failed"])
    )
    effect = fields.String(validate=validate.OneOf(["none", "partial", "unknown"]))
    error = fields.Nested(OperationError)
    progress = _CheckProgress(
        metadata={"description": "kind check: how far the replay got, {checked, total, totals}"}
    )
    created_at = _Timestamp(required=True, data_key="createdAt", metadata={"format": "date-time"})
    updated_at = _Timestamp(required=True, data_key="updatedAt", metadata={"format": "date-time"})


class _FormUrl(fields.String):
    """A resource's short Form name (``models.resources.Resource.form``) as its Form URL
    (``services.forms.FORM_URLS``)."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str:
        return forms.FORM_URLS[value]


class _Object(fields.Dict):
    """A JSON object column that may hold ``None`` (nothing recorded yet): written as ``{}``."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> dict | None:
        return super()._serialize({} if value is None else value, attr, obj, **kwargs)


class ResourceView(_Answer):
    """A Resource (docs/spec/http-api.md#api-res), dumped from its ``models.resources.Resource``
    row: ``{"uid", "form", "name", "generation", "spec", "observed", "observedAt"?, "output",
    "phase", "createdAt", "updatedAt", "latestOperationId"}``; ``form`` is the Form URL,
    ``observedAt`` only once something was observed; ``privateInputs`` are never returned."""

    OMITTED_WHEN_NONE = ("observedAt",)

    uid = fields.String(required=True)
    form = _FormUrl(required=True)
    name = fields.String(required=True)
    generation = fields.Integer(required=True)
    spec = fields.Dict(required=True)
    observed = _Object(required=True)
    observed_at = _Timestamp(data_key="observedAt", metadata={"format": "date-time"})
    output = _Object(required=True)
    phase = fields.String(
        required=True, validate=validate.OneOf(["reconciling", "idle", "deleting", "failed"])
    )
    created_at = _Timestamp(required=True, data_key="createdAt", metadata={"format": "date-time"})
    updated_at = _Timestamp(required=True, data_key="updatedAt", metadata={"format": "date-time"})
    latest_operation_id = fields.String(required=True, data_key="latestOperationId")


class ResourceList(_Answer):
    """``{"resources": [...], "nextPageToken"?}``, dumped from ``{"resources": [Resource rows],
    "next_page_token": str | None}`` (``services.resources.list_txn``'s page and token)."""

    OMITTED_WHEN_NONE = ("nextPageToken",)

    resources = fields.List(fields.Nested(ResourceView), required=True)
    next_page_token = fields.String(data_key="nextPageToken")


class InstanceCreateBody(_Closed):
    """``POST …/instances`` body (docs/spec/http-api.md#api-inst): ``{"id"?, "params"?}``."""

    id = fields.String(
        validate=validate.Length(min=1, max=MAX_SCALAR_STRING),
        metadata={"description": "1-256 Unicode scalar values (no lone surrogates)"},
    )
    params = fields.Dict(metadata={"description": "a document (docs/spec/durable-workflow.md#dw-doc)"})


class ReplayCheckBody(_Closed):
    """``POST …/resources/{versionUid}/check`` body (docs/testing.md "Checking a candidate against
    live instances"): ``{"terminal"?}``, how many ended instances per workflow to replay beside the
    live ones (0 to 1000, default 0)."""

    terminal = fields.Integer(
        validate=validate.Range(min=0, max=replay_checks.MAX_TERMINAL),
        metadata={"description": "ended instances per workflow to replay too (newest first); default 0"},
    )


class InstanceId(_Answer):
    """``{"id"}``."""

    id = fields.String(required=True)


class InstanceSummary(_Answer):
    """One row of the instance list (``services.instances.InstanceSummary``)."""

    id = fields.String(required=True)
    status = fields.String(required=True)
    created_at = _Milliseconds(required=True, data_key="createdAt", metadata={"format": "date-time"})


class InstanceList(_Answer):
    """``{"instances": [...], "nextPageToken"?}``, dumped from ``services.instances.InstancePage``."""

    OMITTED_WHEN_NONE = ("nextPageToken",)

    instances = fields.List(fields.Nested(InstanceSummary), required=True)
    next_page_token = fields.String(data_key="nextPageToken")


class InstanceFailure(_Answer):
    """``{"reason", "message"?}`` (the instance's stored error, docs/spec/durable-workflow.md#dw-status)."""

    reason = fields.String(required=True)
    message = fields.String()


class InstanceStatus(_Answer):
    """``{"id", "status", "output"?, "error"?}``, dumped from ``services.instances.InstanceStatus``:
    ``output`` only when complete, ``error`` only when errored."""

    OMITTED_WHEN_NONE = ("output", "error")

    id = fields.String(required=True)
    status = fields.String(
        required=True,
        validate=validate.OneOf(
            ["queued", "running", "sleeping", "waiting", "complete", "errored", "terminated"]
        ),
    )
    output = fields.Dict()
    error = fields.Nested(InstanceFailure)


class EventBody(_Closed):
    """``POST …/instances/{id}/events`` body: ``{"type", "payload"?}``."""

    type = fields.String(
        required=True,
        validate=validate.Length(min=1, max=MAX_SCALAR_STRING),
        metadata={"description": "1-256 Unicode scalar values (no lone surrogates)"},
    )
    payload = fields.Dict(metadata={"description": "a document (docs/spec/durable-workflow.md#dw-doc)"})


class QueuedEvent(_Answer):
    """One unconsumed event (``services.instance_events.QueuedEvent``); ``payload`` only when sent."""

    OMITTED_WHEN_NONE = ("payload",)

    sequence = fields.Integer(required=True)
    type = fields.String(required=True)
    payload = fields.Dict()
    accepted_at = _Milliseconds(required=True, data_key="acceptedAt", metadata={"format": "date-time"})


class EventList(_Answer):
    """``{"events": [...]}`` in acceptance order, dumped from ``{"events": services.instance_events.inbox(…)}``."""

    events = fields.List(fields.Nested(QueuedEvent), required=True)


class TerminateAnswer(_Answer):
    """``{"status"}``."""

    status = fields.String(required=True)


class ProgressStep(_Answer):
    """The step an instance is on: ``{"name", "kind", "attempt"?}`` (``attempt``: do steps, 1-based),
    dumped from ``core.progress.StepView``."""

    OMITTED_WHEN_NONE = ("attempt",)

    name = fields.String(required=True)
    kind = fields.String(required=True, validate=validate.OneOf(["do", "sleep", "wait"]))
    attempt = fields.Integer()


class ProgressContext(_Answer):
    """The latest replay context: ``{"epoch", "startedAt", "versionUid"?}``, dumped from
    ``core.progress.ContextInfo``."""

    OMITTED_WHEN_NONE = ("versionUid",)

    epoch = fields.Integer(required=True)
    started_at = _Milliseconds(required=True, data_key="startedAt", metadata={"format": "date-time"})
    version_uid = fields.String(data_key="versionUid")


class InstanceProgress(_Answer):
    """``GET …/instances/{id}/progress``: what a non-terminal instance does or waits for, dumped
    from ``core.progress.Progress`` (absent members left out); a view beside ``status()``, whose
    shape it leaves alone."""

    OMITTED_WHEN_NONE = (
        "step", "since", "retryAt", "lastError", "wakeAt", "eventType", "timeoutAt", "context", "reason", "message"
    )

    status = fields.String(required=True)
    activity = fields.String(required=True, validate=validate.OneOf(list(progress.ACTIVITIES)))
    step = fields.Nested(ProgressStep)
    since = _Milliseconds(metadata={"format": "date-time"})
    retry_at = _Milliseconds(data_key="retryAt", metadata={"format": "date-time"})
    last_error = fields.Dict(data_key="lastError")
    wake_at = _Milliseconds(data_key="wakeAt", metadata={"format": "date-time"})
    event_type = fields.String(data_key="eventType")
    timeout_at = _Milliseconds(data_key="timeoutAt", metadata={"format": "date-time"})
    context = fields.Nested(ProgressContext)
    reason = fields.String()
    message = fields.String()


class HistoryEvent(_Answer):
    """One history event (docs/spec/durable-workflow.md#dw-history), dumped from the document the
    history serves (``takohost.domain.history.served``: keyed by these wire names, the data replay
    reads)."""

    eventId = fields.Integer(required=True)
    eventTimestamp = fields.String(required=True, metadata={"format": "date-time"})
    eventType = fields.String(required=True)
    attributes = fields.Dict(required=True)


class HistoryPage(_Answer):
    """``{"events": [...], "nextPageToken"?}``, newest last, dumped from
    ``services.instance_history.HistoryPage``."""

    OMITTED_WHEN_NONE = ("nextPageToken",)

    events = fields.List(fields.Nested(HistoryEvent), required=True)
    next_page_token = fields.String(data_key="nextPageToken")


class CronStartedInstance(ma.Schema):
    """An instance a cron delivery's handler created (``env.NAME.create``): its DurableWorkflow's
    UID and its id (docs/spec/cron-trigger.md#cr-runs)."""

    workflow = fields.String(required=True)
    id = fields.String(required=True)


class CronDeliveryView(ma.Schema):
    """One delivery of a cron match (docs/spec/cron-trigger.md#cr-runs)."""

    startedAt = fields.String(required=True, metadata={"format": "date-time"})
    finishedAt = fields.String(metadata={"format": "date-time"})
    outcome = fields.String(required=True, validate=validate.OneOf(["ok", "failed", "unknown"]))
    error = fields.String()
    instances = fields.List(
        fields.Nested(CronStartedInstance),
        metadata={"description": "the DurableWorkflow instances this delivery's handler created, in order"},
    )


class CronRunView(ma.Schema):
    """One recorded (or skipped) match of a trigger (docs/spec/cron-trigger.md#cr-runs)."""

    cron = fields.String(required=True)
    scheduledTime = fields.String(required=True, metadata={"format": "date-time"})
    recordedAt = fields.String(metadata={"format": "date-time"})
    deliveries = fields.List(fields.Nested(CronDeliveryView))
    outcome = fields.String(metadata={"description": "'skipped' for a match never recorded"})
    reason = fields.String()


class CronRunList(ma.Schema):
    """``{"runs": [...], "nextPageToken"?}``, newest first."""

    runs = fields.List(fields.Nested(CronRunView), required=True)
    nextPageToken = fields.String()


class LogLine(_Answer):
    """One captured line of an instance (docs/spec/host-features.md#hf-observability; README "What your code printed, and why it failed"): ``stream`` ``stdout``/``stderr``
    (the tenant's) or ``host`` (markers, failures with their traceback, replay diagnostics)."""

    time = _Milliseconds(required=True, metadata={"format": "date-time"})
    epoch = fields.Integer(required=True, allow_none=True)
    step = fields.String(required=True, allow_none=True)
    attempt = fields.Integer(required=True, allow_none=True)
    stream = fields.String(required=True, validate=validate.OneOf(["stdout", "stderr", "host"]))
    message = fields.String(required=True)
    replayed = fields.Boolean(
        required=True,
        metadata={"description": "printed while the context replayed the steps its history recorded "
                  "(the same code printed it in an earlier context)"},
    )


class LogPage(_Answer):
    """``{"logs": [...], "nextPageToken", "removedLines"}``, oldest first, dumped from
    ``services.tenant_logs.LogPage``; the token is a cursor after the last line (always present:
    poll with it to follow)."""

    logs = fields.List(fields.Nested(LogLine), required=True)
    next_page_token = fields.String(required=True, data_key="nextPageToken")
    removed_lines = fields.Integer(
        required=True, data_key="removedLines", metadata={"description": "oldest lines removed by the cap"}
    )


class RunLogLine(_Answer):
    """One captured line of a cron run: ``delivery`` 1 for the match's first delivery, 2 …"""

    time = _Milliseconds(required=True, metadata={"format": "date-time"})
    delivery = fields.Integer(required=True)
    stream = fields.String(required=True, validate=validate.OneOf(["stdout", "stderr", "host"]))
    message = fields.String(required=True)


class RunLogPage(_Answer):
    """``{"logs": [...], "nextPageToken", "removedLines"}`` of one cron run, oldest first, dumped
    from ``services.tenant_logs.LogPage``."""

    logs = fields.List(fields.Nested(RunLogLine), required=True)
    next_page_token = fields.String(required=True, data_key="nextPageToken")
    removed_lines = fields.Integer(required=True, data_key="removedLines")


class QuotaUse(ma.Schema):
    """One quota of a Space (``services.quotas``): what it holds and the limit (``0``: none)."""

    used = fields.Integer(required=True)
    limit = fields.Integer(required=True, metadata={"description": "0 means no limit"})


class SpaceQuotas(ma.Schema):
    """Every quota of a Space, by name."""

    liveInstances = fields.Nested(QuotaUse, required=True, metadata={"description": "instances not yet terminal"})
    storedEvents = fields.Nested(
        QuotaUse, required=True, metadata={"description": "accepted sendEvent events not yet consumed"}
    )
    logBytes = fields.Nested(
        QuotaUse, required=True, metadata={"description": "stored log lines: UTF-8 bytes + 64 per line"}
    )
    versionCodeBytes = fields.Nested(
        QuotaUse, required=True, metadata={"description": "module sources of live WorkerVersions, bytes"}
    )
    layerBytes = fields.Nested(QuotaUse, required=True, metadata={"description": "package layers, bytes"})


class SpaceUsage(ma.Schema):
    """``{"space", "quotas"}``: what the Space holds against each quota (docs/operations.md "Quotas")."""

    space = fields.String(required=True)
    quotas = fields.Nested(SpaceQuotas, required=True)


class Empty(_Answer):
    """``{}``."""


class Health(_Answer):
    """``{"ok": true}``."""

    ok = fields.Boolean(required=True)
