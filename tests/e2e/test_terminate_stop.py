"""terminate() through real processes (docs/spec/durable-workflow.md#dw-terminate: "terminate()はownerをfenceし、future continuationを
取消し、物理的に実行contextが停止してからterminatedを公開して成功する。停止を証明できなければ成功を
返さない"; docs/spec/host-limits.md#hl-decisions; docs/spec/architecture.md#ar-terminate "Terminate and delete"), and the async ABI end to end (docs/spec/README.md
§4.2: same rules, same stop guarantees).

One private stack (API, one worker, beat; lease TTL 3 s, the setting any host may use) serves the
module; the frozen-worker test resumes its worker before it ends. Effects write their pid and a
timestamp every 50 ms to a file: after ``terminate`` returns, the file never grows again and the
process that ran the effect no longer exists.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from core import config
from models.errors import DomainError
from services import instance_stop, redis_keys
from tests.support import workflows

LOOP_SYNC = """
import os, time
class Loop:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        path = event["params"]["file"]
        def effect():
            with open(path, "a") as f:
                f.write(f"pid {os.getpid()}\\n")
            while True:                              # loops forever: only a kill stops it
                with open(path, "a") as f:
                    f.write(f"{time.time()}\\n")
                time.sleep(0.05)
        return step.do("loop", effect)
"""

LOOP_ASYNC = """
import asyncio, os, time
class Loop:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        path = event["params"]["file"]
        async def effect():
            with open(path, "a") as f:
                f.write(f"pid {os.getpid()}\\n")
            while True:
                with open(path, "a") as f:
                    f.write(f"{time.time()}\\n")
                await asyncio.sleep(0.05)
        return await step.do("loop", effect)
"""


@pytest.fixture(scope="module")
def stack():
    with workflows.private_stack(workers=1, lease_ttl_ms=3000) as s:
        yield s


@pytest.fixture(scope="module")
def loops(stack):
    return {
        kind: workflows.deploy(stack.db_url, space=stack.space, source=source, class_name="Loop")
        for kind, source in (("sync", LOOP_SYNC), ("async", LOOP_ASYNC))
    }


def _lines(path) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _effect_pid(path) -> int:
    """The identity of the context that runs the effect: the uid owning the file it writes (each
    context has a uid of its own; its pid is 1 in its own PID namespace, meaningless here)."""
    workflows.wait_until(
        lambda: next((x for x in _lines(path) if x.startswith("pid ")), None), timeout=60, message="pid"
    )
    return os.stat(path).st_uid


def _gone(uid: int) -> bool:
    """True when no process of the context's ``uid`` runs any more (zombies not counted)."""
    assert uid != os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(status["Uid"].split()[0]) == uid and status["State"].split()[0] not in ("Z", "X"):
            return False
    return True


def _assert_never_grows(path, seconds: float = 1.5) -> None:
    size = os.path.getsize(path)
    time.sleep(seconds)
    assert os.path.getsize(path) == size, "the effect ran on after terminate returned"


def _history_types(http, instance_id):
    code, body = http.call("GET", "/" + http.enc(instance_id) + "/history")
    assert code == 200, body
    return [e["eventType"] for e in body["events"]]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_WF_13_after_terminate_returns_the_effect_never_runs_again(stack, loops, tmp_path, kind):
    http = stack.instances(loops[kind].workflow)
    path = tmp_path / "ticks"
    assert http.call("POST", body={"id": f"loop-{kind}", "params": {"file": str(path)}})[0] == 201
    pid = _effect_pid(path)
    workflows.wait_until(lambda: len(_lines(path)) > 5, timeout=30, message="ticking")
    started = time.monotonic()
    code, body = http.call("POST", "/" + http.enc(f"loop-{kind}") + "/terminate")
    assert (code, body) == (200, {"status": "terminated"})
    assert time.monotonic() - started < 5.0  # fenced and killed at once, not after the effect
    assert _gone(pid)  # the process that ran the effect is dead when terminate answers
    _assert_never_grows(path)
    assert http.status(f"loop-{kind}") == {"id": f"loop-{kind}", "status": "terminated"}
    types = _history_types(http, f"loop-{kind}")
    assert types[-1] == "InstanceTerminated" and "StepCompleted" not in types


def _owner_pid(stack, db_url, workflow, instance_id) -> tuple[int, str]:
    """The pid of the worker process holding the instance's lease, and the lease key."""
    pk = workflows.instance_row(db_url, workflow=workflow, instance_id=instance_id).pk
    client = redis.Redis.from_url(config.load_settings().redis_url)
    key = redis_keys.lease_key(stack.namespace, pk)
    value = workflows.wait_until(lambda: client.get(key), timeout=30, message="lease")
    return int(value.decode().split(":")[-2]), key


