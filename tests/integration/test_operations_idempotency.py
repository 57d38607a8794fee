"""Operations and Idempotency-Key (docs/spec/http-api.md#api-op, API-op)."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import uuid

import pytest

from tests.integration.test_resources_support import (
    FORMS,
    create_ok,
    headers,
    hold,
    post,
    settle,
)

pytestmark = pytest.mark.usefixtures("no_dispatch")


def test_operation_transitions_are_closed():
    from services import operations

    allowed = [("pending", "running"), ("running", "running"), ("running", "succeeded")]
    for current, target in allowed:
        operations.check_transition(current, target)
    operations.check_transition("running", "failed", effect="partial")
    for current, target in [
        ("succeeded", "running"),
        ("failed", "succeeded"),
        ("succeeded", "failed"),
        ("running", "pending"),
        ("pending", "succeeded"),
    ]:
        with pytest.raises(ValueError):
            operations.check_transition(current, target, effect="none" if target == "failed" else None)
    with pytest.raises(ValueError):
        operations.check_transition("running", "failed")  # a failure must say its effect
    with pytest.raises(ValueError):
        operations.check_transition("running", "failed", effect="maybe")
    with pytest.raises(ValueError):
        operations.check_transition("running", "succeeded", effect="none")


def test_same_key_and_request_returns_the_same_operation_whatever_happened_since(client, space_token):
    space, token = space_token
    key = uuid.uuid4().hex
    first = post(client, space, token, "ModuleWorker", {}, res_name="keyed", key=key)
    assert first.status_code == 202
    again = post(client, space, token, "ModuleWorker", {}, res_name="keyed", key=key)
    assert again.status_code == 202 and again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    settle(first.get_json()["id"])
    # Now a second create of that name would be a name_conflict, and after a delete and a
    # re-create by someone else too: the retried request still answers its own Operation.
    uid = first.get_json()["resourceUid"]
    settle(client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token)).get_json()["id"])
    create_ok(client, space, token, "ModuleWorker", {}, res_name="keyed")
    replay = post(client, space, token, "ModuleWorker", {}, res_name="keyed", key=key)
    assert replay.status_code == 202
    assert replay.get_json()["id"] == first.get_json()["id"] and replay.get_json()["state"] == "succeeded"


def test_key_reused_for_a_different_request_is_422(client, space_token):
    space, token = space_token
    key = uuid.uuid4().hex
    uid = post(client, space, token, "ModuleWorker", {}, res_name="a", key=key).get_json()["resourceUid"]
    other_body = post(client, space, token, "ModuleWorker", {}, res_name="b", key=key)
    assert (
        other_body.status_code == 422 and other_body.get_json()["error"]["code"] == "idempotency_key_reused"
    )
    other_path = client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token, key))
    assert other_path.status_code == 422
    # Key order and whitespace do not matter: the body is compared in canonical form.
    raw = ('{ "spec": {}, "name": "a",\n "form": "' + FORMS["ModuleWorker"] + '" }').encode()
    same = client.post(
        f"/v2/spaces/{space}/resources",
        data=raw,
        content_type="application/json",
        headers=headers(token, key),
    )
    assert same.status_code == 202


def test_keys_are_per_space(client, space_token, db_url):
    from models import db as models_db
    from services import tokens

    space, token = space_token
    with models_db.session_scope(db_url) as session:
        other = tokens.create_token_txn(session, space=space + "-k")
    key = uuid.uuid4().hex
    a = post(client, space, token, "ModuleWorker", {}, res_name="a", key=key).get_json()
    b = post(client, space + "-k", other, "ModuleWorker", {}, res_name="a", key=key).get_json()
    assert a["id"] != b["id"]


@pytest.mark.parametrize("key", [None, "", "é", "a" * 256, "tab\tkey", "del\x7f"])
def test_missing_or_malformed_key_is_400(client, space_token, key):
    space, token = space_token
    hdrs = {"Authorization": f"Bearer {token}"}
    if key is not None:
        hdrs["Idempotency-Key"] = key
    body = {"form": FORMS["ModuleWorker"], "name": "nokey", "spec": {}}
    response = client.post(f"/v2/spaces/{space}/resources", json=body, headers=hdrs)
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "idempotency_key_required"


def test_key_limits_are_inclusive(client, space_token):
    space, token = space_token
    for key in ["k", "~" * 255, " spaced key !"]:
        assert post(client, space, token, "ModuleWorker", {}, key=key).status_code == 202


def test_mutation_racing_an_unfinished_operation_is_resource_busy(client, space_token):
    space, token = space_token
    created = post(client, space, token, "ModuleWorker", {}).get_json()
    uid = created["resourceUid"]
    with hold(created["id"]):
        busy = client.put(f"/v2/spaces/{space}/resources/{uid}", json={"spec": {}}, headers=headers(token))
        assert busy.status_code == 409 and busy.get_json()["error"]["code"] == "resource_busy"
        busy = client.delete(f"/v2/spaces/{space}/resources/{uid}", headers=headers(token))
        assert busy.status_code == 409 and busy.get_json()["error"]["code"] == "resource_busy"
    settle(created["id"])
    assert (
        client.put(
            f"/v2/spaces/{space}/resources/{uid}", json={"spec": {}}, headers=headers(token)
        ).status_code
        == 202
    )


def test_concurrent_mutations_one_wins_the_other_is_busy(app, space_token):
    space, token = space_token
    client = app.test_client()
    uid = create_ok(client, space, token, "ModuleWorker", {})

    def put(i):
        return app.test_client().put(
            f"/v2/spaces/{space}/resources/{uid}",
            json={"spec": {"description": str(i)}},
            headers=headers(token),
        )

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        statuses = sorted(r.status_code for r in pool.map(put, range(4)))
    assert statuses == [202, 409, 409, 409]


def test_concurrent_creates_of_one_name_make_one_resource(app, space_token):
    space, token = space_token

    def create(_):
        return post(app.test_client(), space, token, "ModuleWorker", {}, res_name="racer")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(create, range(4)))
    codes = sorted((r.status_code, r.get_json().get("error", {}).get("code")) for r in responses)
    assert codes == [(202, None)] + [(409, "name_conflict")] * 3


def test_concurrent_retries_with_one_key_share_one_operation(app, space_token):
    space, token = space_token
    key = uuid.uuid4().hex

    def create(_):
        return post(app.test_client(), space, token, "ModuleWorker", {}, res_name="retry", key=key)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(create, range(4)))
    assert {r.status_code for r in responses} == {202}
    assert len({r.get_json()["id"] for r in responses}) == 1


def test_reconcile_is_single_runner_and_idempotent(client, space_token, db_url):
    import sqlalchemy as sa

    from models import db as models_db
    from workers import operations_tasks

    space, token = space_token
    op = post(client, space, token, "ModuleWorker", {}).get_json()
    engine = models_db.get_engine(db_url)
    with operations_tasks.operation_lock(engine, op["id"]) as held:
        assert held
        assert operations_tasks.reconcile(op["id"]) == "busy"
    assert operations_tasks.reconcile(op["id"]) == "done"
    assert operations_tasks.reconcile(op["id"]) == "done"
    with models_db.session_scope(db_url) as session:
        state = session.execute(
            sa.text("SELECT state FROM operations WHERE id = :i"), {"i": op["id"]}
        ).scalar()
    assert state == "succeeded"


def test_sweep_redispatches_unfinished_operations_once_per_interval(client, space_token, no_dispatch):
    from services import operations

    space, token = space_token
    op = post(client, space, token, "ModuleWorker", {}).get_json()
    sent = no_dispatch
    with hold(op["id"]):
        sent.clear()
        now = dt.datetime.now(dt.UTC)
        operations.sweep(now=now)
        assert op["id"] not in sent  # not due yet: the API dispatched it a moment ago
        later = now + dt.timedelta(minutes=1)
        assert operations.sweep(now=later) >= 1 and op["id"] in sent
        sent.clear()
        operations.sweep(now=later)
        assert op["id"] not in sent  # pushed forward by the first sweep
    settle(op["id"])
    operations.sweep(now=later + dt.timedelta(hours=1))
    assert op["id"] not in sent  # finished Operations are never re-dispatched
