"""Quotas per Space (docs/spec/host-features.md#hf-neighbours) against the real engine and Postgres: each quota refuses new
work with ``429 quota_exceeded`` naming it (the log quota: one marker line per context), nothing
already accepted is lost or changed, concurrent work never passes a limit, and the counters
(``space_usage``) equal a recount of the tables after creates, runs, events, terminations,
trims and purges.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import textwrap

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import log_sql
from models.errors import DomainError
from services import instance_events, instance_history, instance_stop, instances, quotas, retention
from services import tenant_logs as log_service
from services.instance_pages import PageRequest
from tests.integration.test_resources_support import create_ok, headers, post, settle, version_spec
from tests.support import workflows

NAP = """
class Nap:
    def __init__(self, env): pass
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}
"""

WAITER = """
class Waiter:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
"""

#: 1,000 lines of 100 characters, written in two batches (the collector writes 500 at a time).
PRINTER = """
class Printer:
    def __init__(self, env): pass
    def run(self, event, step):
        for i in range(1000):
            print(f"{event['params']['tag']} {i:04d} " + "x" * (94 - len(event['params']['tag'])))
        return None
"""


def _refused(fn, **kwargs) -> DomainError:
    with pytest.raises(DomainError) as caught:
        fn(**kwargs)
    return caught.value


def recount(db_url: str, space: str) -> dict[str, int]:
    """What the counters should say, counted the slow way from the tables."""
    with models_db.session_scope(db_url) as session:
        row = session.execute(
            sa.text(
                f"""
SELECT (SELECT count(*) FROM instances WHERE space = :s AND status NOT IN ('complete', 'errored', 'terminated')),
       (SELECT COALESCE(sum(inbox_count), 0) FROM instances WHERE space = :s),
       (SELECT COALESCE(sum(octet_length(l.message) + {log_sql.LINE_OVERHEAD_BYTES}), 0)
          FROM tenant_logs l JOIN instances i ON i.pk = l.instance_pk WHERE i.space = :s)
       + (SELECT COALESCE(sum(octet_length(l.message) + {log_sql.LINE_OVERHEAD_BYTES}), 0)
          FROM tenant_logs l JOIN cron_deliveries d ON d.pk = l.delivery_pk
          JOIN cron_matches m ON m.pk = d.match_pk WHERE m.space = :s),
       (SELECT COALESCE(sum(log_bytes), 0) FROM instances WHERE space = :s),
       (SELECT count(*) FROM inbox_events e JOIN instances i ON i.pk = e.instance_pk WHERE i.space = :s)
