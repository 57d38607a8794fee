"""The attempt time limit (docs/spec/host-features.md#hf-neighbours; docs/spec/host-limits.md#hl-decisions "Attempt time limit"; docs/spec/durable-workflow.md
"上限・期限はHost制御"): one attempt of ``step.do`` runs at most ``TAKOHOST_STEP_TIMEOUT_SECONDS``,
and so does code outside steps between two step calls. Past it the context's processes are killed
and proven dead, and the attempt is a failed attempt (its retry policy applies) whose error names
the limit — never a slot held for good.

Real database, Redis leases and sandbox children; contexts run in the test process
(``workflows.Driver``). Time is compressed only through the documented setting itself, set small
here. Before the limit existed, each of these contexts waited for its child forever (the driver
never returned).
"""

from __future__ import annotations

import os
import time

import pytest

from services import instance_history, instances
from services.instance_pages import PageRequest
from tests.support import workflows

LIMIT_S = 1.5

#: An effect that never returns, in two processes (it forks one more), each appending to a file.
NEVER_RETURNS = """
import os, time
class Hang:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        path = event["params"]["path"]
        def hang():
            n = len(open(path).read()) if os.path.exists(path) else 0
            if n > 0 and event["params"].get("second_ok"):
                return {"ok": True}
            if os.fork() == 0:
                while True:
                    with open(path, "a") as f: f.write("c")
                    time.sleep(0.05)
            while True:
                with open(path, "a") as f: f.write("p")
                time.sleep(0.05)
        return step.do("hang", hang, {"maxAttempts": 2, "initialDelaySeconds": 0})
"""

OUTSIDE = """
import time
class Outside:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("first", lambda: {"n": 1})
        while True:
            time.sleep(0.05)
"""


@pytest.fixture()
def limited_driver(monkeypatch, zygote, db_url):
    monkeypatch.setenv("TAKOHOST_STEP_TIMEOUT_SECONDS", str(LIMIT_S))
    yield workflows.Driver(monkeypatch, zygote=zygote)
    workflows.clear_timers(db_url)


def _history(space, workflow, instance_id):
    return instance_history.history(
        space=space, workflow_uid=workflow, instance_id=instance_id, page=PageRequest(limit=1000)
    ).events


def _still(path, seconds=0.6) -> bool:
    """True when nothing appends to ``path`` for ``seconds``: every writer is dead."""
    before = os.path.getsize(path)
    time.sleep(seconds)
    return os.path.getsize(path) == before


def test_an_attempt_past_the_limit_is_killed_and_is_a_failed_attempt_retried_per_its_policy(
    db_url, space, limited_driver, tmp_path
):
    deployed = workflows.deploy(db_url, space=space, source=NEVER_RETURNS, class_name="Hang")
    path = str(tmp_path / "writes")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="hang",
                     params={"path": path}, now=limited_driver.clock())
    started = time.monotonic()
    outcomes = limited_driver.run()
    elapsed = time.monotonic() - started
    # Two attempts of LIMIT_S each, each in a fresh context; the recorded failure is then replayed.
    assert outcomes == ["retry", "restart", "errored"], outcomes
    assert 2 * LIMIT_S <= elapsed < 2 * LIMIT_S + 10, elapsed
    assert _still(path)  # the effect and the process it forked are dead, not only the context
    status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id="hang")
    expected = f"step 'hang' attempt 2 exceeded TAKOHOST_STEP_TIMEOUT_SECONDS={LIMIT_S:g}"
    assert status == {
        "status": "errored",
        "error": {"reason": "step_failed", "message": f"step failed after 2 attempts: StepTimeout: {expected}"},
    }, status
    failures = [e["attributes"] for e in _history(space, deployed.workflow, "hang")
                if e["eventType"] in ("StepAttemptFailed", "StepFailed")]
    errors = [f.get("error") for f in failures if f.get("error")]
    assert {"type": "StepTimeout", "message": "step 'hang' attempt 1 exceeded "
            f"TAKOHOST_STEP_TIMEOUT_SECONDS={LIMIT_S:g}"} in errors, failures
    assert any(e.get("type") == "StepTimeout" and e.get("message") == expected for e in errors), failures


def test_a_retry_after_a_timed_out_attempt_can_succeed(db_url, space, limited_driver, tmp_path):
    deployed = workflows.deploy(db_url, space=space, source=NEVER_RETURNS, class_name="Hang")
    path = str(tmp_path / "writes")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="second",
                     params={"path": path, "second_ok": True}, now=limited_driver.clock())
    assert limited_driver.run() == ["retry", "complete"]
    assert _still(path)
    status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id="second")
    assert status == {"status": "complete", "output": {"ok": True}}


def test_code_outside_steps_past_the_limit_is_killed_and_ends_the_instance_naming_the_limit(
    db_url, space, limited_driver
):
    deployed = workflows.deploy(db_url, space=space, source=OUTSIDE, class_name="Outside")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="outside",
                     now=limited_driver.clock())
    started = time.monotonic()
    outcomes = limited_driver.run()
    status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id="outside")
    assert outcomes == ["errored"], (outcomes, status)
    assert LIMIT_S <= time.monotonic() - started < LIMIT_S + 10, status
    assert status["status"] == "errored" and status["error"]["reason"] == "run_threw", status
    assert "TAKOHOST_STEP_TIMEOUT_SECONDS=1.5" in status["error"]["message"], status
