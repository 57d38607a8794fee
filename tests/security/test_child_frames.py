"""Attacks through the child's channel: tenant code writes frames of its own to descriptor 3.

* A costly frame (``protocol.CHILD_MAX_CONTAINERS``): the host's reader parsed any frame before
  checking its shape; ``[[[…]]]`` of 8 MiB took about 5 s of CPU and 700 MB in the *host's*
  worker, outside the sandbox's memory cgroup. It is now refused unparsed, at the cost of a count.
* Forged eager first attempts (PROTOCOL.md "Eager first attempts"): an eager ``do`` before the
  host's grant, or of a step already recorded (to overwrite its result), is a protocol violation;
  nothing forged is recorded.
* Forged compiled modules (PROTOCOL.md "Compiled modules"): the host never decodes a ``code``
  frame, keeps it only for its Version, and refuses one it did not ask for, one after the
  child's first frame, or one that names a module the Version does not have. Later contexts of
  a Version receive what its first child compiled before any of the Version's code ran.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time

import pytest

from services import instance_common, instance_history, instances
from tests.support import workflows
from workers.sandbox import jobs


@pytest.fixture(scope="module")
def db_url():
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


# -- a costly frame ---------------------------------------------------------------------------

DEEP_FRAME = """
import os, struct
class Deep:
    def __init__(self, env): pass
    def run(self, event, step):
        n = (8 * 1024 * 1024 - 100) // 2
        body = b'{"op":"log","lines":[],"dropped":0,"x":' + b"[" * n + b"]" * n + b"}"
        os.write(3, struct.pack(">I", len(body)) + body)
        step.do("after", lambda: {"n": 1})
        return {"survived": True}
"""


def _rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_a_deeply_nested_frame_is_refused_without_parsing_it(monkeypatch, zygote, db_url, space_token):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    try:
        workflow = workflows.deploy(db_url, space=space, source=textwrap.dedent(DEEP_FRAME), class_name="Deep").workflow
        instances.create(
            space=space, workflow_uid=workflow, instance_id="deep-frame", params=instance_common.ABSENT, now=driver.clock()
        )
        base, peak, done = _rss_kb(), [0], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], _rss_kb())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        cpu = time.process_time()
        try:
            assert driver.run() == ["errored"]
        finally:
            done.set()
            sampler.join()
        cpu = time.process_time() - cpu
        status = instances.status(space=space, workflow_uid=workflow, instance_id="deep-frame")
        assert status["error"]["reason"] == "run_threw"
        assert "broke the host protocol" in status["error"]["message"]
        grown_mb = (peak[0] - base) / 1024
        assert grown_mb < 150, f"the host's worker grew by {grown_mb:.0f} MB parsing a child's frame"
        assert cpu < 2.5, f"the host's worker spent {cpu:.1f} s of CPU on a child's frame"
    finally:
        workflows.clear_timers(db_url)


def test_the_deepest_document_still_fits_a_childs_frame():
    from takohost.runtime import protocol

    levels = (1_048_576 - len('{"d":}')) // 2  # the deepest 1 MiB document (README "Documents")
    result = '{"d":' + "[" * levels + "]" * levels + "}"
    body = ('{"op":"effect_result","ok":true,"result":' + result + "}").encode()
    (message,) = protocol.FrameBuffer(max_containers=protocol.CHILD_MAX_CONTAINERS).feed(
        protocol._HEADER.pack(len(body)) + body
    )
    assert message["op"] == "effect_result"
    # a log frame of 256 lines of 4096 "[" each: a million brackets, all inside strings
    lines = json.dumps({"op": "log", "lines": [[0, "stdout", "[" * 4096]] * 256, "dropped": 0})
    assert len(protocol.decode_body(lines.encode(), max_containers=protocol.CHILD_MAX_CONTAINERS)["lines"]) == 256


# -- forged eager first attempts -----------------------------------------------------------------

EAGER_FORGE = """
import json, os, struct

def frame(message):
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body

