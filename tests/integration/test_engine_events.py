"""send_event, the inbox, queue limits, terminate and bindings (docs/spec/durable-workflow.md "Caller Bindingとinstance")."""

from __future__ import annotations

from models.errors import DomainError
from services import instance_events, instance_history, instance_stop, instances, workflow_observer
from tests.support import workflows

NAP = """
class Queue:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}
"""

WAITER = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        got = step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
        return {"got": got}
"""


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except DomainError as exc:
        return exc.code


def test_WF_21_queue_limits_by_count_and_by_bytes_then_purge(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="wf21a")
    instances.create(**ids, instance_id="wf21b")
    assert driver.run() == ["sleeping", "sleeping"]
    for _ in range(1024):
        instance_events.send_event(**ids, instance_id="wf21a", event_type="t")
    assert _call(instance_events.send_event, **ids, instance_id="wf21a", event_type="t") == "event_queue_full"
    big = {"p": "a" * 524257}  # {"payload":{"p":"a…"},"type":"t"} is 524288 canonical bytes
    instance_events.send_event(**ids, instance_id="wf21b", event_type="t", payload=big)
    instance_events.send_event(**ids, instance_id="wf21b", event_type="t", payload=big)
    assert _call(instance_events.send_event, **ids, instance_id="wf21b", event_type="t") == "event_queue_full"
    inbox = instance_events.inbox(**ids, instance_id="wf21b")
    assert [e.sequence for e in inbox] == [1, 2] and inbox[0].payload == big
    assert instance_stop.terminate(**ids, instance_id="wf21b") == {"status": "terminated"}
    assert instance_events.inbox(**ids, instance_id="wf21b") == []
    assert (
        _call(instance_events.send_event, **ids, instance_id="wf21b", event_type="t") == "instance_terminal"
    )


def test_an_event_for_a_waiting_matching_wait_bypasses_the_limits_and_wakes_it(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="full")
    assert driver.run() == ["waiting"]
    for _ in range(1024):
        instance_events.send_event(**ids, instance_id="full", event_type="other")
    assert driver.queue == []
    assert (
        _call(instance_events.send_event, **ids, instance_id="full", event_type="other") == "event_queue_full"
    )
    instance_events.send_event(**ids, instance_id="full", event_type="go", payload={"k": 1})
    assert instances.status(**ids, instance_id="full") == {"status": "running"}  # woken
    assert driver.run() == ["complete"]
    assert instances.status(**ids, instance_id="full") == {"status": "complete", "output": {"got": {"k": 1}}}


def test_inbox_lists_unconsumed_events_in_acceptance_order(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="i")
    instance_events.send_event(**ids, instance_id="i", event_type="b", payload={"n": 1})
    instance_events.send_event(**ids, instance_id="i", event_type="a")
    events = instance_events.inbox(**ids, instance_id="i")
    assert [(e.sequence, e.type, e.payload) for e in events] == [
        (1, "b", {"n": 1}),
        (2, "a", None),
    ]
    assert events[0].accepted_at.tzinfo is not None
    history = instance_history.history(**ids, instance_id="i").events
    assert [e["attributes"] for e in history if e["eventType"] == "EventAccepted"] == [
        {"sequence": 1, "type": "b"},
        {"sequence": 2, "type": "a"},
    ]


def test_unknown_instances_and_bad_arguments(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    ids = dict(space=space, workflow_uid=d.workflow)
    assert _call(instance_events.send_event, **ids, instance_id="nope", event_type="t") == "unknown_instance"
    assert _call(instances.status, **ids, instance_id="nope") == "unknown_instance"
    assert _call(instance_stop.terminate, **ids, instance_id="nope") == "unknown_instance"
    assert _call(instances.create, **ids, instance_id="") == "invalid_request"
    assert _call(instances.create, **ids, instance_id="x" * 257) == "invalid_request"
    assert _call(instances.create, **ids, instance_id="\ud800") == "invalid_request"
    assert _call(instances.create, **ids, params=None) == "invalid_params"
    assert _call(instances.create, **ids, params=[1, 2]) == "invalid_params"
    assert _call(instances.create, **ids, params={"p": "a" * 1048569}) == "document_too_large"
    assert _call(instances.create, space=space, workflow_uid="no-such-uid") == "not_found"
    assert _call(instances.create, space="other-space", workflow_uid=d.workflow) == "not_found"
    assert instances.list_instances(**ids).instances == []  # nothing was created


WF_12 = """
class Nap:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {"woke": True}
"""


def test_WF_12_terminate_a_sleeping_instance(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=WF_12, class_name="Nap")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="wf12")
    driver.run()
    assert instances.status(**ids, instance_id="wf12") == {"status": "sleeping"}
    assert instance_stop.terminate(**ids, instance_id="wf12") == {"status": "terminated"}
    assert instances.status(**ids, instance_id="wf12") == {"status": "terminated"}
    assert _call(instance_events.send_event, **ids, instance_id="wf12", event_type="x") == "instance_terminal"
    assert instance_stop.terminate(**ids, instance_id="wf12") == {"status": "terminated"}
    assert instances.get(**ids, instance_id="wf12") == "wf12"
    assert _call(instances.create, **ids, instance_id="wf12") == "instance_exists"
    assert driver.advance(3601) == []  # nothing runs at the old wake time
    assert instances.status(**ids, instance_id="wf12") == {"status": "terminated"}
    types = [e["eventType"] for e in instance_history.history(**ids, instance_id="wf12").events]
    assert types[-1] == "InstanceTerminated" and "SleepCompleted" not in types


def test_API_01_ids_are_retained_and_generated_ids_are_distinct(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="order-1")
    driver.run()
    assert _call(instances.create, **ids, instance_id="order-1") == "instance_exists"
    assert driver.queue == []  # no second run
    instance_events.send_event(**ids, instance_id="order-1", event_type="go")
    driver.run()
    assert instances.status(**ids, instance_id="order-1")["status"] == "complete"
    assert _call(instances.create, **ids, instance_id="order-1") == "instance_exists"
    first, second = instances.create(**ids), instances.create(**ids)
    assert first != second and first and second


BINDINGS = """
from takohost import InstanceExists, UnknownInstance, InstanceTerminal
class Caller:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        b = self.env.PEERS
        out = {"currency": self.env.CURRENCY}
        child = b.create(id="peer-1", params={"n": 1})
        out["id"] = child.id
        try:
            b.create(id="peer-1")
        except InstanceExists as e:
            out["exists"] = e.name
        try:
            b.get("missing")
        except UnknownInstance as e:
            out["unknown"] = e.name
        try:
            b.create(id="")
        except TypeError:
            out["badId"] = "TypeError"
        got = b.get("peer-1")
        out["status"] = got.status()["status"]
        got.send_event(type="go", payload={"from": "caller"})
        generated = b.create()
        generated.terminate()
        out["terminated"] = generated.status()
        try:
            generated.send_event(type="go")
        except InstanceTerminal as e:
            out["terminal"] = e.name
        return out
