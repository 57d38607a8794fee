"""Resources over HTTP: shape, names, generations, phases, listing (docs/spec/http-api.md#api-res, API-res)."""

from __future__ import annotations

import re

import pytest

from tests.integration.test_resources_support import (
    FORMS,
    MAIN_FULL,
    create_ok,
    deployed_worker,
    deployment_spec,
    headers,
    hold,
    name,
    post,
    settle,
    version_spec,
)

pytestmark = pytest.mark.usefixtures("no_dispatch")

RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")


def get(client, space, token, uid):
    return client.get(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, None))


def test_create_answers_202_operation_with_location_then_resource_shape(client, space_token):
    space, token = space_token
    response = post(client, space, token, "ModuleWorker", {"description": "orders"}, res_name="orders")
    assert response.status_code == 202
    op = response.get_json()
    assert set(op) == {"id", "kind", "resourceUid", "generation", "state", "createdAt", "updatedAt"}
    assert op["kind"] == "create" and op["generation"] == 1 and op["state"] == "pending"
    assert response.headers["Location"] == f"/v2/spaces/{space}/operations/{op['id']}"
    with hold(op["id"]):
        before = get(client, space, token, op["resourceUid"]).get_json()
    assert before["phase"] == "reconciling" and before["observed"] == {} and "observedAt" not in before
    assert settle(op["id"])["state"] == "succeeded"
    resource = get(client, space, token, op["resourceUid"]).get_json()
    assert set(resource) == {
        "uid",
        "form",
        "name",
        "generation",
        "spec",
        "observed",
        "observedAt",
        "output",
        "phase",
        "createdAt",
        "updatedAt",
        "latestOperationId",
    }
    assert resource["form"] == FORMS["ModuleWorker"] and resource["name"] == "orders"
    assert resource["spec"] == {"description": "orders"} and resource["output"] == {}
    assert resource["phase"] == "idle" and resource["latestOperationId"] == op["id"]
    for field in ("createdAt", "updatedAt", "observedAt"):
        assert RFC3339_Z.match(resource[field]), resource[field]
    fetched = client.get(response.headers["Location"], headers=headers(token, None)).get_json()
    assert fetched["state"] == "succeeded" and fetched["id"] == op["id"] and "effect" not in fetched


def test_name_conflict_among_live_resources_and_reuse_after_delete_gives_new_uid(client, space_token):
    space, token = space_token
    first = create_ok(client, space, token, "ModuleWorker", {}, res_name="dup")
    clash = post(
        client,
        space,
        token,
        "DurableWorkflow",
        {"worker": {"resourceUid": first}, "className": "X"},
        res_name="dup",
    )
    assert clash.status_code == 409 and clash.get_json()["error"]["code"] == "name_conflict"
    deleted = client.delete(f"/v2/spaces/{space}/resources/{first}", headers=headers(token))
    assert deleted.status_code == 202 and deleted.get_json()["kind"] == "delete"
    with hold(deleted.get_json()["id"]):
        assert get(client, space, token, first).get_json()["phase"] == "deleting"
    assert settle(deleted.get_json()["id"])["state"] == "succeeded"
    assert get(client, space, token, first).status_code == 404
    again = create_ok(client, space, token, "ModuleWorker", {}, res_name="dup")
    assert again != first
    assert get(client, space, token, again).get_json()["generation"] == 1


def test_names_are_per_space(client, space_token, db_url):
    from models import db as models_db
    from services import tokens

    space, token = space_token
    with models_db.session_scope(db_url) as session:
        other_token = tokens.create_token_txn(session, space=space + "-b")
    create_ok(client, space, token, "ModuleWorker", {}, res_name="same")
    create_ok(client, space + "-b", other_token, "ModuleWorker", {}, res_name="same")


def test_put_bumps_generation_and_identical_spec_still_makes_a_new_operation(client, space_token):
    space, token = space_token
    uid = create_ok(client, space, token, "ModuleWorker", {"description": "a"})
    ops = []
    for description in ("b", "b"):
        response = client.put(
            f"/v2/spaces/{space}/resources/{uid}",
            json={"spec": {"description": description}},
            headers=headers(token),
        )
        assert response.status_code == 202
        op = response.get_json()
        assert op["kind"] == "update"
        ops.append(op)
        with hold(op["id"]):
            assert get(client, space, token, uid).get_json()["phase"] == "reconciling"
        assert settle(op["id"])["state"] == "succeeded"
    assert ops[0]["id"] != ops[1]["id"]
    assert [op["generation"] for op in ops] == [2, 3]
    resource = get(client, space, token, uid).get_json()
    assert resource["generation"] == 3 and resource["spec"] == {"description": "b"}
    assert resource["latestOperationId"] == ops[1]["id"] and resource["phase"] == "idle"


