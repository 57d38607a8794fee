"""Attack: tenant code forges eager first attempts (PROTOCOL.md "Eager first attempts").

The child's channel (descriptor 3) is the tenant's to write. After the host's grant, an honest
child runs a new ``do``'s first attempt without waiting for ``run_effect``. A tenant that sends an
eager ``do`` before any grant, or an eager ``do`` of a step already recorded (to overwrite its
result), breaks the protocol: the instance ends ``errored``/``run_threw`` and nothing forged is
recorded.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.support import workflows
from workers.services import instance_history, instances

FORGE = """
import json, os, struct

def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body

POLICY = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200}

class Forge:
    def __init__(self, env): pass
    def run(self, event, step):
        first = step.do("s0", lambda: {"real": True}) if event["params"]["after_a_step"] else None
        os.write(3, frame({"op": "do", "name": "s0", "policy": POLICY, "eager": True})
                 + frame({"op": "effect_result", "name": "s0", "ok": True, "result": {"forged": True}}))
        step.do("after", lambda: {"n": 1})
        return {"first": first}
"""


@pytest.fixture(scope="module")
def db_url():
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


@pytest.mark.parametrize(
    ("after_a_step", "why"),
    [
        (False, "before the host granted eager first attempts"),
        (True, "an eager step.do of 's0', which is not a new step"),
    ],
)
def test_a_forged_eager_do_is_a_protocol_violation(monkeypatch, zygote, db_url, space_token, after_a_step, why):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    try:
        workflow = workflows.deploy(db_url, space=space, source=textwrap.dedent(FORGE), class_name="Forge").workflow
        instance_id = f"forge-{after_a_step}"
        instances.create(
            space=space,
            workflow_uid=workflow,
            instance_id=instance_id,
            params={"after_a_step": after_a_step},
            now=driver.clock(),
        )
        assert driver.run() == ["errored"]
        status = instances.status(space=space, workflow_uid=workflow, instance_id=instance_id)
        assert status["error"]["reason"] == "run_threw"
        assert "broke the host protocol" in status["error"]["message"] and why in status["error"]["message"]
        page = instance_history.history(space=space, workflow_uid=workflow, instance_id=instance_id)
        completed = [e for e in page["events"] if e["eventType"] == "StepCompleted"]
        assert [e["attributes"]["name"] for e in completed] == (["s0"] if after_a_step else [])
        assert "forged" not in str(page["events"])
    finally:
        workflows.clear_timers(db_url)
