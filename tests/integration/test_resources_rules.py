"""Cross-resource rules, all decided before side effects (docs/spec/http-api.md#api-auth, docs/spec/worker-forms.md; docs/spec/durable-workflow.md and 003).

Every rejected request leaves the Space's rows exactly as they were (``snapshot``).
"""

from __future__ import annotations

import contextlib

import pytest

from tests.integration.test_resources_support import (
    MAIN_CLASS_ONLY,
    MAIN_FULL,
    MAIN_OTHER,
    create_ok,
    deployed_worker,
    deployment_spec,
    headers,
    hold,
    post,
    settle,
    snapshot,
    version_spec,
)


@pytest.fixture()
def api(client, space_token, db_url, no_dispatch):
    space, token = space_token

    class Api:
        def create(self, form, spec, **kw):
            return create_ok(client, space, token, form, spec, **kw)

        def post(self, form, spec, **kw):
            return post(client, space, token, form, spec, **kw)

        def put(self, uid, spec):
            return client.put(
                f"/v2/spaces/{space}/resources/{uid}", json={"spec": spec}, headers=headers(token)
            )

        def delete(self, uid):
            return client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token))

        def get(self, uid):
            return client.get(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, None)).get_json()

        @contextlib.contextmanager
        def unchanged(self):
            before = snapshot(db_url, [space])
            yield
            assert snapshot(db_url, [space]) == before

        def rejected(self, response, status, code):
            assert response.status_code == status, response.get_json()
            assert response.get_json()["error"]["code"] == code, response.get_json()
            return response.get_json()["error"]

    a = Api()
    a.space, a.token = space, token
    return a


def wf(worker, class_name="ReportWorkflow"):
    return {"worker": {"resourceUid": worker}, "className": class_name}


def trig(worker, cron="0 9 * * *"):
    return {"worker": {"resourceUid": worker}, "cron": cron}


# --- DurableWorkflow create (docs/spec/durable-workflow.md "Workflow作成要求の受理前に…") --------------------------------


def test_workflow_create_refused_when_a_weighted_version_lacks_the_class(api, client):
    worker, _, _ = deployed_worker(client, api.space, api.token, MAIN_OTHER)
    with api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker)), 409, "dependency_conflict")


def test_workflow_with_dollar_class_name_is_a_dependency_conflict_once_deployed(api, client):
    worker, _, _ = deployed_worker(client, api.space, api.token)
    with api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker, "Report$Workflow")), 409, "dependency_conflict")
    other = api.create("ModuleWorker", {})
    assert api.create("DurableWorkflow", wf(other, "Report$Workflow"))


def test_workflow_create_checks_the_pending_allocation_update_too(api):
    worker = api.create("ModuleWorker", {})
    has = api.create("WorkerVersion", version_spec(worker, MAIN_FULL))
    lacks = api.create("WorkerVersion", version_spec(worker, MAIN_OTHER))
    deployment = api.create("WorkerDeployment", deployment_spec(worker, (has, 100)))
    pending = api.put(deployment, deployment_spec(worker, (lacks, 100)))
    assert pending.status_code == 202
    with hold(pending.get_json()["id"]), api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker)), 409, "dependency_conflict")
    settle(pending.get_json()["id"])
    # And the other way round: the applied allocation lacks it while the pending one has it.
    pending = api.put(deployment, deployment_spec(worker, (has, 100)))
    with hold(pending.get_json()["id"]), api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker)), 409, "dependency_conflict")
    settle(pending.get_json()["id"])
    assert api.create("DurableWorkflow", wf(worker))


def test_workflow_create_checks_an_accepted_but_unfinished_deployment_create(api):
    worker = api.create("ModuleWorker", {})
    lacks = api.create("WorkerVersion", version_spec(worker, MAIN_OTHER))
    pending = api.post("WorkerDeployment", deployment_spec(worker, (lacks, 100)))
    assert pending.status_code == 202
    with hold(pending.get_json()["id"]), api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker)), 409, "dependency_conflict")


def test_workflow_create_is_busy_while_a_weighted_version_is_unverified(api, client):
    worker, version, _ = deployed_worker(client, api.space, api.token)
    revalidation = api.put(version, api.get(version)["spec"])
    assert revalidation.status_code == 202
    with hold(revalidation.get_json()["id"]), api.unchanged():
        api.rejected(api.post("DurableWorkflow", wf(worker)), 409, "resource_busy")
    settle(revalidation.get_json()["id"])
    assert api.create("DurableWorkflow", wf(worker))


