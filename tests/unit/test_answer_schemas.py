"""The answer schemas views dump through (``host_api.schemas._Answer``): an Operation or Resource
row dumps to the same JSON text its answer always had (fixed below, docs/spec/http-api.md#api-op,
docs/spec/http-api.md#api-res), and a key the schema does not declare fails loudly rather than
vanishing from the answer (and from the OpenAPI document)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from core import progress
from host_api import schemas
from models import instances as inst_models
from models import resources as res_models
from services import instance_events, instance_history, instances, tenant_logs

# --- golden answers: every Operation state and kind, every resource Form -------------------------
#
# What ``GET …/operations/{id}``, a mutation's 202 and ``GET …/resources[/{uid}]`` answer for a
# given row, as fixed JSON text (keys in wire order: the app's JSON provider does not sort them).
# The rows are transient ORM objects; the app's answer is ``flask.jsonify`` of the dump.

T0 = dt.datetime(2026, 10, 5, 12, 5, 0, 123456, tzinfo=dt.UTC)
#: Another zone, no microseconds: written in UTC, without a fraction.
T1 = dt.datetime(2026, 10, 5, 14, 6, 7, tzinfo=dt.timezone(dt.timedelta(hours=2)))
STAMPS = '"createdAt": "2026-10-05T12:05:00.123456Z", "updatedAt": "2026-10-05T12:06:07Z"'
PROGRESS = {"checked": 2, "total": 5, "totals": {"ok": 1, "diverged": 1}, "checkedAt": "2026-10-05T12:06:00Z"}
ERROR = {"code": "package_unavailable", "message": "no wheel", "details": {"package": "numpy", "tried": [1, 2]}}


def _operation(kind: str, state: str, *, effect=None, error=None, request=None) -> res_models.Operation:
    return res_models.Operation(
        id="op-1", space="s", kind=kind, resource_uid="res-1", generation=3, state=state,
        effect=effect, error=error, request=request, attempts=1, next_attempt_at=None,
        created_at=T0, updated_at=T1,
    )


def _head(kind: str, state: str) -> str:
    return f'{{"id": "op-1", "kind": "{kind}", "resourceUid": "res-1", "generation": 3, "state": "{state}"'


OPERATIONS = [
    pytest.param(_operation("create", "pending", request={"form": "x"}), _head("create", "pending") + f", {STAMPS}}}",
                 id="create-pending"),
    pytest.param(_operation("update", "running"), _head("update", "running") + f", {STAMPS}}}", id="update-running"),
    pytest.param(_operation("delete", "succeeded"), _head("delete", "succeeded") + f", {STAMPS}}}",
                 id="delete-succeeded"),
    pytest.param(
        _operation("create", "failed", effect="none", error=ERROR),
        _head("create", "failed") + ', "effect": "none", "error": {"code": "package_unavailable", "message": '
        f'"no wheel", "details": {{"package": "numpy", "tried": [1, 2]}}}}, {STAMPS}}}',
        id="create-failed-error-with-details",
    ),
    pytest.param(
        _operation("update", "failed", effect="partial", error={"code": "c", "message": "m"}),
        _head("update", "failed") + f', "effect": "partial", "error": {{"code": "c", "message": "m"}}, {STAMPS}}}',
        id="update-failed-partial",
    ),
    pytest.param(
        _operation("delete", "failed", effect="unknown", error={"code": "c", "message": "m"}),
        _head("delete", "failed") + f', "effect": "unknown", "error": {{"code": "c", "message": "m"}}, {STAMPS}}}',
        id="delete-failed-unknown",
    ),
    pytest.param(_operation("check", "pending", request={"terminal": 3}), _head("check", "pending") + f", {STAMPS}}}",
                 id="check-pending-without-progress"),
    pytest.param(_operation("check", "running", request=None), _head("check", "running") + f", {STAMPS}}}",
                 id="check-running-without-request"),
    pytest.param(
        _operation("check", "running", request={"terminal": 3, "progress": PROGRESS}),
        _head("check", "running") + ', "progress": {"checked": 2, "total": 5, "totals": {"ok": 1, "diverged": 1}, '
        f'"checkedAt": "2026-10-05T12:06:00Z"}}, {STAMPS}}}',
        id="check-running-with-progress",
    ),
    pytest.param(
        _operation("check", "succeeded", request={"progress": {"checked": 5, "total": 5, "totals": {}}}),
        _head("check", "succeeded") + f', "progress": {{"checked": 5, "total": 5, "totals": {{}}}}, {STAMPS}}}',
        id="check-succeeded-with-progress",
    ),
    pytest.param(
        _operation("check", "failed", effect="none", error=ERROR, request={"progress": {"checked": 0, "total": 1}}),
        _head("check", "failed") + ', "effect": "none", "error": {"code": "package_unavailable", "message": '
        '"no wheel", "details": {"package": "numpy", "tried": [1, 2]}}, "progress": {"checked": 0, "total": 1}, '
        f'{STAMPS}}}',
        id="check-failed-error-and-progress",
    ),
    pytest.param(
        _operation("update", "running", request={"progress": PROGRESS}), _head("update", "running") + f", {STAMPS}}}",
        id="progress-only-for-a-check",
    ),
]


def _operation_answer(op: res_models.Operation) -> str:
    return json.dumps(schemas.OperationView().dump(op))


@pytest.mark.parametrize("op, expected", OPERATIONS)
def test_an_operation_answers_fixed_json(op, expected):
    assert _operation_answer(op) == expected


def _resource(form: str, **more) -> res_models.Resource:
    values = dict(
        uid="res-1", space="s", form=form, name="orders", generation=2, spec={"b": 1, "a": [True, None]},
        private_inputs={"secret": "never returned"}, observed={}, observed_at=None, output={}, phase="idle",
        worker_uid=None, latest_operation_id="op-9", created_at=T0, updated_at=T1, deleted_at=None,
    )
    values.update(more)
    return res_models.Resource(**values)


def _form(form: str) -> str:
    return f'{{"uid": "res-1", "form": "https://edge.forms.takoform.com/forms/{form}'


RESOURCE_STAMPS = STAMPS + ', "latestOperationId": "op-9"}'
RESOURCES = [
    pytest.param(
        _resource("ModuleWorker", observed=None, output=None, phase="reconciling"),
        _form("ModuleWorker") + '/0.3.0/", "name": "orders", "generation": 2, "spec": {"b": 1, "a": [true, null]}, '
        f'"observed": {{}}, "output": {{}}, "phase": "reconciling", {RESOURCE_STAMPS}',
        id="ModuleWorker-nothing-observed",
    ),
    pytest.param(
        _resource("WorkerVersion", observed={"replayCheck": {"state": "ok"}}, observed_at=T0, worker_uid="w"),
        _form("WorkerVersion") + '/0.5.0/", "name": "orders", "generation": 2, "spec": {"b": 1, "a": [true, null]}, '
        '"observed": {"replayCheck": {"state": "ok"}}, "observedAt": "2026-10-05T12:05:00.123456Z", '
        f'"output": {{}}, "phase": "idle", {RESOURCE_STAMPS}',
        id="WorkerVersion-observed",
    ),
    pytest.param(
        _resource("WorkerDeployment", observed_at=T1, output={"active": ["v"]}),
        _form("WorkerDeployment") + '/0.4.0/", "name": "orders", "generation": 2, "spec": {"b": 1, "a": [true, null]}, '
        '"observed": {}, "observedAt": "2026-10-05T12:06:07Z", '
        f'"output": {{"active": ["v"]}}, "phase": "idle", {RESOURCE_STAMPS}',
        id="WorkerDeployment-output",
    ),
    pytest.param(
        _resource("DurableWorkflow", phase="deleting"),
        _form("DurableWorkflow") + '/0.3.0/", "name": "orders", "generation": 2, "spec": {"b": 1, "a": [true, null]}, '
        f'"observed": {{}}, "output": {{}}, "phase": "deleting", {RESOURCE_STAMPS}',
        id="DurableWorkflow-deleting",
    ),
    pytest.param(
        _resource("WorkerCronTrigger", phase="failed", latest_operation_id=None),
        _form("WorkerCronTrigger") + '/0.3.0/", "name": "orders", "generation": 2, "spec": {"b": 1, "a": [true, null]}, '
        f'"observed": {{}}, "output": {{}}, "phase": "failed", {STAMPS}, "latestOperationId": null}}',
        id="WorkerCronTrigger-no-latest-operation",
    ),
]


def _resource_answer(resource: res_models.Resource) -> str:
    return json.dumps(schemas.ResourceView().dump(resource))


def _list_answer(rows: list[res_models.Resource], token: str | None) -> str:
    return json.dumps(schemas.ResourceList().dump({"resources": rows, "next_page_token": token}))


@pytest.mark.parametrize("resource, expected", RESOURCES)
def test_a_resource_answers_fixed_json(resource, expected):
    assert _resource_answer(resource) == expected


def test_a_resource_list_answers_fixed_json():
    rows = [param.values[0] for param in RESOURCES]
    bodies = ", ".join(param.values[1] for param in RESOURCES)
    assert _list_answer(rows, "tok") == f'{{"resources": [{bodies}], "nextPageToken": "tok"}}'
    assert _list_answer(rows[:1], None) == f'{{"resources": [{RESOURCES[0].values[1]}]}}'
    assert _list_answer([], None) == '{"resources": []}'


# --- instance answers: dumped from the services' values -------------------------------------------
#
# ``GET …/instances/{id}`` (and a binding's ``status``, the same without ``id``), the list, the
# inbox, the history and the log pages; tests/integration/test_answer_bodies.py checks the same
# texts through the app from stored rows.

MS = "2026-10-05T12:05:00.123Z"


def _instance(status: str, *, output=None, error=None) -> inst_models.Instance:
    return inst_models.Instance(instance_id="i-1", status=status, output=output, error=error)


STATUSES = [
    pytest.param(_instance("complete", output={"b": 1, "a": [True, None]}),
                 '{"id": "i-1", "status": "complete", "output": {"b": 1, "a": [true, null]}}', id="complete"),
    pytest.param(_instance("complete"), '{"id": "i-1", "status": "complete"}', id="complete-without-output"),
    pytest.param(_instance("errored", error={"reason": "run_threw", "message": "boom"}),
                 '{"id": "i-1", "status": "errored", "error": {"reason": "run_threw", "message": "boom"}}', id="errored"),
    pytest.param(_instance("errored", error={"reason": "lifetime_exceeded"}),
                 '{"id": "i-1", "status": "errored", "error": {"reason": "lifetime_exceeded"}}',
                 id="errored-without-message"),
    pytest.param(_instance("running", output={"stale": 1}, error={"reason": "stale"}),
                 '{"id": "i-1", "status": "running"}', id="output-and-error-only-when-terminal"),
]


@pytest.mark.parametrize("row, expected", STATUSES)
def test_an_instance_status_answers_fixed_json(row, expected):
    value = instances.InstanceStatus.of(row)
    assert json.dumps(schemas.InstanceStatus().dump(value)) == expected
    assert json.dumps(value.document()) == expected.replace('"id": "i-1", ', "", 1)  # a binding's status answer


def test_the_instance_list_answers_fixed_json():
    rows = [instances.InstanceSummary(id=f"i-{n}", status="queued", created_at=T0) for n in (1, 2)]
    text = ", ".join(f'{{"id": "i-{n}", "status": "queued", "createdAt": "{MS}"}}' for n in (1, 2))
    dump = schemas.InstanceList().dump
    assert json.dumps(dump(instances.InstancePage(rows, "tok"))) == f'{{"instances": [{text}], "nextPageToken": "tok"}}'
    assert json.dumps(dump(instances.InstancePage(rows))) == f'{{"instances": [{text}]}}'
    assert json.dumps(dump(instances.InstancePage([]))) == '{"instances": []}'


def test_the_inbox_answers_fixed_json():
    events = [
        instance_events.QueuedEvent(sequence=1, type="a", payload={"k": 1}, accepted_at=T0),
        instance_events.QueuedEvent(sequence=2, type="b", payload=None, accepted_at=T1),
    ]
    assert json.dumps(schemas.EventList().dump({"events": events})) == (
        f'{{"events": [{{"sequence": 1, "type": "a", "payload": {{"k": 1}}, "acceptedAt": "{MS}"}}, '
        '{"sequence": 2, "type": "b", "acceptedAt": "2026-10-05T12:06:07.000Z"}]}'
    )
    assert json.dumps(schemas.Empty().dump({})) == "{}"  # sendEvent's 202


def test_the_history_answers_fixed_json():
    event = {"eventId": 1, "eventTimestamp": MS, "eventType": "InstanceCreated", "attributes": {"b": 1, "a": {}}}
    text = f'{{"eventId": 1, "eventTimestamp": "{MS}", "eventType": "InstanceCreated", "attributes": {{"b": 1, "a": {{}}}}}}'
    dump = schemas.HistoryPage().dump
    assert json.dumps(dump(instance_history.HistoryPage([event], "tok"))) == f'{{"events": [{text}], "nextPageToken": "tok"}}'
    assert json.dumps(dump(instance_history.HistoryPage([event]))) == f'{{"events": [{text}]}}'


def test_the_log_pages_answer_fixed_json():
    lines = [
        tenant_logs.InstanceLine(time=T0, epoch=1, step="s", attempt=1, stream="stdout", message="one", replayed=False),
        tenant_logs.InstanceLine(time=T0, epoch=None, step=None, attempt=None, stream="host", message="two", replayed=True),
    ]
    assert json.dumps(schemas.LogPage().dump(tenant_logs.LogPage(lines, "tok", 2))) == (
        f'{{"logs": [{{"time": "{MS}", "epoch": 1, "step": "s", "attempt": 1, "stream": "stdout", "message": "one", '
        f'"replayed": false}}, {{"time": "{MS}", "epoch": null, "step": null, "attempt": null, "stream": "host", '
        '"message": "two", "replayed": true}], "nextPageToken": "tok", "removedLines": 2}'
    )
    run = [tenant_logs.RunLine(time=T0, delivery=2, stream="stderr", message="m")]
    assert json.dumps(schemas.RunLogPage().dump(tenant_logs.LogPage(run, "tok", 0))) == (
        f'{{"logs": [{{"time": "{MS}", "delivery": 2, "stream": "stderr", "message": "m"}}], "nextPageToken": "tok", '
        '"removedLines": 0}'
    )
    assert json.dumps(schemas.LogPage().dump(tenant_logs.LogPage([], "tok", 0))) == (
        '{"logs": [], "nextPageToken": "tok", "removedLines": 0}'
    )


def test_the_progress_answers_fixed_json():
    # Keys in the schema's order whatever the path (before, a pending step's answer had ``step``
    # before ``activity`` and a running one after it; clients parse objects, the members are the same).
    context = progress.ContextInfo(epoch=3, started_at=T0, version_uid="v-1", ended=True)
    retrying = progress.Progress(
        status="running", activity="retrying", step=progress.StepView(name="charge", kind="do", attempt=2),
        retry_at=T1, last_error={"type": "E", "message": "m"}, context=context,
    )
    assert json.dumps(schemas.InstanceProgress().dump(retrying)) == (
        '{"status": "running", "activity": "retrying", "step": {"name": "charge", "kind": "do", "attempt": 2}, '
        '"retryAt": "2026-10-05T12:06:07.000Z", "lastError": {"type": "E", "message": "m"}, '
        f'"context": {{"epoch": 3, "startedAt": "{MS}", "versionUid": "v-1"}}}}'
    )
    waiting = progress.Progress(
        status="waiting", activity="waiting", step=progress.StepView(name="ok", kind="wait"), event_type="approved",
        timeout_at=T0, context=progress.ContextInfo(epoch=1, started_at=T0),
    )
    assert json.dumps(schemas.InstanceProgress().dump(waiting)) == (
        f'{{"status": "waiting", "activity": "waiting", "step": {{"name": "ok", "kind": "wait"}}, "eventType": "approved", '
        f'"timeoutAt": "{MS}", "context": {{"epoch": 1, "startedAt": "{MS}"}}}}'
    )
    running = progress.Progress(
        status="running", activity="running", step=progress.StepView(name="s", kind="do", attempt=1), since=T0
    )
    assert json.dumps(schemas.InstanceProgress().dump(running)) == (
        f'{{"status": "running", "activity": "running", "step": {{"name": "s", "kind": "do", "attempt": 1}}, "since": "{MS}"}}'
    )
    sleeping = progress.Progress(status="sleeping", activity="sleeping", step=progress.StepView("nap", "sleep"), wake_at=T0)
    assert json.dumps(schemas.InstanceProgress().dump(sleeping)) == (
        f'{{"status": "sleeping", "activity": "sleeping", "step": {{"name": "nap", "kind": "sleep"}}, "wakeAt": "{MS}"}}'
    )
    queued = progress.Progress(status="queued", activity="queued", reason="no_version", message="no Deployment")
    assert json.dumps(schemas.InstanceProgress().dump(queued)) == (
        '{"status": "queued", "activity": "queued", "reason": "no_version", "message": "no Deployment"}'
    )


@pytest.mark.parametrize("schema, value", [
    (schemas.OperationView, {"id": "op", "surprise": 1}),
    (schemas.OperationView, _operation("update", "failed", effect="none", error={"code": "c", "message": "m", "hint": "h"})),
    (schemas.ResourceList, {"resources": [{"uid": "u", "secret": "s"}]}),
    (schemas.ResourceList, {"resources": [], "nextPageToken": "t"}),  # the wire name, not the attribute
    (schemas.InstanceId, {"id": "x", "status": "queued"}),
    (schemas.TerminateAnswer, {"status": "terminated", "by": "me"}),
    (schemas.InstanceStatus, instances.InstanceStatus(id="i", status="errored", error={"reason": "r", "hint": "h"})),
    (schemas.HistoryPage, instance_history.HistoryPage([{"eventId": 1, "eventType": "X", "extra": 1}])),
    (schemas.EventList, {"events": [], "nextPageToken": "t"}),
    (schemas.Empty, {"accepted": True}),
])
def test_an_undeclared_key_raises_instead_of_vanishing(schema, value):
    with pytest.raises(ValueError, match="does not declare"):
        schema().dump(value)