def test_terminate_of_a_frozen_worker_succeeds_only_once_the_lease_expired(
    stack, loops, tmp_path, monkeypatch
):
    http = stack.instances(loops["sync"].workflow)
    path = tmp_path / "ticks"
    assert http.call("POST", body={"id": "frozen", "params": {"file": str(path)}})[0] == 201
    pid = _effect_pid(path)
    owner, key = _owner_pid(stack, stack.db_url, loops["sync"].workflow, "frozen")
    client = redis.Redis.from_url(config.load_settings().redis_url)
    os.kill(owner, signal.SIGSTOP)  # the context's process freezes: no heartbeat, no kill, no release
    try:
        # a terminate that cannot prove the stop in time does not succeed (the same code path as
        # HTTP, with a short wait instead of 30 s) …
        monkeypatch.setenv("TAKOHOST_NAMESPACE", stack.namespace)
        with pytest.raises(DomainError) as unproven:
            instance_stop.terminate(
                space=stack.space, workflow_uid=loops["sync"].workflow, instance_id="frozen", wait_seconds=0.2
            )
        assert unproven.value.code == "backend_unavailable"
        assert http.status("frozen")["status"] == "running"  # nothing published
        # … and calling again continues the same termination; it answers once the lease expired
        remaining_ms = client.pttl(key)
        assert remaining_ms > 0
        started = time.monotonic()
        code, body = http.call("POST", "/frozen/terminate")
        waited = time.monotonic() - started
        assert (code, body) == (200, {"status": "terminated"})
        assert waited >= remaining_ms / 1000 - 0.25, (waited, remaining_ms)  # only expiry could end it
        assert client.exists(key) == 0
        assert _gone(pid)  # the child's watchdog killed it before the lease could expire
        _assert_never_grows(path, seconds=1.0)
    finally:
        os.kill(owner, signal.SIGCONT)
    # the stale owner wakes up: it is fenced, commits nothing and the effect stays dead
    _assert_never_grows(path, seconds=1.5)
    assert http.status("frozen") == {"id": "frozen", "status": "terminated"}
    assert "StepCompleted" not in _history_types(http, "frozen")


WF_12 = """
class Nap:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {"woke": True}
"""


def test_WF_12_terminate_a_sleeping_instance_over_http(stack):
    d = workflows.deploy(stack.db_url, space=stack.space, source=WF_12, class_name="Nap")
    http = stack.instances(d.workflow)
    assert http.call("POST", body={"id": "wf12"}) == (201, {"id": "wf12"})
    workflows.wait_until(lambda: http.status("wf12")["status"] == "sleeping", timeout=30, message="sleeping")
    assert http.call("POST", "/wf12/terminate") == (200, {"status": "terminated"})
    assert http.status("wf12") == {"id": "wf12", "status": "terminated"}  # no output, no error
    code, body = http.call("POST", "/wf12/events", body={"type": "x"})
    assert (code, body["error"]["code"]) == (409, "instance_terminal")
    assert http.call("POST", "/wf12/terminate") == (200, {"status": "terminated"})
    code, body = http.call("POST", body={"id": "wf12"})
    assert (code, body["error"]["code"]) == (409, "instance_exists")
    row = workflows.instance_row(stack.db_url, workflow=d.workflow, instance_id="wf12")
    from models import db as models_db
    from models import instances as inst_models

    with models_db.session_scope(stack.db_url) as session:  # nothing left to run at the old wake time
        assert session.query(inst_models.Timer).filter_by(instance_pk=row.pk).count() == 0


ASYNC_FLOW = """
import asyncio
class Flow:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        async def fetch():
            await asyncio.sleep(0.01)
            return {"async": True}
        a = await step.do("a", fetch)
        b = await step.do("b", lambda: {"sync": True})
        await step.sleep("nap", 1)                     # woken by beat in a fresh context
        got = await step.wait_for_event("go", {"type": "go", "timeoutSeconds": 600})
        return {"a": a, "b": b, "got": got}
"""
ASYNC_GATHER = """
import asyncio
class Flow:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        try:
            await asyncio.gather(step.do("x", lambda: {}), step.do("y", lambda: {}))
        except BaseException:
            pass                                       # uncatchable
        return {"rescued": True}
"""
ASYNC_PENDING = """
import asyncio
class Flow:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        pending = step.do("left", lambda: {})          # started, never awaited
        return {"returned": True}
"""


def test_async_workflows_end_to_end(stack):
    flows = {
        name: workflows.deploy(stack.db_url, space=stack.space, source=source, class_name="Flow")
        for name, source in (("flow", ASYNC_FLOW), ("gather", ASYNC_GATHER), ("pending", ASYNC_PENDING))
    }
    http = {name: stack.instances(d.workflow) for name, d in flows.items()}
    for name in flows:
        assert http[name].call("POST", body={"id": name})[0] == 201
    workflows.wait_until(
        lambda: http["flow"].status("flow")["status"] == "waiting", timeout=60, message="wait"
    )
    assert http["flow"].call("POST", "/flow/events", body={"type": "go", "payload": {"k": 1}})[0] == 202
    final = workflows.wait_until(
        lambda: (s := http["flow"].status("flow"))["status"] == "complete" and s,
        timeout=60,
        message="complete",
    )
    assert final["output"] == {"a": {"async": True}, "b": {"sync": True}, "got": {"k": 1}}
    assert "SleepCompleted" in _history_types(http["flow"], "flow")
    for name in ("gather", "pending"):
        status = workflows.wait_until(
            lambda n=name: (s := http[n].status(n))["status"] == "errored" and s, timeout=60, message=name
        )
        assert status["error"]["reason"] == "step_definition_mismatch", status
        assert "output" not in status