def test_workflow_put_may_not_change_worker_or_class_name(api):
    worker = api.create("ModuleWorker", {})
    other = api.create("ModuleWorker", {})
    workflow = api.create("DurableWorkflow", wf(worker))
    with api.unchanged():
        error = api.rejected(api.put(workflow, wf(worker, "Other")), 409, "immutable_field")
        assert error["details"]["pointer"] == "/spec/className"
        error = api.rejected(api.put(workflow, wf(other)), 409, "immutable_field")
        assert error["details"]["pointer"] == "/spec/worker/resourceUid"


def test_workflow_delete_refused_while_a_live_version_binds_it_weighted_or_not(api):
    worker = api.create("ModuleWorker", {})
    workflow = api.create("DurableWorkflow", wf(worker))
    binder = api.create(
        "WorkerVersion",
        version_spec(
            worker, MAIN_FULL, workflowBindings=[{"name": "ORDERS", "resource": {"resourceUid": workflow}}]
        ),
    )
    with api.unchanged():
        api.rejected(api.delete(workflow), 409, "dependency_conflict")
    settle(api.delete(binder).get_json()["id"])
    assert settle(api.delete(workflow).get_json()["id"])["state"] == "succeeded"


# --- ModuleWorker / WorkerVersion / WorkerDeployment --------------------------------------------


def test_worker_delete_refused_while_anything_refers_to_it(api):
    worker = api.create("ModuleWorker", {})
    workflow = api.create("DurableWorkflow", wf(worker))
    with api.unchanged():
        error = api.rejected(api.delete(worker), 409, "dependency_conflict")
        assert error["details"]["referrers"][0]["uid"] == workflow
    settle(api.delete(workflow).get_json()["id"])
    version = api.create("WorkerVersion", version_spec(worker))
    with api.unchanged():
        api.rejected(api.delete(worker), 409, "dependency_conflict")
    settle(api.delete(version).get_json()["id"])
    assert settle(api.delete(worker).get_json()["id"])["state"] == "succeeded"


def test_version_spec_is_immutable(api):
    worker = api.create("ModuleWorker", {})
    version = api.create("WorkerVersion", version_spec(worker))
    with api.unchanged():
        api.rejected(api.put(version, version_spec(worker, MAIN_OTHER)), 409, "immutable_field")


def test_version_delete_refused_while_a_deployment_weights_it(api, client):
    worker, version, deployment = deployed_worker(client, api.space, api.token)
    other = api.create("WorkerVersion", version_spec(worker))
    with api.unchanged():
        api.rejected(api.delete(version), 409, "dependency_conflict")
    pending = api.put(deployment, deployment_spec(worker, (other, 100)))
    # The applied allocation still weights it until the update is reconciled.
    with hold(pending.get_json()["id"]):
        api.rejected(api.delete(version), 409, "dependency_conflict")
    settle(pending.get_json()["id"])
    assert settle(api.delete(version).get_json()["id"])["state"] == "succeeded"


def test_one_deployment_per_worker(api, client):
    worker, version, _ = deployed_worker(client, api.space, api.token)
    with api.unchanged():
        api.rejected(
            api.post("WorkerDeployment", deployment_spec(worker, (version, 100))), 409, "name_conflict"
        )


def test_deployment_rejects_versions_of_another_worker_failed_or_unverified(api):
    worker = api.create("ModuleWorker", {})
    stranger = api.create("ModuleWorker", {})
    foreign = api.create("WorkerVersion", version_spec(stranger))
    with api.unchanged():
        api.rejected(
            api.post("WorkerDeployment", deployment_spec(worker, (foreign, 100))), 409, "dependency_conflict"
        )
    broken_op = settle(
        api.post("WorkerVersion", version_spec(worker, "raise ValueError('x')\n")).get_json()["id"]
    )
    with api.unchanged():
        api.rejected(
            api.post("WorkerDeployment", deployment_spec(worker, (broken_op["resourceUid"], 100))),
            409,
            "dependency_conflict",
        )
    unverified = api.post("WorkerVersion", version_spec(worker)).get_json()
    with hold(unverified["id"]), api.unchanged():
        api.rejected(
            api.post("WorkerDeployment", deployment_spec(worker, (unverified["resourceUid"], 100))),
            409,
            "resource_busy",
        )
    settle(unverified["id"])
    assert api.create("WorkerDeployment", deployment_spec(worker, (unverified["resourceUid"], 100)))


def test_deployment_must_keep_classes_of_live_workflows_and_scheduled_of_triggers(api, client):
    worker, full, deployment = deployed_worker(client, api.space, api.token)
    api.create("DurableWorkflow", wf(worker))
    other = api.create("WorkerVersion", version_spec(worker, MAIN_OTHER))
    class_only = api.create("WorkerVersion", version_spec(worker, MAIN_CLASS_ONLY))
    with api.unchanged():
        api.rejected(
            api.put(deployment, deployment_spec(worker, (full, 50), (other, 50))), 409, "dependency_conflict"
        )
    assert (
        settle(api.put(deployment, deployment_spec(worker, (full, 50), (class_only, 50))).get_json()["id"])[
            "state"
        ]
        == "succeeded"
    )
    settle(api.put(deployment, deployment_spec(worker, (full, 100))).get_json()["id"])
    api.create("WorkerCronTrigger", trig(worker))
    with api.unchanged():
        api.rejected(
            api.put(deployment, deployment_spec(worker, (full, 50), (class_only, 50))),
            409,
            "dependency_conflict",
        )


