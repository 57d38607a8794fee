"""A created Version replayed in the sandbox against live instances' recorded histories
(``workers.version_check``; docs/spec/host-features.md#hf-testing): a compatible change, a renamed step,
reordered steps, a changed kind, changed settings of an unfinished step, an import-time error and
a never-ending ``run`` (the time limit) — through real sandbox children, nothing written."""

from __future__ import annotations

import pytest

from services import instance_history, instances
from services.instance_pages import PageRequest
from tests.support import workflows
from workers import version_check

FLOW = """
from takohost import WaitTimeout
class Flow:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        a = step.do("fetch", lambda: {"n": event["params"]["n"]}, {"maxAttempts": 3})
        step.sleep("cool", 1)
        try:
            got = step.wait_for_event("approve", {"type": "ok", "timeoutSeconds": 600})
        except WaitTimeout:
            got = None
        return {"a": a, "got": got}
"""


FETCH = '        a = step.do("fetch", lambda: {"n": event["params"]["n"]}, {"maxAttempts": 3})\n'
COOL = '        step.sleep("cool", 1)\n'
assert FETCH + COOL in FLOW


@pytest.fixture()
def recorded(db_url, space, driver):
    """A deployed Flow and the history of one of its instances, waiting in 'approve'."""
    deployed = workflows.deploy(db_url, space=space, source=FLOW, class_name="Flow")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="i-1", params={"n": 3}, now=driver.clock())
    driver.run()
    driver.advance(1)
    assert instances.status(space=space, workflow_uid=deployed.workflow, instance_id="i-1")["status"] == "waiting"
    history = instance_history.history(
        space=space, workflow_uid=deployed.workflow, instance_id="i-1", page=PageRequest(limit=1000)
    )
    return deployed, history.events


def _check(db_url, space, zygote, deployed, events, source, *, time_limit=10.0):
    candidate = workflows.add_version(db_url, space=space, worker=deployed.worker, source=source, class_names=["Flow"])
    return version_check.check_history(
        version_uid=candidate,
        class_name="Flow",
        instance_id="i-1",
        events=events,
        status={"status": "waiting"},
        zygote=zygote,
        database_url=db_url,
        space=space,
        time_limit=time_limit,
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s, ("compatible", None)),
        (lambda s: s.replace('        return {"a"', '        step.do("audit", dict)\n        return {"a"'), ("compatible", None)),
        (lambda s: s.replace('"fetch"', '"load"'), ("diverged", (1, "fetch", "load"))),
        (lambda s: s.replace(FETCH + COOL, COOL + FETCH), ("diverged", (1, "fetch", "cool"))),
        (lambda s: s.replace('step.sleep("cool", 1)', 'step.do("cool", dict)'), ("diverged", (2, "cool", "cool"))),
        (lambda s: s.replace('"timeoutSeconds": 600', '"timeoutSeconds": 900'), ("diverged", (3, "approve", "approve"))),
    ],
    ids=["same", "step-added-after", "renamed", "reordered", "changed-kind", "changed-settings-unfinished"],
)
def test_a_candidate_replays_in_the_sandbox(db_url, space, zygote, recorded, change, expected):
    deployed, events = recorded
    outcome = _check(db_url, space, zygote, deployed, events, change(FLOW))
    assert outcome.result == expected[0], outcome.message
    if expected[1] is not None:
        d = outcome.replay.divergence
        assert (d.index, d.expected["name"], d.found["name"]) == expected[1]
    else:
        assert outcome.replay.replayed == 2 and outcome.replay.stopped_at == "approve"
    # Nothing was written: the instance's history is as it was.
    after = instance_history.history(
        space=space, workflow_uid=deployed.workflow, instance_id="i-1", page=PageRequest(limit=1000)
    )
    assert after.events == events


def test_an_import_error_and_an_endless_run_are_errors_within_the_time_limit(db_url, space, zygote, recorded):
    deployed, events = recorded
    broken = _check(db_url, space, zygote, deployed, events, "import definitely_missing_module\n" + FLOW)
    assert broken.result == "error" and "import" in broken.message and "definitely_missing_module" in broken.message
    endless = FLOW.replace("    def run(self, event, step):\n", "    def run(self, event, step):\n        while True: pass\n")
    hung = _check(db_url, space, zygote, deployed, events, endless, time_limit=1.5)
    assert hung.result == "error" and "time limit" in hung.message
    assert 1.5 <= hung.seconds < 5