EAGER_POLICY = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200}

class Forge:
    def __init__(self, env): pass
    def run(self, event, step):
        first = step.do("s0", lambda: {"real": True}) if event["params"]["after_a_step"] else None
        os.write(3, frame({"op": "do", "name": "s0", "policy": EAGER_POLICY, "eager": True})
                 + frame({"op": "effect_result", "name": "s0", "ok": True, "result": {"forged": True}}))
        step.do("after", lambda: {"n": 1})
        return {"first": first}
"""


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
        workflow = workflows.deploy(db_url, space=space, source=textwrap.dedent(EAGER_FORGE), class_name="Forge").workflow
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
        completed = [e for e in page.events if e["eventType"] == "StepCompleted"]
        assert [e["attributes"]["name"] for e in completed] == (["s0"] if after_a_step else [])
        assert "forged" not in str(page.events)
    finally:
        workflows.clear_timers(db_url)


# -- forged compiled modules ---------------------------------------------------------------------

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

# At import: after the child's own code frame (its first), one for the Version's main module.
AT_IMPORT = FRAME + """
forge("main.py")

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


def test_later_contexts_of_a_version_get_the_code_its_first_child_compiled(
    monkeypatch, zygote, db_url, space_token
):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    sent: list[dict] = []
    original = jobs.job_message

    def spy(**kwargs):
        message = original(**kwargs)
        sent.append(message)
        return message

    monkeypatch.setattr(jobs, "job_message", spy)
    try:
        deployed = workflows.deploy(db_url, space=space, source=textwrap.dedent(HONEST), class_name="Honest")
        for instance_id in ("first", "second"):
            instances.create(space=space, workflow_uid=deployed.workflow, instance_id=instance_id, now=driver.clock())
            assert driver.run() == ["complete"]
            status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id=instance_id)
            assert status == {"status": "complete", "output": {"n": 1}}
        assert sent[0].get("wantCode") is True and "code" not in sent[0]
        assert set(sent[1]["code"]) == {"main.py"} and "wantCode" not in sent[1]
        assert jobs.code_for(deployed.version) == sent[1]["code"]
    finally:
        workflows.clear_timers(db_url)


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (AT_IMPORT, "a code frame the host did not ask for"),
        (IN_RUN, "a code frame the host did not ask for"),
    ],
    ids=["at-import", "in-run"],
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
        kept = jobs.code_for(deployed.version) or {}
        assert "evil.py" not in kept and all(blob != "YW55dGhpbmc=" for blob in kept.values())
    finally:
        workflows.clear_timers(db_url)



# At import, the Version's own code replaces what its child compiled, hoping the child's honest
# code frame carries it to the Version's later contexts (found by a hostile-tenant review).
POISON = '''
import sys
EVIL = """
class Poison:
    def __init__(self, env): pass
    def run(self, event, step):
        return {"ran": "not the source"}
"""
for finder in sys.meta_path:
    if type(finder).__name__ == "SourceModules":
        finder.compiled["main.py"] = compile(EVIL, "/takohost/version/main.py", "exec")

class Poison:
    def __init__(self, env): pass
    def run(self, event, step):
        return {"ran": "the source"}
'''


def test_code_a_version_compiles_at_run_time_never_reaches_its_later_contexts(
    monkeypatch, zygote, db_url, space_token
):
    space = space_token[0]
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    try:
        deployed = workflows.deploy(db_url, space=space, source=textwrap.dedent(POISON), class_name="Poison")
        for instance_id in ("first", "second", "third"):
            instances.create(space=space, workflow_uid=deployed.workflow, instance_id=instance_id, now=driver.clock())
            assert driver.run() == ["complete"]
            status = instances.status(space=space, workflow_uid=deployed.workflow, instance_id=instance_id)
            assert status == {"status": "complete", "output": {"ran": "the source"}}, instance_id
        assert set(jobs.code_for(deployed.version)) == {"main.py"}  # it was cached
    finally:
        workflows.clear_timers(db_url)