"""


def test_bindings_use_the_same_code_path_as_http(db_url, space, driver):
    peers = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    caller = workflows.deploy(
        db_url,
        space=space,
        source=BINDINGS,
        class_name="Caller",
        bindings={"PEERS": peers.workflow},
        variables={"CURRENCY": "EUR"},
    )
    instances.create(space=space, workflow_uid=caller.workflow, instance_id="caller")
    driver.run()
    status = instances.status(space=space, workflow_uid=caller.workflow, instance_id="caller")
    assert status == {
        "status": "complete",
        "output": {
            "currency": "EUR",
            "id": "peer-1",
            "exists": "instance_exists",
            "unknown": "unknown_instance",
            "badId": "TypeError",
            "status": "queued",
            "terminated": {"status": "terminated"},
            "terminal": "instance_terminal",
        },
    }
    peer = dict(space=space, workflow_uid=peers.workflow)
    assert instances.status(**peer, instance_id="peer-1") == {
        "status": "complete",
        "output": {"got": {"from": "caller"}},
    }
    assert len(instances.list_instances(**peer).instances) == 2


SELF_TERMINATE = """
class Quitter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("before", lambda: {"ok": True})
        try:
            self.env.SELF.get(event["instanceId"]).terminate()
        finally:
            step.do("after", lambda: {"never": True})
        return {"unreachable": True}
