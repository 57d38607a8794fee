"""The replay check as an Operation (docs/spec/host-features.md#hf-testing): ``POST …/resources/{versionUid}/check``
accepted over HTTP, reconciled with real sandbox children against live instances recorded by the
real engine, the results on the Version's ``observed.replayCheck``, progress on the Operation; a
Version of another Space refused; the server-side deploy gate (``TAKOHOST_DEPLOY_REPLAY_GATE``)."""

from __future__ import annotations

import pytest

from services import instance_history, instances
from services.instance_pages import PageRequest
from tests.integration.test_resources_support import headers, settle
from tests.integration.test_version_check import COOL, FETCH, FLOW
from tests.support import workflows
from workers import sandbox

pytestmark = pytest.mark.usefixtures("no_dispatch")

ENDLESS = FLOW.replace("    def run(self, event, step):\n", "    def run(self, event, step):\n        while True: pass\n")


@pytest.fixture()
def live(db_url, space, driver, zygote, monkeypatch):
    """Flow deployed with two instances waiting in 'approve'; checks use the module's zygote."""
    monkeypatch.setattr(sandbox, "get_zygote", lambda: zygote)
    deployed = workflows.deploy(db_url, space=space, source=FLOW, class_name="Flow")
    for instance_id in ("i-1", "i-2"):
        instances.create(space=space, workflow_uid=deployed.workflow, instance_id=instance_id, params={"n": 3}, now=driver.clock())
    driver.run()
    driver.advance(1)
    for instance_id in ("i-1", "i-2"):
        assert instances.status(space=space, workflow_uid=deployed.workflow, instance_id=instance_id)["status"] == "waiting"
    return deployed


def _check(client, space, token, version, body=None):
    response = client.post(f"/v2/spaces/{space}/resources/{version}/check", headers=headers(token), json=body)
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["kind"] == "check"
    op = settle(response.get_json()["id"])
    assert op["state"] == "succeeded", op
    observed = client.get(f"/v2/spaces/{space}/resources/{version}", headers=headers(token, None)).get_json()["observed"]
    return op, observed["replayCheck"]


@pytest.mark.parametrize(
    ("change", "result", "step"),
    [
        (lambda s: s.replace('        return {"a"', '        step.do("audit", dict)\n        return {"a"'), "compatible", None),
        (lambda s: s.replace('"fetch"', '"load"'), "diverged", 1),
        (lambda s: s.replace(FETCH + COOL, COOL + FETCH), "diverged", 1),
        (lambda s: s.replace('step.sleep("cool", 1)', 'step.do("cool", dict)'), "diverged", 2),
        (lambda s: s.replace('"timeoutSeconds": 600', '"timeoutSeconds": 900'), "diverged", 3),
        (lambda s: "import definitely_missing_module\n" + s, "error", None),
        (lambda s: ENDLESS, "error", None),
    ],
    ids=["step-added-after", "renamed", "reordered", "changed-kind", "changed-settings-unfinished", "import-error", "endless-run"],
)
def test_a_check_replays_every_live_instance_in_the_sandbox(
    db_url, client, space_token, live, monkeypatch, change, result, step
):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_REPLAY_CHECK_INSTANCE_TIMEOUT_S", "1.5")
    before = instance_history.history(
        space=space, workflow_uid=live.workflow, instance_id="i-1", page=PageRequest(limit=1000)
    )
    candidate = workflows.add_version(db_url, space=space, worker=live.worker, source=change(FLOW), class_names=["Flow"])
    op, check = _check(client, space, token, candidate)
    assert op["progress"] == {"checked": 2, "total": 2, "totals": check["totals"]}
    assert check["totals"][result] == 2 and sum(check["totals"].values()) == 2
    assert check["passed"] is (result == "compatible") and check["operationId"] == op["id"]
    if result == "compatible":
        assert check["divergent"] == []
    else:
        assert [d["id"] for d in check["divergent"]] == ["i-1", "i-2"]
        assert {d["result"] for d in check["divergent"]} == {result}
        if step is not None:
            assert all(d["step"] == step and d["workflow"] for d in check["divergent"])
    if "while True" in change(FLOW):
        assert all("time limit" in d["message"] for d in check["divergent"])
    elif result == "error":
        assert all("definitely_missing_module" in d["message"] for d in check["divergent"])
    # Nothing was written to the instances.
    assert instance_history.history(
        space=space, workflow_uid=live.workflow, instance_id="i-1", page=PageRequest(limit=1000)
    ) == before