def test_private_inputs_are_never_returned_and_empty_ones_are_accepted(client, space_token):
    space, token = space_token
    uid = create_ok(client, space, token, "ModuleWorker", {}, extra={"privateInputs": {}})
    resource = get(client, space, token, uid).get_json()
    assert "privateInputs" not in resource
    listing = client.get(f"/v2/spaces/{space}/resources", headers=headers(token, None)).get_json()
    assert all("privateInputs" not in r for r in listing["resources"])


def test_listing_filters_by_exact_form_url_and_pages(client, space_token):
    space, token = space_token
    workers = [create_ok(client, space, token, "ModuleWorker", {}, res_name=f"w{i}") for i in range(5)]
    create_ok(
        client, space, token, "DurableWorkflow", {"worker": {"resourceUid": workers[0]}, "className": "A"}
    )
    seen, token_param = [], None
    while True:
        query = {"form": FORMS["ModuleWorker"], "limit": "2"}
        if token_param:
            query["pageToken"] = token_param
        page = client.get(f"/v2/spaces/{space}/resources", query_string=query, headers=headers(token, None))
        assert page.status_code == 200
        body = page.get_json()
        assert len(body["resources"]) <= 2
        seen += [r["uid"] for r in body["resources"]]
        token_param = body.get("nextPageToken")
        if not token_param:
            break
    assert seen == workers
    everything = client.get(f"/v2/spaces/{space}/resources", headers=headers(token, None)).get_json()
    assert len(everything["resources"]) == 6 and "nextPageToken" not in everything
    # docs/spec/host-features.md#hf-newcomer: the short Form name is accepted as well as the URL, with the same answer
    by_url = client.get(
        f"/v2/spaces/{space}/resources",
        query_string={"form": FORMS["ModuleWorker"]},
        headers=headers(token, None),
    ).get_json()
    short = client.get(
        f"/v2/spaces/{space}/resources", query_string={"form": "ModuleWorker"}, headers=headers(token, None)
    )
    assert short.status_code == 200 and short.get_json() == by_url
    bad_form = client.get(
        f"/v2/spaces/{space}/resources", query_string={"form": "Nope"}, headers=headers(token, None)
    )
    assert bad_form.status_code == 400 and bad_form.get_json()["error"]["code"] == "unsupported_form"
    bad_token = client.get(
        f"/v2/spaces/{space}/resources", query_string={"pageToken": "garbage!"}, headers=headers(token, None)
    )
    assert bad_token.status_code == 400 and bad_token.get_json()["error"]["code"] == "invalid_request"


def test_deleted_resources_are_not_listed_nor_fetchable_nor_mutable(client, space_token):
    space, token = space_token
    uid = create_ok(client, space, token, "ModuleWorker", {})
    op = client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token)).get_json()
    settle(op["id"])
    listing = client.get(f"/v2/spaces/{space}/resources", headers=headers(token, None)).get_json()
    assert uid not in [r["uid"] for r in listing["resources"]]
    for response in (
        client.put(f"/v2/spaces/{space}/resources/{uid}", json={"spec": {}}, headers=headers(token)),
        client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token)),
    ):
        assert response.status_code == 404 and response.get_json()["error"]["code"] == "not_found"


def test_unknown_operation_and_another_spaces_operation_are_404(client, space_token, db_url):
    from models import db as models_db
    from services import tokens

    space, token = space_token
    op = post(client, space, token, "ModuleWorker", {}).get_json()
    with models_db.session_scope(db_url) as session:
        other_token = tokens.create_token_txn(session, space=space + "-o")
    other = client.get(f"/v2/spaces/{space}-o/operations/{op['id']}", headers=headers(other_token, None))
    assert other.status_code == 404
    assert client.get(f"/v2/spaces/{space}/operations/nope", headers=headers(token, None)).status_code == 404


