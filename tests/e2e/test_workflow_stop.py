"""Stopping is real, through real worker and beat processes (docs/spec/durable-workflow.md#dw-stop: "sleeping/waiting/terminalを
公開する前にHostはコード停止を確認し…処理後のstatusを先に見せてからコードを止めてはならない")."""

from __future__ import annotations

import time

import pytest

from services import instance_events, instance_history, instance_stop, instances
from tests.support import workflows

FINALLY_SLEEP = """
class Sleeper:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.sleep("s", 3600)
        finally:
            with open(event["params"]["file"], "a") as f:
                f.write("finally ran\\n")
        return {}
"""

FINALLY_WAIT = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.wait_for_event("w", {"type": "never", "timeoutSeconds": 3600})
        finally:
            with open(event["params"]["file"], "a") as f:
                f.write("finally ran\\n")
        return {}
"""


def _status(space, workflow, instance_id):
    return instances.status(space=space, workflow_uid=workflow, instance_id=instance_id)


@pytest.mark.parametrize(
    "source, class_name, status",
    [
        (FINALLY_SLEEP, "Sleeper", "sleeping"),
        (FINALLY_WAIT, "Waiter", "waiting"),
    ],
)
def test_no_finally_block_runs_once_the_instance_is_suspended(
    db_url, space_token, worker, tmp_path, source, class_name, status
):
    space, _ = space_token
    d = workflows.deploy(db_url, space=space, source=source, class_name=class_name)
    marker = tmp_path / "finally.txt"
    marker.write_text("")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="f", params={"file": str(marker)})
    workflows.wait_until(
        lambda: _status(space, d.workflow, "f")["status"] == status, timeout=30, message=status
    )
    assert marker.read_text() == ""
    time.sleep(1.0)
    assert marker.read_text() == ""
    assert _status(space, d.workflow, "f") == {"status": status}


WF_13 = """
import time
class Slow:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect():
            open(p["started"], "w").close()
            time.sleep(p["seconds"])
            open(p["after"], "w").close()
            return {"done": True}
        return step.do("slow", effect)
"""


def test_WF_13_terminate_returns_only_after_the_running_effect_stopped(db_url, space_token, worker, tmp_path):
    space, _ = space_token
    d = workflows.deploy(db_url, space=space, source=WF_13, class_name="Slow")
    started, after = tmp_path / "wf13.s", tmp_path / "wf13.a"
    params = {"started": str(started), "after": str(after), "seconds": 8}
    instances.create(space=space, workflow_uid=d.workflow, instance_id="wf13", params=params)
    workflows.wait_until(started.exists, timeout=30, message="effect started")
    t0 = time.monotonic()
    assert instance_stop.terminate(space=space, workflow_uid=d.workflow, instance_id="wf13") == {
        "status": "terminated"
    }
    assert time.monotonic() - t0 < 8  # fenced by the heartbeat, not by the effect finishing
    assert _status(space, d.workflow, "wf13") == {"status": "terminated"}
    time.sleep(9)
    assert not after.exists()  # the effect never ran on after terminate returned
    history = instance_history.history(space=space, workflow_uid=d.workflow, instance_id="wf13").events
    assert "StepCompleted" not in [e["eventType"] for e in history]


TIMED = """
from takohost import WaitTimeout
class Timed:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 1)
        try:
            got = step.wait_for_event("w", {"type": "go", "timeoutSeconds": 1})
        except WaitTimeout:
            got = "timeout"
        first = step.do("flaky", lambda: 1 / 0 if event["params"].get("fail") else {"ok": True},
                        {"maxAttempts": 2, "initialDelaySeconds": 1})
        return {"got": got, "first": first}
"""


def test_timers_fire_from_postgres_through_beat(db_url, space_token, worker, beat_process):
    space, _ = space_token
    d = workflows.deploy(db_url, space=space, source=TIMED, class_name="Timed")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="timed", params={})
    instances.create(space=space, workflow_uid=d.workflow, instance_id="failing", params={"fail": True})
    workflows.wait_until(
        lambda: _status(space, d.workflow, "timed")["status"] == "complete", timeout=30, message="complete"
    )
    assert _status(space, d.workflow, "timed")["output"] == {"got": "timeout", "first": {"ok": True}}
    workflows.wait_until(
        lambda: _status(space, d.workflow, "failing")["status"] == "errored", timeout=30, message="errored"
    )
    assert _status(space, d.workflow, "failing")["error"]["reason"] == "step_failed"


def test_send_event_wakes_a_waiting_instance(db_url, space_token, worker):
    space, _ = space_token
    source = """
class W:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"got": step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})}
"""
    d = workflows.deploy(db_url, space=space, source=source, class_name="W")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="w")
    workflows.wait_until(
        lambda: _status(space, d.workflow, "w")["status"] == "waiting", timeout=30, message="waiting"
    )
    instance_events.send_event(
        space=space, workflow_uid=d.workflow, instance_id="w", event_type="go", payload={"k": 1}
    )
    workflows.wait_until(
        lambda: _status(space, d.workflow, "w")["status"] == "complete", timeout=30, message="complete"
    )
    assert _status(space, d.workflow, "w")["output"] == {"got": {"k": 1}}


def test_deployed_through_the_resources_api_and_run_over_http(api_server, worker, space_token):
    """The whole path through real processes: Worker → DurableWorkflow → Version (validated by the
    worker) → Deployment over HTTP, then an instance created, woken and finished over HTTP."""
    space, token = space_token
    source = """
class Http:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        a = step.do("a", lambda: {"v": self.env.GREETING})
        got = step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})
        return {"a": a, "got": got, "id": event["instanceId"], "params": event.get("params")}
"""
    deployed = workflows.deploy_http(
        api_server.extra["url"], token, space, source=source, class_name="Http", variables={"GREETING": "hi"}
    )
    http = workflows.HttpInstances(api_server.extra["url"], token, space, deployed.workflow)
    assert http.call("POST", body={"id": "h/1", "params": {"p": 1}}) == (201, {"id": "h/1"})
    workflows.wait_until(lambda: http.status("h/1")["status"] == "waiting", timeout=30, message="waiting")
    assert http.call("POST", "/" + http.enc("h/1") + "/events", body={"type": "go", "payload": {"k": 2}}) == (
        202,
        {},
    )
    workflows.wait_until(lambda: http.status("h/1")["status"] == "complete", timeout=30, message="complete")
    assert http.status("h/1")["output"] == {
        "a": {"v": "hi"},
        "got": {"k": 2},
        "id": "h/1",
        "params": {"p": 1},
    }