def test_deployment_worker_is_immutable(api, client):
    worker, version, deployment = deployed_worker(client, api.space, api.token)
    other = api.create("ModuleWorker", {})
    with api.unchanged():
        api.rejected(api.put(deployment, deployment_spec(other, (version, 100))), 409, "immutable_field")


# --- WorkerCronTrigger (docs/spec/cron-trigger.md#cr-crud "作成", "更新") ----------------------------------------------------


def test_trigger_needs_a_deployment_whose_versions_provide_scheduled(api):
    worker = api.create("ModuleWorker", {})
    with api.unchanged():
        api.rejected(api.post("WorkerCronTrigger", trig(worker)), 409, "dependency_conflict")
    version = api.create("WorkerVersion", version_spec(worker, MAIN_CLASS_ONLY))
    api.create("WorkerDeployment", deployment_spec(worker, (version, 100)))
    with api.unchanged():
        api.rejected(api.post("WorkerCronTrigger", trig(worker)), 409, "dependency_conflict")


def test_trigger_worker_is_immutable(api, client):
    worker, _, _ = deployed_worker(client, api.space, api.token)
    other, _, _ = deployed_worker(client, api.space, api.token)
    trigger = api.create("WorkerCronTrigger", trig(worker))
    with api.unchanged():
        error = api.rejected(api.put(trigger, trig(other)), 409, "immutable_field")
        assert error["details"]["pointer"] == "/spec/worker/resourceUid"


def test_API_04_cron_trigger_spec_rejections(api, client):
    """API-04: each rejected before side effects; the control is accepted and observed in UTC."""
    worker, _, _ = deployed_worker(client, api.space, api.token)
    bodies = [
        {"spec": {"worker": {"resourceUid": worker}, "cron": "0 9 * * *", "timezone": "America/New_York"}},
        {"spec": {"worker": {"resourceUid": worker, "name": "x"}, "cron": "0 9 * * *"}},
        {"spec": {"worker": {"resourceUid": worker}, "cron": None}},
        {"spec": {"worker": {"resourceUid": worker}, "cron": "0 9 * * *"}, "privateInputs": {"k": "v"}},
    ]
    for body in bodies:
        with api.unchanged():
            full = {
                "form": "https://edge.forms.takoform.com/forms/WorkerCronTrigger/0.3.0/",
                "name": "nightly",
                **body,
            }
            response = client.post(f"/v2/spaces/{api.space}/resources", json=full, headers=headers(api.token))
            api.rejected(response, 400, "invalid_spec")
    trigger = api.create("WorkerCronTrigger", trig(worker), res_name="nightly")
    resource = api.get(trigger)
    assert resource["spec"] == {"worker": {"resourceUid": worker}, "cron": "0 9 * * *"}
    assert resource["observed"]["timezone"] == "UTC"


# --- references (docs/spec/http-api.md#api-auth) ------------------------------------------------------------------


def test_reference_errors(api, client, db_url):
    from models import db as models_db
    from services import tokens

    with models_db.session_scope(db_url) as session:
        other_token = tokens.create_token_txn(session, space=api.space + "-x")
    foreign = create_ok(client, api.space + "-x", other_token, "ModuleWorker", {})
    gone = api.create("ModuleWorker", {})
    settle(api.delete(gone).get_json()["id"])
    workflow_owner = api.create("ModuleWorker", {})
    a_workflow = api.create("DurableWorkflow", wf(workflow_owner))
    cases = [
        ("no-such-uid", 404, "reference_not_found"),
        (foreign, 404, "reference_not_found"),
        (gone, 404, "reference_not_found"),
        (a_workflow, 409, "dependency_conflict"),
    ]
    for uid, status, code in cases:
        with api.unchanged():
            error = api.rejected(api.post("DurableWorkflow", wf(uid)), status, code)
            assert error["details"]["pointer"] == "/spec/worker/resourceUid"
    with api.unchanged():
        error = api.rejected(
            api.post(
                "WorkerVersion",
                version_spec(
                    workflow_owner,
                    MAIN_FULL,
                    workflowBindings=[{"name": "W", "resource": {"resourceUid": workflow_owner}}],
                ),
            ),
            409,
            "dependency_conflict",
        )
        assert error["details"]["pointer"] == "/spec/workflowBindings/0/resource/resourceUid"