"""


def test_an_instance_can_terminate_itself_and_no_line_runs_after(db_url, space, driver):
    d = workflows.deploy(
        db_url, space=space, source=SELF_TERMINATE, class_name="Quitter", self_binding="SELF"
    )
    instances.create(space=space, workflow_uid=d.workflow, instance_id="me")
    assert driver.run() == ["terminated"]
    assert instances.status(space=space, workflow_uid=d.workflow, instance_id="me") == {
        "status": "terminated"
    }
    names = [
        e["attributes"].get("name")
        for e in instance_history.history(space=space, workflow_uid=d.workflow, instance_id="me").events
    ]
    assert "after" not in names and "before" in names


def test_observe_workflow_counts_all_seven_statuses(db_url, space, driver):
    from models import db as models_db
    from models import resources as res_models

    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="w1")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="q1")
    driver.queue.pop()  # q1 stays queued
    driver.run()
    with models_db.session_scope(db_url) as session:
        workflow = session.get(res_models.Resource, d.workflow)
        observed = workflow_observer.observe_workflow_txn(session, workflow=workflow, ready=True)
    assert observed == {
        "ready": True,
        "instanceCounts": {
            "queued": 1,
            "running": 0,
            "sleeping": 0,
            "waiting": 1,
            "complete": 0,
            "errored": 0,
            "terminated": 0,
        },
    }


def test_purge_workflow_stops_and_deletes_only_that_uid(db_url, space, driver):
    kept = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    doomed = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    instances.create(space=space, workflow_uid=kept.workflow, instance_id="a")
    instances.create(space=space, workflow_uid=doomed.workflow, instance_id="a")
    instances.create(space=space, workflow_uid=doomed.workflow, instance_id="b")
    driver.run()
    instance_events.send_event(space=space, workflow_uid=doomed.workflow, instance_id="a", event_type="t")
    assert instance_stop.purge_workflow(doomed.workflow, now=driver.clock()) is True
    assert (
        _call(instances.create, space=space, workflow_uid=doomed.workflow, instance_id="c") == "not_found"
    )  # the workflow is going away: not a backend failure
    assert (
        _call(instances.status, space=space, workflow_uid=doomed.workflow, instance_id="a")
        == "unknown_instance"
    )
    assert instances.list_instances(space=space, workflow_uid=doomed.workflow).instances == []
    assert instances.status(space=space, workflow_uid=kept.workflow, instance_id="a") == {
        "status": "sleeping"
    }
    assert driver.advance(3601) == ["complete"]  # only the kept instance wakes
    assert instance_stop.purge_workflow(doomed.workflow, now=driver.clock()) is True  # idempotent


def _hold_lease(db_url, workflow, instance_id):
    from core import config
    from workers.sandbox import lease as lease_mod

    settings = config.load_settings()
    leases = lease_mod.store_for(
        redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms
    )
    pk = workflows.instance_row(db_url, workflow=workflow, instance_id=instance_id).pk
    return leases, leases.acquire(pk)


def test_terminate_that_cannot_prove_the_stop_is_backend_unavailable_and_can_be_continued(
    db_url, space, driver
):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="busy")
    driver.run()
    leases, held = _hold_lease(db_url, d.workflow, "busy")  # a context that does not stop (frozen)
    try:
        assert (
            _call(instance_stop.terminate, **ids, instance_id="busy", wait_seconds=0.3)
            == "backend_unavailable"
        )
        assert instances.status(**ids, instance_id="busy") == {"status": "sleeping"}  # nothing published
        assert _call(instance_events.send_event, **ids, instance_id="busy", event_type="t") is None
        fenced_epoch = workflows.instance_row(db_url, workflow=d.workflow, instance_id="busy").epoch
        assert (
            _call(instance_stop.terminate, **ids, instance_id="busy", wait_seconds=0.1)
            == "backend_unavailable"
        )
    except BaseException:
        leases.release(held)
        raise
    assert (
        _call(instance_stop.terminate, **ids, instance_id="busy", wait_seconds=0.1) == "backend_unavailable"
    )
    row = workflows.instance_row(db_url, workflow=d.workflow, instance_id="busy")
    assert row.stopping == "terminate" and row.epoch == fenced_epoch  # the same termination, one fence
    leases.release(held)
    assert instance_stop.terminate(**ids, instance_id="busy") == {"status": "terminated"}  # continues
    assert instance_events.inbox(**ids, instance_id="busy") == []
    assert driver.advance(3601) == []


def test_purge_waits_while_a_context_still_holds_a_lease(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="held")
    driver.run()
    leases, held = _hold_lease(db_url, d.workflow, "held")
    try:
        assert instance_stop.purge_workflow(d.workflow, now=driver.clock()) is False
        row = workflows.instance_row(db_url, workflow=d.workflow, instance_id="held")
        assert row is not None and row.stopping == "delete"  # fenced, kept until the stop is proven
        assert (
            _call(
                instance_events.send_event,
                space=space,
                workflow_uid=d.workflow,
                instance_id="held",
                event_type="t",
            )
            == "not_found"
        )  # closed for new events: the workflow is going away
    finally:
        leases.release(held)
    assert instance_stop.purge_workflow(d.workflow, now=driver.clock()) is True
    assert workflows.instance_row(db_url, workflow=d.workflow, instance_id="held") is None


def test_a_maximal_payload_goes_straight_to_a_waiting_wait(db_url, space, driver):
    source = """
class Big:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        got = step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
        return {"length": len(got["p"])}