def test_the_total_time_limit_leaves_instances_not_checked(db_url, client, space_token, live, monkeypatch):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_REPLAY_CHECK_INSTANCE_TIMEOUT_S", "1")
    monkeypatch.setenv("TAKOHOST_REPLAY_CHECK_TOTAL_TIMEOUT_S", "1")
    candidate = workflows.add_version(db_url, space=space, worker=live.worker, source=ENDLESS, class_names=["Flow"])
    _, check = _check(client, space, token, candidate)
    assert check["totals"] == {"compatible": 0, "diverged": 0, "error": 1, "not_checked": 1}


def test_a_version_of_another_space_is_refused_and_the_body_is_checked(db_url, client, space_token, live):
    from models import db as models_db
    from services import tokens

    space, token = space_token
    candidate = workflows.add_version(db_url, space=space, worker=live.worker, source=FLOW, class_names=["Flow"])
    other = f"{space}x"
    with models_db.session_scope(db_url) as session:
        other_token = tokens.create_token_txn(session, space=other)
    refused = client.post(f"/v2/spaces/{other}/resources/{candidate}/check", headers=headers(other_token))
    assert refused.status_code == 404 and refused.get_json()["error"]["code"] == "not_found"
    bad = client.post(f"/v2/spaces/{space}/resources/{candidate}/check", headers=headers(token), json={"terminal": -1})
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_request"
    wrong_form = client.post(f"/v2/spaces/{space}/resources/{live.workflow}/check", headers=headers(token))
    assert wrong_form.status_code == 400 and wrong_form.get_json()["error"]["code"] == "unsupported_form"


def _allocate(client, space, token, deployed, version):
    spec = {"worker": {"resourceUid": deployed.worker}, "versions": [{"version": {"resourceUid": version}, "weight": 100}]}
    return client.put(f"/v2/spaces/{space}/resources/{deployed.deployment}", headers=headers(token), json={"spec": spec})


def test_the_server_side_gate_refuses_weight_for_a_missing_or_failed_check(db_url, client, space_token, live, monkeypatch):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_DEPLOY_REPLAY_GATE", "1")
    renamed = workflows.add_version(db_url, space=space, worker=live.worker, source=FLOW.replace('"fetch"', '"load"'), class_names=["Flow"])
    added = workflows.add_version(
        db_url, space=space, worker=live.worker, source=FLOW.replace('        return {"a"', '        step.do("x", dict)\n        return {"a"'),
        class_names=["Flow"],
    )
    missing = _allocate(client, space, token, live, added)
    assert missing.status_code == 409 and missing.get_json()["error"]["code"] == "replay_check_failed"
    assert missing.get_json()["error"]["details"]["reason"] == "missing"
    _check(client, space, token, renamed)
    failed = _allocate(client, space, token, live, renamed)
    assert failed.status_code == 409 and failed.get_json()["error"]["details"] == {
        "version": renamed, "reason": "failed", "totals": {"compatible": 0, "diverged": 2, "error": 0, "not_checked": 0}
    }
    _check(client, space, token, added)
    accepted = _allocate(client, space, token, live, added)
    assert accepted.status_code == 202
    assert settle(accepted.get_json()["id"])["state"] == "succeeded"
    monkeypatch.delenv("TAKOHOST_DEPLOY_REPLAY_GATE")  # off (the default): no check needed
    assert _allocate(client, space, token, live, renamed).status_code == 202


def test_a_deployment_opts_in_to_the_gate_by_name(db_url, client, space_token, live, monkeypatch):
    """``TAKOHOST_DEPLOY_REPLAY_GATE=SPACE/DEPLOYMENT,…``: only the Deployments listed (or a
    Space's ``SPACE/*``) are gated; another Deployment's name or another Space's leaves it open."""
    space, token = space_token
    name = client.get(f"/v2/spaces/{space}/resources/{live.deployment}", headers=headers(token, None)).get_json()["name"]
    renamed = workflows.add_version(db_url, space=space, worker=live.worker, source=FLOW.replace('"fetch"', '"load"'), class_names=["Flow"])
    _check(client, space, token, renamed)
    for listed in (f"{space}/{name}", f"other/{name},{space}/*"):
        monkeypatch.setenv("TAKOHOST_DEPLOY_REPLAY_GATE", listed)
        refused = _allocate(client, space, token, live, renamed)
        assert refused.status_code == 409, listed
        assert refused.get_json()["error"]["details"]["reason"] == "failed"
    monkeypatch.setenv("TAKOHOST_DEPLOY_REPLAY_GATE", f"{space}/not-{name},other/{name}")
    accepted = _allocate(client, space, token, live, renamed)
    assert accepted.status_code == 202
    assert settle(accepted.get_json()["id"])["state"] == "succeeded"
