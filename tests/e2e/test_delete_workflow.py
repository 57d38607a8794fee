"""DELETE of a DurableWorkflow through the real API, worker and beat (docs/spec/durable-workflow.md "入力、観測、CRUD":
"Hostは新規create/event/wakeを閉じ、実行ownerをfenceし、future continuationを取消し、childの物理的
停止を確認してから、このUIDの全instance ID・step履歴・未一致eventをpurgeする…停止・fenceを証明
できない間は成功にせず、同じOperationで照合を続ける…他Resource、Worker、Version、外部dataを連鎖削除
しない。削除後の同名再作成は新UID・空履歴である。結果不明時は元のIdempotency-Keyで同じOperationを
照合し"), and the DurableWorkflow's ``observed`` (``ready``, ``instanceCounts``, ``observedAt``).

One instance's stop is made unprovable for a while by holding its lease in Redis (what a frozen
worker looks like to the host): the Operation must stay unfinished until the lease goes, then finish
by itself.
"""

from __future__ import annotations

import os
import time
import uuid

import requests
import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from tests.support import workflows
from workers.sandbox import lease as lease_mod

MIXED = """
import os, time
class Mixed:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        if p["mode"] == "loop":
            def effect():
                while True:
                    with open(p["file"], "a") as f:
                        f.write(f"{time.time()}\\n")
                    time.sleep(0.05)
            return step.do("loop", effect)
        if p["mode"] == "nap":
            step.sleep("nap", 3600)
        if p["mode"] == "wait":
            step.wait_for_event("w", {"type": "go", "timeoutSeconds": 3600})
        return {"mode": p["mode"]}
"""
FORM = "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/"


class Api:
    def __init__(self, base: str, space: str, token: str) -> None:
        self.base, self.space = base, space
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def url(self, path: str) -> str:
        return f"{self.base}/v2/spaces/{self.space}{path}"

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.url(path), timeout=30)

    def send(self, method: str, path: str, body=None, key: str | None = None) -> requests.Response:
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        return self.http.request(method, self.url(path), json=body, headers=headers, timeout=60)

    def operation(self, op_id: str) -> dict:
        return self.get(f"/operations/{op_id}").json()

    def resource(self, uid: str) -> dict:
        return self.get(f"/resources/{uid}").json()


def _size(path) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def _rows(db_url, model, pks) -> int:
    with models_db.session_scope(db_url) as session:
        column = model.pk if model is inst_models.Instance else model.instance_pk
        return session.scalar(sa.select(sa.func.count()).select_from(model).where(column.in_(pks)))