"""
            ),
            {"s": space},
        ).one()
    live, events, logs, instance_logs, inbox_rows = row
    assert events == inbox_rows  # instances.inbox_count is itself right
    return {quotas.LIVE_INSTANCES: live, quotas.STORED_EVENTS: events, quotas.LOG_BYTES: logs}


def assert_counters_exact(db_url: str, space: str) -> dict[str, int]:
    used = {name: value["used"] for name, value in quotas.usage(space)["quotas"].items()}
    expected = recount(db_url, space)
    assert {name: used[name] for name in expected} == expected
    return used


# -- live instances ---------------------------------------------------------------------------


def test_live_instances_quota_refuses_the_create_and_keeps_every_accepted_instance(
    db_url, space_token, driver, client, monkeypatch
):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_QUOTA_LIVE_INSTANCES", "3")
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")
    ids = dict(space=space, workflow_uid=d.workflow)
    for name in ("a", "b", "c"):
        instances.create(**ids, instance_id=name, params={"n": name})
    error = _refused(instances.create, **ids, instance_id="d")
    assert error.code == "quota_exceeded"
    assert error.details == {"quota": "liveInstances", "current": 3, "limit": 3}
    assert "liveInstances: 3 of 3" in error.message and "TAKOHOST_QUOTA_LIVE_INSTANCES" in error.message
    response = client.post(
        f"/v2/spaces/{space}/resources/{d.workflow}/instances", json={"id": "d"}, headers=headers(token, None)
    )
    assert response.status_code == 429
    assert response.get_json()["error"]["code"] == "quota_exceeded"
    assert response.get_json()["error"]["details"] == {"quota": "liveInstances", "current": 3, "limit": 3}
    assert _refused(instances.get, **ids, instance_id="d").code == "unknown_instance"  # nothing written
    # what was accepted is intact and runs
    assert driver.run() == ["sleeping"] * 3
    for name in ("a", "b", "c"):
        events = instance_history.history(**ids, instance_id=name, page=PageRequest(limit=100)).events
        assert events[0]["eventType"] == "InstanceCreated" and events[0]["attributes"]["instanceId"] == name
    assert assert_counters_exact(db_url, space)[quotas.LIVE_INSTANCES] == 3
    # a terminal instance frees its place
    assert instance_stop.terminate(**ids, instance_id="a") == {"status": "terminated"}
    instances.create(**ids, instance_id="d")
    assert _refused(instances.create, **ids, instance_id="e").code == "quota_exceeded"
    assert driver.run() == ["sleeping"]
    assert assert_counters_exact(db_url, space)[quotas.LIVE_INSTANCES] == 3
    # a quota of 0 is no limit
    monkeypatch.setenv("TAKOHOST_QUOTA_LIVE_INSTANCES", "0")
    instances.create(**ids, instance_id="e")
    assert assert_counters_exact(db_url, space)[quotas.LIVE_INSTANCES] == 4


def test_concurrent_creates_never_pass_the_quota(db_url, space_token, driver, monkeypatch):
    space, _ = space_token
    monkeypatch.setenv("TAKOHOST_QUOTA_LIVE_INSTANCES", "5")
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")

    def create(i: int) -> str:
        try:
            instances.create(space=space, workflow_uid=d.workflow, instance_id=f"c{i}")
            return "ok"
        except DomainError as exc:
            return exc.code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(create, range(24)))
    assert outcomes.count("ok") == 5 and outcomes.count("quota_exceeded") == 19
    assert assert_counters_exact(db_url, space)[quotas.LIVE_INSTANCES] == 5


# -- stored events ----------------------------------------------------------------------------


def test_stored_events_quota_refuses_the_event_and_keeps_the_inboxes(db_url, space_token, driver, client, monkeypatch):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_QUOTA_STORED_EVENTS", "3")
    nap = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")
    waiter = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    ids = dict(space=space, workflow_uid=nap.workflow)
    instances.create(**ids, instance_id="a")
    instances.create(**ids, instance_id="b")
    instances.create(space=space, workflow_uid=waiter.workflow, instance_id="w")
    assert sorted(driver.run()) == ["sleeping", "sleeping", "waiting"]
    instance_events.send_event(**ids, instance_id="a", event_type="t", payload={"n": 1})
    instance_events.send_event(**ids, instance_id="a", event_type="t", payload={"n": 2})
    instance_events.send_event(**ids, instance_id="b", event_type="t", payload={"n": 3})
    error = _refused(instance_events.send_event, **ids, instance_id="b", event_type="t", payload={"n": 4})
    assert error.code == "quota_exceeded"
    assert error.details == {"quota": "storedEvents", "current": 3, "limit": 3}
    response = client.post(
        f"/v2/spaces/{space}/resources/{nap.workflow}/instances/b/events",
        json={"type": "t"},
        headers=headers(token),
    )
    assert response.status_code == 429 and response.get_json()["error"]["details"]["quota"] == "storedEvents"
    # nothing lost or reordered; the refused key is not spent
    assert [e.payload for e in instance_events.inbox(**ids, instance_id="a")] == [{"n": 1}, {"n": 2}]
    assert [(e.sequence, e.payload) for e in instance_events.inbox(**ids, instance_id="b")] == [
        (1, {"n": 3})
    ]
    # a direct delivery to a waiting wait stores nothing and is never refused (docs/spec/durable-workflow.md)
    instance_events.send_event(space=space, workflow_uid=waiter.workflow, instance_id="w", event_type="go")
    assert driver.run() == ["complete"]
    assert assert_counters_exact(db_url, space)[quotas.STORED_EVENTS] == 3
    # terminating drops an instance's inbox: room again
    instance_stop.terminate(**ids, instance_id="a")
    instance_events.send_event(**ids, instance_id="b", event_type="t", payload={"n": 4})
    assert assert_counters_exact(db_url, space)[quotas.STORED_EVENTS] == 2


# -- log bytes ----------------------------------------------------------------------------------


def _lines(space: str, workflow: str, instance_id: str) -> list[log_service.InstanceLine]:
    lines, token = [], None
    while True:
        page = log_service.instance_logs(
            space=space, workflow_uid=workflow, instance_id=instance_id, page=PageRequest(token, 1000)
        )
        if not page.logs:
            return lines
        lines += page.logs
        token = page.next_page_token


def test_log_quota_keeps_what_fits_and_says_once_per_context_what_it_dropped(
    db_url, space_token, driver, monkeypatch
):
    space, _ = space_token
    line_bytes = 100 + log_sql.LINE_OVERHEAD_BYTES
    monkeypatch.setenv("TAKOHOST_QUOTA_LOG_BYTES", str(300 * line_bytes))
    d = workflows.deploy(db_url, space=space, source=textwrap.dedent(PRINTER), class_name="Printer")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="p1", params={"tag": "p1"})
    assert driver.run() == ["complete"]
    first = _lines(space, d.workflow, "p1")
    tenant = [line for line in first if line.stream == "stdout"]
    markers = [line for line in first if line.stream == "host"]
    # the first 300 lines fit (in order, whole), the marker is one line whose count was rewritten
    # when the second batch dropped more
    assert [line.message[:7] for line in tenant] == [f"p1 {i:04d}" for i in range(300)]
    assert all(len(line.message) == 100 for line in tenant)
    assert [m.message for m in markers] == ["700 lines dropped: the Space's log quota"]
    used = assert_counters_exact(db_url, space)
    assert used[quotas.LOG_BYTES] >= 300 * line_bytes  # at the quota (the marker is kept beyond it)
    # another context of the Space: nothing fits, one marker of its own; p1's lines untouched
    instances.create(**ids, instance_id="p2", params={"tag": "p2"})
    assert driver.run() == ["complete"]
    assert [line.message for line in _lines(space, d.workflow, "p2")] == [
        "1000 lines dropped: the Space's log quota"
    ]
    assert _lines(space, d.workflow, "p1") == first
    assert_counters_exact(db_url, space)
    usage = quotas.usage(space)["quotas"][quotas.LOG_BYTES]
    assert usage["limit"] == 300 * line_bytes and usage["used"] <= usage["limit"] + 2 * (64 + 50)
    # retention frees the Space's log bytes with the instances
    retention.purge_retired(now=driver.clock() + dt.timedelta(seconds=retention.RETENTION_SECONDS + 60))
    assert assert_counters_exact(db_url, space)[quotas.LOG_BYTES] == 0
    instances.create(**ids, instance_id="p3", params={"tag": "p3"})
    assert driver.run() == ["complete"]
    assert len([line for line in _lines(space, d.workflow, "p3") if line.stream == "stdout"]) == 300


def test_log_counters_follow_the_per_instance_cap_and_a_workflow_purge(db_url, space_token, driver, monkeypatch):
    from takohost.domain import tenant_logs as limits

    space, _ = space_token
    monkeypatch.setattr(limits, "MAX_STORED_LINES", 120)
    d = workflows.deploy(db_url, space=space, source=textwrap.dedent(PRINTER), class_name="Printer")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="cap", params={"tag": "cap"})
    assert driver.run() == ["complete"]
    assert len(_lines(space, d.workflow, "cap")) == 120  # the oldest gave way: their bytes too
    assert assert_counters_exact(db_url, space)[quotas.LOG_BYTES] == 120 * (100 + log_sql.LINE_OVERHEAD_BYTES)
    assert instance_stop.purge_workflow(d.workflow, now=driver.clock())
    assert assert_counters_exact(db_url, space) == {
        quotas.LIVE_INSTANCES: 0,
        quotas.STORED_EVENTS: 0,
        quotas.LOG_BYTES: 0,
        quotas.VERSION_CODE_BYTES: 0,
        quotas.LAYER_BYTES: 0,
    }


# -- Version code bytes, the layer hook, the route ------------------------------------------------


def test_version_code_quota_refuses_the_version_and_a_delete_frees_it(
    client, space_token, no_dispatch, monkeypatch
):
    space, token = space_token
    worker = create_ok(client, space, token, "ModuleWorker", {})
    source = "class W:\n    def __init__(self, env): pass\n    def run(self, event, step): return None\n# " + "x" * 1000
    size = len(source.encode())
    monkeypatch.setenv("TAKOHOST_QUOTA_VERSION_CODE_BYTES", str(2 * size + 10))
    kept = [create_ok(client, space, token, "WorkerVersion", version_spec(worker, source)) for _ in range(2)]
    response = post(client, space, token, "WorkerVersion", version_spec(worker, source))
    assert response.status_code == 429, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"quota": "versionCodeBytes", "current": 2 * size, "limit": 2 * size + 10}
    listing = client.get(f"/v2/spaces/{space}/resources", headers=headers(token, None)).get_json()["resources"]
    assert sorted(r["uid"] for r in listing if r["form"].endswith("/WorkerVersion/0.5.0/")) == sorted(kept)
    assert quotas.usage(space)["quotas"][quotas.VERSION_CODE_BYTES]["used"] == 2 * size
    op = client.delete(f"/v2/spaces/{space}/resources/{kept[0]}", headers=headers(token)).get_json()
    assert settle(op["id"])["state"] == "succeeded"
    assert quotas.usage(space)["quotas"][quotas.VERSION_CODE_BYTES]["used"] == size
    create_ok(client, space, token, "WorkerVersion", version_spec(worker, source))


def test_usage_route_shows_every_quota_and_the_layer_hook(client, space_token, monkeypatch):
    space, token = space_token
    monkeypatch.setenv("TAKOHOST_QUOTA_LAYER_BYTES", "1000")
    response = client.get(f"/v2/spaces/{space}/usage", headers=headers(token, None))
    assert response.status_code == 200
    body = response.get_json()
    assert body["space"] == space and list(body["quotas"]) == list(quotas.QUOTAS)
    assert body["quotas"]["liveInstances"] == {"used": 0, "limit": 10_000}
    assert body["quotas"]["layerBytes"] == {"used": 0, "limit": 1000}
    # the packages module plugs in with one line: layer_bytes(space) → its function
    monkeypatch.setattr(quotas, "layer_bytes", lambda s: 900 if s == space else 0)
    assert client.get(f"/v2/spaces/{space}/usage", headers=headers(token, None)).get_json()["quotas"][
        "layerBytes"
    ] == {"used": 900, "limit": 1000}
    quotas.check_layer_bytes(space, adding=100)
    with pytest.raises(DomainError) as caught:
        quotas.check_layer_bytes(space, adding=101)
    assert caught.value.details == {"quota": "layerBytes", "current": 900, "limit": 1000}
    other = client.get("/v2/spaces/other-space/usage", headers=headers(token, None))
    assert other.status_code == 404 and other.get_json()["error"]["code"] == "not_found"
    assert client.get(f"/v2/spaces/{space}/usage?x=1", headers=headers(token, None)).status_code == 400
    assert client.get(f"/v2/spaces/{space}/usage").status_code == 401


CREATOR = """
from takohost import BackendUnavailable
class Creator:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def spawn():
            try:
                self.env.PEERS.create(id="over")
                return {"created": True}
            except BackendUnavailable as e:
                return {"refused": e.name}
        return step.do("spawn", spawn)
