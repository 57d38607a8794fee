"""The reconcile's retry paths (docs/spec/http-api.md#api-op; docs/spec/durable-workflow.md#dw-delete DELETE "停止・fenceを証明できない間は成功にせず、
同じOperationで照合を続ける")."""

from __future__ import annotations

import pytest

from tests.integration.test_resources_support import (
    create_ok,
    headers,
    post,
    version_spec,
)

pytestmark = pytest.mark.usefixtures("no_dispatch")


def _op(client, space, token, op_id):
    return client.get(f"/v2/spaces/{space}/operations/{op_id}", headers=headers(token, None)).get_json()


def test_workflow_delete_stays_running_until_the_purge_is_proven(client, space_token, monkeypatch):
    from services import instance_stop
    from workers import operations_tasks

    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    workflow = create_ok(
        client,
        space,
        token,
        "DurableWorkflow",
        {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"},
    )
    answers = [False, False, True]
    calls = []

    def purge(uid, *, now):
        calls.append(uid)
        return answers.pop(0)

    monkeypatch.setattr(instance_stop, "purge_workflow", purge)
    op = client.delete(f"/v2/spaces/{space}/resources/{workflow}", headers=headers(token)).get_json()
    assert operations_tasks.reconcile(op["id"]) == "retry"
    assert _op(client, space, token, op["id"])["state"] == "running"
    assert (
        client.get(f"/v2/spaces/{space}/resources/{workflow}", headers=headers(token, None)).get_json()[
            "phase"
        ]
        == "deleting"
    )
    assert operations_tasks.reconcile(op["id"]) == "retry"
    assert operations_tasks.reconcile(op["id"]) == "done"
    assert calls == [workflow] * 3
    assert _op(client, space, token, op["id"])["state"] == "succeeded"
    assert (
        client.get(f"/v2/spaces/{space}/resources/{workflow}", headers=headers(token, None)).status_code
        == 404
    )


def test_unexpected_errors_are_retried_then_fail_with_effect_unknown(client, space_token, monkeypatch):
    from workers import operations_tasks
    from workers.sandbox import validation

    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})

    def broken(spec, settings=None):
        raise RuntimeError("zygote unavailable")

    monkeypatch.setattr(validation, "validate_spec", broken)
    op = post(client, space, token, "WorkerVersion", version_spec(worker)).get_json()
    # The control process hands a Version's reconcile to the validation process, unchanged.
    assert operations_tasks.reconcile(op["id"]) == "forwarded"
    assert _op(client, space, token, op["id"])["state"] == "pending"
    for _ in range(operations_tasks.MAX_ATTEMPTS - 1):
        assert operations_tasks.reconcile(op["id"], validate=True) == "retry"
        assert _op(client, space, token, op["id"])["state"] == "running"
    assert operations_tasks.reconcile(op["id"], validate=True) == "done"
    final = _op(client, space, token, op["id"])
    assert final["state"] == "failed" and final["effect"] == "unknown"
    assert final["error"]["code"] == "internal_error" and "zygote" not in final["error"]["message"]
    # A final Operation is never reconciled again.
    monkeypatch.undo()
    assert operations_tasks.reconcile(op["id"]) == "done"
    assert _op(client, space, token, op["id"])["state"] == "failed"