def test_delete_stops_everything_then_purges_only_that_uid(
    api_server, worker, beat_process, space_token, db_url, tmp_path
):
    space, token = space_token
    base = api_server.extra["url"]
    api = Api(base, space, token)
    doomed = workflows.deploy_http(base, token, space, source=MIXED, class_name="Mixed")
    kept = workflows.deploy_http(base, token, space, source=MIXED, class_name="Mixed")
    # created before its Deployment, the workflow became ready once one was applied
    observed = api.resource(doomed.workflow)
    assert observed["observed"]["ready"] is True and observed["output"] == {}
    assert set(observed["observed"]["instanceCounts"]) == {
        "queued", "running", "sleeping", "waiting", "complete", "errored", "terminated",
    }  # fmt: skip
    assert "observedAt" in observed

    gone = workflows.HttpInstances(base, token, space, doomed.workflow)
    stays = workflows.HttpInstances(base, token, space, kept.workflow)
    ticks = tmp_path / "ticks"
    # The looping effect comes last: it holds one of the Space's contexts for good, and on a small
    # fleet the fair-share cap leaves this Space one context at a time (docs/operations.md).
    for instance_id, mode in (("nap", "nap"), ("wait", "wait"), ("done", "done")):
        params = {"mode": mode, "file": str(ticks)}
        assert gone.call("POST", body={"id": instance_id, "params": params})[0] == 201
    assert stays.call("POST", body={"id": "nap", "params": {"mode": "nap"}})[0] == 201
    for instance_id, status in (("nap", "sleeping"), ("wait", "waiting"), ("done", "complete")):
        workflows.wait_until(
            lambda i=instance_id, s=status: gone.status(i)["status"] == s, timeout=60, message=instance_id
        )
    workflows.wait_until(lambda: stays.status("nap")["status"] == "sleeping", timeout=60, message="kept nap")
    for _ in range(3):  # unmatched events in the inbox
        assert gone.call("POST", "/wait/events", body={"type": "other"})[0] == 202
    loop = {"mode": "loop", "file": str(ticks)}
    assert gone.call("POST", body={"id": "loop", "params": loop})[0] == 201
    workflows.wait_until(lambda: _size(ticks) > 0, timeout=60, message="the loop runs")
    # the periodic observation counts the instances (refreshed by the beat sweep)
    workflows.wait_until(
        lambda: (
            api.resource(doomed.workflow)["observed"]["instanceCounts"]
            == {
                "queued": 0,
                "running": 1,
                "sleeping": 1,
                "waiting": 1,
                "complete": 1,
                "errored": 0,
                "terminated": 0,
            }
        ),
        timeout=30,
        message="instanceCounts refreshed",
    )
    pks = [
        workflows.instance_row(db_url, workflow=doomed.workflow, instance_id=i).pk
        for i in ("loop", "nap", "wait", "done")
    ]

    settings = config.load_settings()
    leases = lease_mod.store_for(redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=60_000)
    held = leases.acquire(pks[1])  # "nap" looks like a frozen owner: its stop cannot be proven yet
    assert held is not None
    key = uuid.uuid4().hex
    try:
        first = api.send("DELETE", f"/resources/{doomed.workflow}", key=key)
        assert first.status_code == 202, first.text
        op = first.json()
        assert op["kind"] == "delete"
        # new create / event are closed at once: the workflow is going away
        workflows.wait_until(
            lambda: gone.call("POST", body={"id": "late"})[0] == 404, timeout=30, message="create closed"
        )
        code, body = gone.call("POST", "/wait/events", body={"type": "go"})
        assert (code, body["error"]["code"]) == (404, "not_found")
        # the running effect is stopped although the Operation cannot finish yet
        workflows.wait_until(
            lambda: (s := _size(ticks), time.sleep(0.5), _size(ticks) == s)[-1],
            timeout=30,
            message="loop stopped",
        )
        time.sleep(3)  # the reconcile retries meanwhile
        assert api.operation(op["id"])["state"] in ("pending", "running")  # not proven: not done
        assert _rows(db_url, inst_models.Instance, pks) == 4  # nothing purged before the proof
        again = api.send("DELETE", f"/resources/{doomed.workflow}", key=key)  # a lost answer, retried
        assert again.status_code == 202 and again.json()["id"] == op["id"]
    finally:
        leases.release(held)
    done = workflows.wait_until(
        lambda: (o := api.operation(op["id"]))["state"] in ("succeeded", "failed") and o,
        timeout=60,
        message="the Operation finishes by itself",
    )
    assert done["state"] == "succeeded", done
    assert api.send("DELETE", f"/resources/{doomed.workflow}", key=key).json()["id"] == op["id"]

    # everything of that UID is gone: ids, steps, history, unmatched events, timers
    for model in (
        inst_models.Instance,
        inst_models.Step,
        inst_models.HistoryEvent,
        inst_models.InboxEvent,
        inst_models.Timer,
    ):
        assert _rows(db_url, model, pks) == 0, model
    assert api.get(f"/resources/{doomed.workflow}").status_code == 404
    size = _size(ticks)
    time.sleep(1.0)
    assert _size(ticks) == size  # the effect never runs again
    # nothing else was deleted
    for uid in (doomed.worker, doomed.version, doomed.deployment, kept.workflow):
        assert api.get(f"/resources/{uid}").status_code == 200, uid
    assert stays.status("nap") == {"id": "nap", "status": "sleeping"}


def test_the_same_name_after_delete_is_a_new_uid_with_an_empty_history(api_server, worker, space_token):
    space, token = space_token
    base = api_server.extra["url"]
    api = Api(base, space, token)
    first = workflows.deploy_http(base, token, space, source=MIXED, class_name="Mixed")
    name = api.resource(first.workflow)["name"]
    old = workflows.HttpInstances(base, token, space, first.workflow)
    assert old.call("POST", body={"id": "x", "params": {"mode": "done"}})[0] == 201
    workflows.wait_until(lambda: old.status("x")["status"] == "complete", timeout=60, message="complete")
    deleting = api.send("DELETE", f"/resources/{first.workflow}")
    assert deleting.status_code == 202
    workflows.wait_until(
        lambda: api.operation(deleting.json()["id"])["state"] == "succeeded", timeout=60, message="deleted"
    )
    spec = {"worker": {"resourceUid": first.worker}, "className": "Mixed"}
    created = api.send("POST", "/resources", {"form": FORM, "name": name, "spec": spec})
    assert created.status_code == 202, created.text
    op = workflows.wait_until(
        lambda: (o := api.operation(created.json()["id"]))["state"] == "succeeded" and o,
        timeout=60,
        message="re-created",
    )
    new_uid = op["resourceUid"]
    assert new_uid != first.workflow
    fresh = workflows.HttpInstances(base, token, space, new_uid)
    assert fresh.call("GET") == (200, {"instances": []})
    assert fresh.call("POST", body={"id": "x", "params": {"mode": "done"}}) == (201, {"id": "x"})
    code, history = fresh.call("GET", "/x/history")
    assert history["events"][0]["eventType"] == "InstanceCreated" and history["events"][0]["eventId"] == 1