def test_a_token_of_another_space_is_404_saying_the_space_or_token_is_wrong(client, space_token):
    """docs/spec/host-features.md#hf-newcomer: a wrong ``--space`` is not "no such resource or route"; the answer still
    does not reveal whether the Space exists (docs/spec/http-api.md#api-auth)."""
    space, token = space_token
    for other in (space + "-x", "no-such-space-at-all"):
        answer = client.get(f"/v2/spaces/{other}/resources", headers=headers(token, None))
        assert answer.status_code == 404
        error = answer.get_json()["error"]
        assert error["code"] == "not_found"
        assert "the Space or the token is wrong" in error["message"] and other in error["message"]


def test_worker_version_validation_records_classes_and_handlers(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    main = MAIN_FULL + (
        "class NotAWorkflow:\n    run = 5\n"
        "class AlsoWorkflow:\n    def __init__(self, env):\n        pass\n"
        "    async def run(self, event, step):\n        return None\n"
        "class NoEnvArgument:\n    def run(self, event, step):\n        return None\n"
        "from helper import Imported\n"
    )
    spec = version_spec(worker, main, vars={"CURRENCY": "EUR"})
    spec["modules"]["helper.py"] = (
        "class Imported:\n    def __init__(self, env):\n        pass\n"
        "    def run(self, e, s):\n        pass\n"
    )
    version = create_ok(client, space, token, "WorkerVersion", spec)
    observed = get(client, space, token, version).get_json()["observed"]
    assert observed == {
        "validated": True,
        "workflowClasses": ["AlsoWorkflow", "Imported", "ReportWorkflow"],
        "handlers": ["scheduled"],
    }


def test_worker_version_import_error_fails_the_operation_with_the_last_traceback_line(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    response = post(
        client, space, token, "WorkerVersion", version_spec(worker, "import nonexistent_mod_xyz\n")
    )
    op = settle(response.get_json()["id"])
    assert op["state"] == "failed" and op["effect"] == "partial"
    assert op["error"]["code"] == "validation_failed"
    assert "No module named 'nonexistent_mod_xyz'" in op["error"]["message"]
    assert "Traceback" not in op["error"]["message"]
    resource = get(client, space, token, op["resourceUid"]).get_json()
    assert resource["phase"] == "failed" and resource["observed"]["validated"] is False


def test_worker_version_that_exits_or_loops_fails_cleanly(client, space_token, monkeypatch):
    monkeypatch.setenv("TAKOHOST_VALIDATION_TIMEOUT_S", "1.5")
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    cases = {
        "import sys\nsys.exit(3)\n": "",
        "while True:\n    pass\n": "1.5 s",
        "import os\nos._exit(0)\n": "",
    }
    for source, needle in cases.items():
        op = settle(
            post(client, space, token, "WorkerVersion", version_spec(worker, source)).get_json()["id"]
        )
        assert op["state"] == "failed" and op["effect"] == "partial", (source, op)
        assert op["error"]["message"] and needle in op["error"]["message"], op


def test_deployment_applied_allocation_is_observed(client, space_token):
    space, token = space_token
    worker, version, deployment = deployed_worker(client, space, token)
    resource = get(client, space, token, deployment).get_json()
    assert resource["observed"]["versions"] == [{"version": {"resourceUid": version}, "weight": 100}]
    second = create_ok(client, space, token, "WorkerVersion", version_spec(worker))
    op = client.put(
        f"/v2/spaces/{space}/resources/{deployment}",
        json={"spec": deployment_spec(worker, (version, 50), (second, 50))},
        headers=headers(token),
    )
    assert op.status_code == 202
    settle(op.get_json()["id"])
    resource = get(client, space, token, deployment).get_json()
    assert [e["weight"] for e in resource["observed"]["versions"]] == [50, 50]


def test_workflow_ready_follows_the_deployment(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    workflow = create_ok(
        client,
        space,
        token,
        "DurableWorkflow",
        {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"},
    )
    observed = get(client, space, token, workflow).get_json()["observed"]
    assert observed["ready"] is False
    assert observed["instanceCounts"] == {
        s: 0 for s in ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")
    }
    version = create_ok(client, space, token, "WorkerVersion", version_spec(worker))
    deployment = create_ok(client, space, token, "WorkerDeployment", deployment_spec(worker, (version, 100)))
    assert get(client, space, token, workflow).get_json()["observed"]["ready"] is True
    op = client.delete(f"/v2/spaces/{space}/resources/{deployment}", headers=headers(token)).get_json()
    settle(op["id"])
    assert get(client, space, token, workflow).get_json()["observed"]["ready"] is False


def test_an_instance_is_accepted_exactly_when_the_workflow_is_ready(client, space_token):
    """docs/spec/host-features.md#hf-newcomer (docs/spec/durable-workflow.md#dw-resource "ready:trueは新規instanceを受理できることだけを表し"): a workflow
    that is not ready refuses new instances (409 dependency_conflict naming it and why; nothing
    is written), instead of keeping them ``queued`` for code that does not exist."""
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    workflow = create_ok(
        client, space, token, "DurableWorkflow",
        {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"}, res_name="reports",
    )
    base = f"/v2/spaces/{space}/resources/{workflow}/instances"

    def create(instance_id):
        return client.post(base, json={"id": instance_id}, headers=headers(token, None))

    refused = create("early")
    assert refused.status_code == 409, refused.get_json()
    error = refused.get_json()["error"]
    assert error["code"] == "dependency_conflict"
    assert "'reports'" in error["message"] and workflow in error["message"] and "no Deployment" in error["message"]
    assert client.get(base, headers=headers(token, None)).get_json()["instances"] == []
    version = create_ok(client, space, token, "WorkerVersion", version_spec(worker))
    deployment = create_ok(client, space, token, "WorkerDeployment", deployment_spec(worker, (version, 100)))
    assert get(client, space, token, workflow).get_json()["observed"]["ready"] is True
    accepted = create("now")
    assert accepted.status_code == 201 and accepted.get_json() == {"id": "now"}
    assert create("now").get_json()["error"]["code"] == "instance_exists"  # not hidden by the gate
    op = client.delete(f"/v2/spaces/{space}/resources/{deployment}", headers=headers(token)).get_json()
    settle(op["id"])
    assert get(client, space, token, workflow).get_json()["observed"]["ready"] is False
    again = create("later")
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "dependency_conflict"


def test_workflow_put_same_worker_and_class_reconciles_again(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    spec = {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"}
    workflow = create_ok(client, space, token, "DurableWorkflow", spec)
    response = client.put(
        f"/v2/spaces/{space}/resources/{workflow}", json={"spec": spec}, headers=headers(token)
    )
    assert response.status_code == 202 and response.get_json()["generation"] == 2
    assert settle(response.get_json()["id"])["state"] == "succeeded"


def test_workflow_delete_purges_and_frees_the_name(client, space_token):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    spec = {"worker": {"resourceUid": worker}, "className": "ReportWorkflow"}
    workflow = create_ok(client, space, token, "DurableWorkflow", spec, res_name="flow")
    op = client.delete(f"/v2/spaces/{space}/resources/{workflow}", headers=headers(token)).get_json()
    assert settle(op["id"])["state"] == "succeeded"
    assert get(client, space, token, workflow).status_code == 404
    assert create_ok(client, space, token, "DurableWorkflow", spec, res_name="flow") != workflow


def test_cron_trigger_lifecycle(client, space_token):
    space, token = space_token
    worker, _, _ = deployed_worker(client, space, token)
    trigger = create_ok(
        client, space, token, "WorkerCronTrigger", {"worker": {"resourceUid": worker}, "cron": "0 9 * * *"}
    )
    observed = get(client, space, token, trigger).get_json()["observed"]
    assert (
        observed["cron"] == "0 9 * * *"
        and observed["timezone"] == "UTC"
        and observed["scheduleReady"] is True
    )
    response = client.put(
        f"/v2/spaces/{space}/resources/{trigger}",
        json={"spec": {"worker": {"resourceUid": worker}, "cron": "30 * * * *"}},
        headers=headers(token),
    )
    settle(response.get_json()["id"])
    assert get(client, space, token, trigger).get_json()["observed"]["cron"] == "30 * * * *"
    op = client.delete(f"/v2/spaces/{space}/resources/{trigger}", headers=headers(token)).get_json()
    assert settle(op["id"])["state"] == "succeeded"
    assert get(client, space, token, trigger).status_code == 404


def test_name_of_resource_kept_in_spec_unchanged(client, space_token):
    """The accepted spec is returned exactly as sent (no defaults filled in)."""
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    spec = version_spec(worker, MAIN_FULL, vars={"N": 1, "DOC": {"a": [1, None, "x"]}})
    version = create_ok(client, space, token, "WorkerVersion", spec, res_name=name("v"))
    assert get(client, space, token, version).get_json()["spec"] == spec