"""
    d = workflows.deploy(db_url, space=space, source=source, class_name="Big")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="big")
    instances.create(**ids, instance_id="early")
    assert driver.run() == ["waiting", "waiting"]
    payload = {"p": "a" * 1048568}  # exactly 1048576 canonical bytes; {type, payload} is more
    instance_events.send_event(**ids, instance_id="big", event_type="go", payload=payload)
    assert driver.run() == ["complete"]
    assert instances.status(**ids, instance_id="big") == {"status": "complete", "output": {"length": 1048568}}
    assert (
        _call(instance_events.send_event, **ids, instance_id="early", event_type="other", payload=payload)
        == "event_queue_full"
    )  # not for a waiting wait: it can never fit in the queue


def test_history_is_newest_last_in_time_too(db_url, space, driver):
    """An event accepted with a later clock than the context that consumes it (the API's clock was
    read before the context's): the context's events keep increasing ids AND timestamps."""
    import datetime as dt

    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="t", now=driver.clock())
    assert driver.run() == ["waiting"]
    instance_events.send_event(
        **ids, instance_id="t", event_type="go", now=driver.clock() + dt.timedelta(seconds=5)
    )
    assert driver.run() == ["complete"]
    events = instance_history.history(**ids, instance_id="t").events
    assert [e["eventId"] for e in events] == list(range(1, len(events) + 1))
    stamps = [e["eventTimestamp"] for e in events]
    assert stamps == sorted(stamps), stamps
    assert events[-1]["eventType"] == "InstanceCompleted"


def test_terminate_while_the_workflow_is_being_deleted_is_not_found(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="x")
    driver.run()
    leases, held = _hold_lease(db_url, d.workflow, "x")
    try:
        assert instance_stop.purge_workflow(d.workflow, now=driver.clock()) is False  # still stopping
        epoch = workflows.instance_row(db_url, workflow=d.workflow, instance_id="x").epoch
        assert _call(instance_stop.terminate, **ids, instance_id="x") == "not_found"  # it is going away
        assert _call(instances.create, **ids, instance_id="y") == "not_found"
        assert instance_stop.purge_workflow(d.workflow, now=driver.clock()) is False
        assert (
            workflows.instance_row(db_url, workflow=d.workflow, instance_id="x").epoch == epoch
        )  # one fence
    finally:
        leases.release(held)
    assert instance_stop.purge_workflow(d.workflow, now=driver.clock()) is True


BAD_BINDING = """
from takohost.runtime import bindings
class Caller:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        peers = self.env.PEERS
        out = {}
        try:   # arguments the child lets through but the host refuses (invalid_request)
            bindings._call(peers._channel, binding="PEERS", call="get", args={"id": ""})
        except TypeError as e:
            out["get"] = "TypeError"
        except Exception as e:
            out["get"] = type(e).__name__
        try:
            bindings._call(peers._channel, binding="PEERS", call="send_event", args={"id": "x"})
        except TypeError:
            out["send_event"] = "TypeError"
        except Exception as e:
            out["send_event"] = type(e).__name__
        return out
"""


def test_a_binding_call_the_host_finds_invalid_raises_type_error_in_the_workflow(db_url, space, driver):
    peers = workflows.deploy(db_url, space=space, source=NAP, class_name="Queue")
    caller = workflows.deploy(
        db_url, space=space, source=BAD_BINDING, class_name="Caller", bindings={"PEERS": peers.workflow}
    )
    instances.create(space=space, workflow_uid=caller.workflow, instance_id="c")
    assert driver.run() == ["complete"]
    assert instances.status(space=space, workflow_uid=caller.workflow, instance_id="c") == {
        "status": "complete",
        "output": {"get": "TypeError", "send_event": "TypeError"},
    }


def test_a_wait_with_a_non_ascii_name_takes_its_event_directly(db_url, space, driver):
    """The pending wait is read as raw bytes beside the row lock: its UTF-8 name must come back
    exactly, or the event would not be consumed by the wait (docs/spec/durable-workflow.md: consumed atomically)."""
    source = '''
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("承認 ✓\\u2028", {"type": "go", "timeoutSeconds": 600})}
'''
    d = workflows.deploy(db_url, space=space, source=source, class_name="Waiter")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="ü")
    assert driver.run() == ["waiting"]
    instance_events.send_event(**ids, instance_id="ü", event_type="go", payload={"k": "✓"})
    assert instances.status(**ids, instance_id="ü") == {"status": "running"}  # woken in the same commit
    assert instance_events.inbox(**ids, instance_id="ü") == []  # never queued
    assert driver.run() == ["complete"]
    assert instances.status(**ids, instance_id="ü") == {"status": "complete", "output": {"got": {"k": "✓"}}}
    events = instance_history.history(**ids, instance_id="ü").events
    consumed = [e for e in events if e["eventType"] == "EventConsumed"]
    assert [e["attributes"]["name"] for e in consumed] == ["承認 ✓\u2028"]