"""


def test_a_binding_create_over_the_quota_reaches_tenant_code_as_backend_unavailable(
    db_url, space_token, driver, monkeypatch
):
    space, _ = space_token
    monkeypatch.setenv("TAKOHOST_QUOTA_LIVE_INSTANCES", "2")
    peers = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")
    creator = workflows.deploy(db_url, space=space, source=CREATOR, class_name="Creator", bindings={"PEERS": peers.workflow})
    instances.create(space=space, workflow_uid=peers.workflow, instance_id="p")
    instances.create(space=space, workflow_uid=creator.workflow, instance_id="c")  # the second live one
    driver.run()
    assert instances.status(space=space, workflow_uid=creator.workflow, instance_id="c") == {
        "status": "complete",
        "output": {"refused": "backend_unavailable"},
    }
    assert _refused(instances.get, space=space, workflow_uid=peers.workflow, instance_id="over").code == "unknown_instance"


CRON_PRINTER = """
def scheduled(event, env, ctx):
    for i in range(1000):
        print(f"cron {i:04d} " + "y" * 90)
"""


def test_cron_delivery_lines_count_toward_the_log_quota_with_one_marker(db_url, space_token, monkeypatch):
    from tests.integration.test_cron_support import at, create_stack, decide
    from workers import cron_tasks

    space, _ = space_token
    line_bytes = 100 + log_sql.LINE_OVERHEAD_BYTES
    monkeypatch.setenv("TAKOHOST_QUOTA_LOG_BYTES", str(300 * line_bytes))
    minute = "2030-03-04T10:05:00Z"
    stack = create_stack(
        db_url, space=space, cron="*/5 * * * *", source=CRON_PRINTER, now=at(minute) - dt.timedelta(seconds=30)
    )
    [(match_pk, *_)] = decide(db_url, now=at(minute) + dt.timedelta(milliseconds=100), triggers=[stack.trigger_uid])
    assert cron_tasks.deliver(match_pk) == "ok"
    lines = log_service.run_logs(
        space=space, trigger_uid=stack.trigger_uid, scheduled_time=minute, page=PageRequest(limit=1000)
    ).logs
    tenant = [line.message for line in lines if line.stream == "stdout"]
    assert tenant == [f"cron {i:04d} " + "y" * 90 for i in range(300)]
    assert [line.message for line in lines if line.stream == "host"] == [
        "700 lines dropped: the Space's log quota"
    ]
    assert assert_counters_exact(db_url, space)[quotas.LOG_BYTES] >= 300 * line_bytes
