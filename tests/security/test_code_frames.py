"""Compiled modules (PROTOCOL.md "Compiled modules"): the first context of a Version in a worker
process asks its child for the code it compiled, and later contexts of that Version receive it
instead of compiling the source again. The frame comes from tenant code: the host never decodes
it, keeps it only for that Version, and refuses one it did not ask for or that names a module
the Version does not have."""

from __future__ import annotations

import textwrap

import pytest

from tests.support import workflows
from workers import sandbox_host
from workers.services import instances

HONEST = """
class Honest:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("one", lambda: {"n": 1})
"""

FRAME = """
import base64, json, os, struct

def forge(path):
    body = json.dumps({"op": "code", "modules": {path: base64.b64encode(b"anything").decode()}}).encode()
    os.write(3, struct.pack(">I", len(body)) + body)
"""

# At import, before the child's own code frame: a module the Version does not have.
AT_IMPORT = FRAME + """
forge("evil.py")

class Forge:
    def __init__(self, env): pass
    def run(self, event, step):
        return step.do("after", lambda: {"n": 1})
"""

# In run, after the child's own (honest) code frame: a second one, which nobody asked for.
IN_RUN = FRAME + """
class Forge:
    def __init__(self, env): pass
    def run(self, event, step):
        forge("main.py")
        return step.do("after", lambda: {"n": 1})
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


def test_later_contexts_of_a_version_get_the_code_its_first_child_compiled(
    monkeypatch, zygote, db_url, space_token
):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    jobs: list[dict] = []
    original = sandbox_host.job_message

    def spy(**kwargs):
        message = original(**kwargs)
        jobs.append(message)
        return message

    monkeypatch.setattr(sandbox_host, "job_message", spy)
    try:
        deployed = workflows.deploy(db_url, space=space, source=textwrap.dedent(HONEST), class_name="Honest")
        for instance_id in ("first", "second"):
            instances.create(space=space, workflow_uid=deployed.workflow, instance_id=instance_id, now=driver.clock())
            assert driver.run() == ["complete"]
            status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id=instance_id)
            assert status == {"status": "complete", "output": {"n": 1}}
        assert jobs[0].get("wantCode") is True and "code" not in jobs[0]
        assert set(jobs[1]["code"]) == {"main.py"} and "wantCode" not in jobs[1]
        assert sandbox_host.code_for(deployed.version) == jobs[1]["code"]
    finally:
        workflows.clear_timers(db_url)


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (AT_IMPORT, "a code frame for a module that is not the Version's"),
        (IN_RUN, "a code frame the host did not ask for"),
    ],
    ids=["unknown-module", "not-asked"],
)
def test_a_forged_code_frame_is_a_protocol_violation(monkeypatch, zygote, db_url, space_token, source, why):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    try:
        deployed = workflows.deploy(db_url, space=space, source=textwrap.dedent(source), class_name="Forge")
        instances.create(space=space, workflow_uid=deployed.workflow, instance_id="forge", now=driver.clock())
        assert driver.run() == ["errored"]
        status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id="forge")
        assert status["error"]["reason"] == "run_threw"
        assert why in status["error"]["message"], status
        kept = sandbox_host.code_for(deployed.version) or {}
        assert "evil.py" not in kept and all(blob != "YW55dGhpbmc=" for blob in kept.values())
    finally:
        workflows.clear_timers(db_url)
