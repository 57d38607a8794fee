"""Step semantics through the real engine (database, Redis leases, sandbox children), contexts run
in-process by ``tests.support.workflows.Driver`` with a controllable clock.

Field cases of area ``workflow`` (cases.json WF-xx) are copied literally into the sources below.
"""

from __future__ import annotations

import json
import os

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from services import instance_common, instance_events, instance_history, instances
from services.instance_pages import PageRequest
from tests.support import workflows


class Run:
    """One deployed workflow plus shortcuts for the service calls (at the driver's clock)."""

    def __init__(self, db_url, space, driver, source, class_name, **kwargs):
        self.db_url = db_url
        self.space = space
        self.driver = driver
        self.deployed = workflows.deploy(db_url, space=space, source=source, class_name=class_name, **kwargs)
        self.workflow = self.deployed.workflow

    def create(self, instance_id=None, params=instance_common.ABSENT):
        return instances.create(
            space=self.space,
            workflow_uid=self.workflow,
            instance_id=instance_id,
            params=params,
            now=self.driver.clock(),
        )

    def status(self, instance_id):
        return instances.status(space=self.space, workflow_uid=self.workflow, instance_id=instance_id)

    def send(self, instance_id, event_type, payload=instance_common.ABSENT):
        return instance_events.send_event(
            space=self.space,
            workflow_uid=self.workflow,
            instance_id=instance_id,
            event_type=event_type,
            payload=payload,
            now=self.driver.clock(),
        )

    def history(self, instance_id):
        return instance_history.history(
            space=self.space, workflow_uid=self.workflow, instance_id=instance_id, page=PageRequest(limit=1000)
        ).events

    def event_types(self, instance_id):
        return [e["eventType"] for e in self.history(instance_id)]

    def steps(self, instance_id):
        with models_db.session_scope(self.db_url) as session:
            pk = session.scalar(
                sa.select(inst_models.Instance.pk).where(
                    inst_models.Instance.workflow_uid == self.workflow,
                    inst_models.Instance.instance_id == instance_id,
                )
            )
            rows = session.scalars(
                sa.select(inst_models.Step)
                .where(inst_models.Step.instance_pk == pk)
                .order_by(inst_models.Step.pk)
            ).all()
            return {row.name: row for row in rows}

    def timers(self, instance_id):
        with models_db.session_scope(self.db_url) as session:
            return dict(
                session.execute(
                    sa.select(inst_models.Timer.kind, inst_models.Timer.due_at)
                    .join(inst_models.Instance, inst_models.Instance.pk == inst_models.Timer.instance_pk)
                    .where(
                        inst_models.Instance.workflow_uid == self.workflow,
                        inst_models.Instance.instance_id == instance_id,
                    )
                ).all()
            )


@pytest.fixture()
def deploy(db_url, space, driver):
    def make(source, class_name, **kwargs):
        return Run(db_url, space, driver, source, class_name, **kwargs)

    return make


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line for line in f.read().splitlines() if line]


# ---------------------------------------------------------------------------------------------

WF_01 = """
class Approve:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("prep", lambda: {"n": 1})
        got = step.wait_for_event("w", {"type": "approve", "timeoutSeconds": 60})
        return {"got": got}
"""


def test_WF_01_event_sent_before_the_wait_starts_is_delivered(deploy, driver):
    run = deploy(WF_01, "Approve")
    run.create("wf01")
    run.send("wf01", "approve", {"ok": True})  # still queued: no context ran yet
    assert run.status("wf01") == {"status": "queued"}
    assert driver.run() == ["complete"]
    assert run.status("wf01") == {"status": "complete", "output": {"got": {"ok": True}}}
    types = run.event_types("wf01")
    assert "WaitTimedOut" not in types and "ContextSuspended" not in types
    consumed = [e for e in run.history("wf01") if e["eventType"] == "EventConsumed"]
    assert consumed[0]["attributes"] == {"name": "w", "sequence": 1, "type": "approve"}
    steps = run.steps("wf01")
    assert steps["prep"].result == {"n": 1} and steps["prep"].attempts == 1
    assert steps["w"].result == {"ok": True}


WAITS_NAMED = """
class Named:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("prep", lambda: {"n": 1})
        got = step.wait_for_event("wait ✓ é", {"type": "approve", "timeoutSeconds": 60})
        return {"got": got}
"""


@pytest.mark.parametrize("payload", [{"ok": True}, instance_common.ABSENT])
def test_an_event_for_a_waiting_matching_wait_is_consumed_in_the_commit_that_accepts_it(
    deploy, driver, payload
):
    """docs/spec/durable-workflow.md#dw-step-wait: the oldest matching event is consumed atomically, in the same commit
    as the step's result. The wait is
    waiting, so the inbox holds no matching event: the sent one is the oldest, and it is consumed
    with the wait's result in the very commit that accepts it; the woken context replays the wait."""
    run = deploy(WAITS_NAMED, "Named")
    run.create("direct")
    assert driver.run() == ["waiting"]
    assert "timeout" in run.timers("direct")
    run.send("direct", "approve", payload)
    # Before any context ran: consumed, recorded, woken; nothing queued, no wait timer left (the
    # lifetime's stays, as after any other step).
    assert run.status("direct") == {"status": "running"}
    assert instance_events.inbox(space=run.space, workflow_uid=run.workflow, instance_id="direct") == []
    wait = run.steps("direct")["wait ✓ é"]
    assert wait.state == "succeeded" and wait.result == (
        None if payload is instance_common.ABSENT else payload
    )
    assert list(run.timers("direct")) == ["lifetime"]
    tail = run.history("direct")[-3:]
    completed = {"name": "wait ✓ é", "kind": "wait"}
    if payload is not instance_common.ABSENT:
        completed["result"] = payload  # joined in from the step row when the history is served
    assert [(e["eventType"], e["attributes"]) for e in tail] == [
        ("EventAccepted", {"sequence": 1, "type": "approve"}),
        ("EventConsumed", {"name": "wait ✓ é", "sequence": 1, "type": "approve"}),
        ("StepCompleted", completed),
    ]
    assert [e["eventId"] for e in tail] == [tail[0]["eventId"] + i for i in range(3)]
    with models_db.session_scope(run.db_url) as session:
        counters = session.execute(
            sa.select(inst_models.Instance.inbox_count, inst_models.Instance.inbox_bytes).where(
                inst_models.Instance.workflow_uid == run.workflow,
                inst_models.Instance.instance_id == "direct",
            )
        ).one()
    assert tuple(counters) == (0, 0)
    assert driver.run() == ["complete"]
    got = None if payload is instance_common.ABSENT else payload
    assert run.status("direct") == {"status": "complete", "output": {"got": got}}
    assert run.event_types("direct").count("EventConsumed") == 1  # the context replayed the record


WF_02 = """
class Fifo:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        a = step.wait_for_event("first", {"type": "t", "timeoutSeconds": 60})
        b = step.wait_for_event("second", {"type": "t", "timeoutSeconds": 60})
        c = step.wait_for_event("third", {"type": "u", "timeoutSeconds": 60})
        return {"a": a, "b": b, "c": c}
"""


def test_WF_02_oldest_matching_event_per_wait_other_types_stay_leftovers_purged(deploy, driver):
    run = deploy(WF_02, "Fifo")
    run.create("wf02")
    assert driver.run() == ["waiting"]
    assert run.status("wf02") == {"status": "waiting"}
    run.send("wf02", "t", {"n": 1})
    assert driver.run() == ["waiting"]  # consumed by "first", waits for "second"
    run.send("wf02", "u", {"n": 9})  # not what "second" waits for: queued, no wake
    assert driver.queue == []
    run.send("wf02", "t", {"n": 2})
    run.send("wf02", "t", {"n": 3})
    assert driver.run() == ["complete"]
    assert run.status("wf02") == {
        "status": "complete",
        "output": {"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 9}},
    }
    inbox = instance_events.inbox(space=run.space, workflow_uid=run.workflow, instance_id="wf02")
    assert inbox == []  # t {'n': 3} purged at completion
    with pytest.raises(Exception) as exc:
        run.send("wf02", "t")
    assert exc.value.code == "instance_terminal"


WF_03 = """
from takohost import WaitTimeout
class Caught:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.wait_for_event("w", {"type": "never", "timeoutSeconds": 1})
        except WaitTimeout as e:
            return {"timedOut": e.name}
        return {"timedOut": False}
"""

WF_04 = """
class Uncaught:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.wait_for_event("w", {"type": "never", "timeoutSeconds": 1})
        return {"unreachable": True}
"""


def test_WF_04_uncaught_wait_timeout_is_run_threw_and_raised_in_a_new_context(deploy, driver):
    run = deploy(WF_04, "Uncaught")
    run.create("wf04")
    assert driver.run() == ["waiting"]
    assert run.timers("wf04")["timeout"] == driver.clock() + __import__("datetime").timedelta(seconds=1)
    assert driver.advance(0.5) == []  # not due yet
    assert driver.advance(0.5) == ["errored"]
    status = run.status("wf04")
    assert status["status"] == "errored" and status["error"]["reason"] == "run_threw"
    assert "output" not in status and "WaitTimeout" in status["error"]["message"]
    types = run.event_types("wf04")
    assert types.index("WaitTimedOut") > types.index("ContextSuspended")
    assert run.steps("wf04")["w"].state == "failed"


def test_WF_03_caught_wait_timeout_completes(deploy, driver):
    run = deploy(WF_03, "Caught")
    run.create("wf03")
    driver.run()
    assert driver.advance(1) == ["complete"]
    assert run.status("wf03") == {"status": "complete", "output": {"timedOut": "wait_timeout"}}


REPLAYED_TIMEOUT = """
from takohost import WaitTimeout
class Replayed:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.wait_for_event("w", {"type": "never", "timeoutSeconds": 1})
        except WaitTimeout as e:
            first = e.message
        step.sleep("later", 5)
        try:
            step.wait_for_event("w", {"type": "never", "timeoutSeconds": 1})
        except WaitTimeout as e:
            return {"first": first, "replayed": e.message}
"""


def test_a_replayed_wait_timeout_raises_the_message_its_first_context_saw(deploy, driver):
    """The recorded outcome replays as it was (docs/spec/durable-workflow.md): the row kept another text than the one
    raised in the context that timed out, so code that returned the message changed on replay."""
    run = deploy(REPLAYED_TIMEOUT, "Replayed")
    run.create("r")
    driver.run()
    driver.advance(1)  # times out in this context, then sleeps
    assert driver.advance(5) == ["complete"]  # a fresh context replays the timeout from the row
    text = "no 'never' event arrived within 1 s"
    assert run.status("r") == {"status": "complete", "output": {"first": text, "replayed": text}}


def test_an_event_accepted_at_the_timeout_instant_wins_and_a_later_one_does_not(deploy, driver):
    run = deploy(WF_03, "Caught")
    run.create("at")
    run.create("after")
    driver.run()
    driver.clock.advance(1)  # exactly the timeout instant
    run.send("at", "never", {"k": "at"})
    driver.clock.advance(0.001)
    run.send("after", "never", {"k": "after"})
    driver.fire_timers()
    driver.run()
    assert run.status("at") == {"status": "complete", "output": {"timedOut": False}}
    assert run.status("after") == {"status": "complete", "output": {"timedOut": "wait_timeout"}}


WF_05 = """
import json, time
class Flaky:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        log = event["params"]["log"]          # a file path the test reads
        def effect():
            with open(log, "a") as f:
                f.write(json.dumps({"t": time.time()}) + "\\n")
            raise RuntimeError("always")
        return step.do("flaky", effect,
                       {"maxAttempts": 3, "initialDelaySeconds": 10, "backoff": "exponential"})
"""


def test_WF_05_attempts_with_exponential_delays_then_step_failed(deploy, driver, tmp_path):
    log = str(tmp_path / "wf05.log")
    run = deploy(WF_05, "Flaky")
    run.create("wf05", {"log": log})
    assert driver.run() == ["retry"]
    assert run.status("wf05") == {"status": "running"}  # docs/spec/host-limits.md#hl-decisions: running during retry delays
    assert driver.advance(9.999) == []
    assert driver.advance(0.001) == ["retry"]
    assert driver.advance(19.999) == []
    assert driver.advance(0.001) == ["errored"]
    assert len(_lines(log)) == 3
    status = run.status("wf05")
    assert status["error"]["reason"] == "step_failed" and "RuntimeError: always" in status["error"]["message"]
    failures = [e["attributes"] for e in run.history("wf05") if e["eventType"] == "StepAttemptFailed"]
    assert [f["attempt"] for f in failures] == [1, 2, 3]
    starts = [e["eventTimestamp"] for e in run.history("wf05") if e["eventType"] == "StepAttemptStarted"]
    gaps = [(_t(b) - _t(a)).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
    assert gaps == [10, 20]
    assert "retryAt" not in failures[2]
    assert run.event_types("wf05").count("StepFailed") == 1


def _t(text):
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


WF_06 = """
class AlwaysFails:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def boom():
            raise ValueError("nope")
        return step.do("s", boom, event["params"]["policy"])
"""


@pytest.mark.parametrize(
    "policy, delays",
    [
        ({"maxAttempts": 4, "initialDelaySeconds": 100, "maxDelaySeconds": 30}, [30, 30, 30]),
        (
            {"maxAttempts": 5, "initialDelaySeconds": 20000, "backoff": "exponential"},
            [20000, 40000, 43200, 43200],
        ),
    ],
)
def test_WF_06_stored_retry_timers_follow_the_capped_delays(deploy, driver, policy, delays):
    run = deploy(WF_06, "AlwaysFails")
    iid = run.create(params={"policy": policy})
    driver.run()
    seen = []
    for _ in delays:
        due = run.timers(iid)["retry"]
        seen.append(round((due - driver.clock()).total_seconds()))
        driver.advance(seen[-1])
    assert seen == delays
    status = run.status(iid)
    assert status["status"] == "errored" and status["error"]["reason"] == "step_failed"
    assert run.steps(iid)["s"].attempts == len(delays) + 1


WF_07 = """
STATE = {"contexts": 0}                   # module state: must be fresh in every context
class ZeroDelay:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        STATE["contexts"] += 1
        marker = event["params"]["marker"]
        def effect():
            import os
            if not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError("first attempt fails")
            return {"contexts_seen_by_effect": STATE["contexts"]}
        return step.do("once-more", effect, {"maxAttempts": 2, "initialDelaySeconds": 0})
"""


def test_WF_07_zero_delay_retry_runs_in_a_fresh_context(deploy, driver, tmp_path):
    run = deploy(WF_07, "ZeroDelay")
    run.create("wf07", {"marker": str(tmp_path / "wf07.marker")})
    assert driver.run() == ["retry", "complete"]  # the retry context was dispatched directly
    assert run.status("wf07") == {"status": "complete", "output": {"contexts_seen_by_effect": 1}}
    failed = [e for e in run.history("wf07") if e["eventType"] == "StepAttemptFailed"]
    assert len(failed) == 1 and failed[0]["attributes"]["attempt"] == 1


WF_08 = """
class BadPolicies:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        bad = [{"maxAttempts": 0}, {"maxAttempts": 101}, {"maxAttempts": 3, "initialDelaySeconds": 43201},
               {"maxAttempts": 3, "backoff": "linear"}, {"maxAttempts": 3, "initialDelaySeconds": 1.5},
               {"maxAttempts": True}, {"retries": {"limit": 3}}, {"maxAttempts": 2, "maxDelaySeconds": -1}]
        seen = []
        for i, p in enumerate(bad):
            try:
                step.do(f"s{i}", lambda: {"ran": True}, p)
                seen.append("ran")
            except TypeError:
                seen.append("TypeError")
        return {"seen": seen}
"""

WF_08_UNCAUGHT = """
class Uncaught:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("s", lambda: {"ran": True}, {"maxAttempts": 0})
        return {}
"""


def test_WF_08_bad_policies_are_catchable_type_errors_and_record_nothing(deploy, driver):
    run = deploy(WF_08, "BadPolicies")
    run.create("wf08")
    assert driver.run() == ["complete"]
    assert run.status("wf08") == {"status": "complete", "output": {"seen": ["TypeError"] * 8}}
    assert run.steps("wf08") == {}
    assert "StepAttemptStarted" not in run.event_types("wf08")
    uncaught = deploy(WF_08_UNCAUGHT, "Uncaught")
    uncaught.create("u")
    driver.run()
    status = uncaught.status("u")
    assert status["error"]["reason"] == "run_threw" and "TypeError" in status["error"]["message"]


WF_11 = """
from takohost import StepFailed
def boom():
    raise RuntimeError("boom")
class Identity:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        variant = event["params"]["variant"]
        if variant == "a":
            step.do("x", boom)
        try:
            step.do("x", boom)
        except Exception as e:
            try:
                e.name = "other"
                assignable = True
            except AttributeError:
                assignable = False
            if variant == "b":
                raise e
            if variant == "c":
                raise RuntimeError("step_failed")
            if variant == "d":
                raise StepFailed(str(e))
            if variant == "e":
                raise RuntimeError("wrapped") from e
            return {"name": e.name, "assignable": assignable}
        return {}
"""


@pytest.mark.parametrize(
    "variant, reason",
    [
        ("a", "step_failed"),
        ("b", "step_failed"),
        ("c", "run_threw"),
        ("d", "run_threw"),
        ("e", "run_threw"),
    ],
)
def test_WF_11_only_the_genuine_step_failed_object_ends_step_failed(deploy, driver, variant, reason):
    run = deploy(WF_11, "Identity")
    run.create(variant, {"variant": variant})
    driver.run()
    status = run.status(variant)
    assert status["status"] == "errored" and status["error"]["reason"] == reason


def test_WF_11_the_caught_error_has_a_read_only_name(deploy, driver):
    run = deploy(WF_11, "Identity")
    run.create("f", {"variant": "f"})
    driver.run()
    assert run.status("f") == {"status": "complete", "output": {"name": "step_failed", "assignable": False}}


WF_14 = """
class Many:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        n = event["params"]["n"]
        try:
            for i in range(n):
                step.do(f"s{i}", lambda: None)
        except BaseException:
            pass                         # cannot rescue the instance
        return {"done": True}
"""


def test_WF_14_the_1025th_step_ends_the_instance(deploy, driver):
    run = deploy(WF_14, "Many")
    run.create("wf14a", {"n": 1024})
    run.create("wf14b", {"n": 1025})
    driver.run()
    assert run.status("wf14a") == {"status": "complete", "output": {"done": True}}
    status = run.status("wf14b")
    assert status["status"] == "errored" and status["error"]["reason"] == "step_limit_exceeded"
    assert "output" not in status
    steps = run.steps("wf14b")
    assert len(steps) == 1024 and "s1024" not in steps


WF_15_V1 = """
def fail(): raise RuntimeError('v1')   # module level in v1
class Pay:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("a", fail, {"maxAttempts": 3, "initialDelaySeconds": 60})
"""
WF_15_KIND = """
class Pay:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep('a', 10); return {}
"""
WF_15_SAME = """
def fail2(): raise RuntimeError('v2')
class Pay:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do('a', fail2, {'maxAttempts': 1})
"""


@pytest.mark.parametrize(
    "v2, expected", [(WF_15_KIND, "step_definition_mismatch"), (WF_15_SAME, "step_failed")]
)
def test_WF_15_a_new_version_sees_the_pending_step_as_first_stored(deploy, driver, db_url, v2, expected):
    run = deploy(WF_15_V1, "Pay")
    run.create("wf15")
    assert driver.run() == ["retry"]
    version2 = workflows.add_version(
        db_url, space=run.space, worker=run.deployed.worker, source=v2, class_names=["Pay"]
    )
    workflows.set_deployment(db_url, deployment=run.deployed.deployment, versions={version2: 100})
    driver.advance(60)
    if expected == "step_failed":
        assert run.status("wf15")["status"] == "running"
        driver.advance(60)
    status = run.status("wf15")
    assert status["status"] == "errored" and status["error"]["reason"] == expected
    if expected == "step_failed":
        failures = [
            e["attributes"]["error"]["message"]
            for e in run.history("wf15")
            if e["eventType"] == "StepAttemptFailed"
        ]
        assert failures == ["v1", "v2", "v2"]  # 3 attempts total, the first stored policy kept


WF_17_RACE = """
import asyncio
class Race:                                  # async ABI
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        a = asyncio.ensure_future(step.wait_for_event("ok", {"type": "done", "timeoutSeconds": 600}))
        b = asyncio.ensure_future(step.wait_for_event("err", {"type": "error", "timeoutSeconds": 600}))
        try:
            done, _ = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            pass
        return {"raced": True}
"""
WF_17_BG = """
import asyncio
class Race:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        asyncio.ensure_future(step.do("bg", lambda: {"x": 1}))
        return {"returned": True}
"""


@pytest.mark.parametrize("source", [WF_17_RACE, WF_17_BG])
def test_WF_17_overlapping_or_unsettled_steps_are_a_mismatch(deploy, driver, source):
    run = deploy(source, "Race")
    run.create("wf17")
    assert driver.run() == ["errored"]
    status = run.status("wf17")
    assert status["status"] == "errored" and status["error"]["reason"] == "step_definition_mismatch"
    assert "output" not in status


ASYNC_OK = """
import asyncio
class Async:
    def __init__(self, env): self.env = env
    async def run(self, event, step):
        async def fetch():
            await asyncio.sleep(0)
            return {"async": True}
        a = await step.do("a", fetch)
        b = await step.do("b", lambda: {"sync": True})
        await step.sleep("s", 0)
        return {"a": a, "b": b}
"""


def test_async_run_with_sync_and_async_effects(deploy, driver):
    run = deploy(ASYNC_OK, "Async")
    run.create("async")
    driver.run()
    assert run.status("async") == {
        "status": "complete",
        "output": {"a": {"async": True}, "b": {"sync": True}},
    }


WF_19 = """
class Returns:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"dict": {"output": 1}, "none": None, "list": [1, 2]}[event["params"]["kind"]]
"""


def test_WF_19_output_is_returned_as_is(deploy, driver):
    run = deploy(WF_19, "Returns")
    for kind in ("dict", "none", "list"):
        run.create(kind, {"kind": kind})
    driver.run()
    assert run.status("dict") == {"status": "complete", "output": {"output": 1}}
    assert run.status("none") == {"status": "complete"}
    status = run.status("list")
    assert status["status"] == "errored" and status["error"]["reason"] == "run_threw"


WF_20 = """
class Big:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("tree", lambda: {"p": "a" * 1048569}, {"maxAttempts": 2})
"""


def test_WF_20_an_oversized_result_is_a_failed_attempt(deploy, driver):
    run = deploy(WF_20, "Big")
    run.create("wf20")
    assert driver.run() == ["retry", "errored"]
    status = run.status("wf20")
    assert status["error"]["reason"] == "step_failed"
    failures = [e["attributes"] for e in run.history("wf20") if e["eventType"] == "StepAttemptFailed"]
    assert len(failures) == 2 and all(f["error"]["type"] == "DocumentTooLarge" for f in failures)
    assert run.steps("wf20")["tree"].result is None


WF_22 = """
class Lifetime:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("first", lambda: {})
        step.sleep("long", 31536000)
        return {"unreachable": True}
"""


def test_WF_22_a_sleep_past_the_lifetime_ends_lifetime_exceeded(deploy, driver):
    run = deploy(WF_22, "Lifetime")
    created = driver.clock()
    run.create("wf22")
    driver.clock.advance(5)
    driver.run()
    assert run.status("wf22") == {"status": "sleeping"}
    assert (run.steps("wf22")["long"].wake_at - created).total_seconds() == 31536005  # not shortened
    assert (run.timers("wf22")["wake"] - created).total_seconds() == 31536000  # fires at the lifetime end
    assert driver.advance(31535994) == []
    assert driver.advance(1) == ["errored"]
    status = run.status("wf22")
    assert (
        status == {"status": "errored", "error": status["error"]}
        and status["error"]["reason"] == "lifetime_exceeded"
    )


WF_24 = """
class Args:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        calls = [
            lambda: step.sleep('n', -1),
            lambda: step.sleep('f', 1.5),
            lambda: step.sleep('b', True),
            lambda: step.sleep('big', 31536001),
            lambda: step.wait_for_event('w0', {'type': 't', 'timeoutSeconds': 0}),
            lambda: step.wait_for_event('w1', {'type': 't'}),
            lambda: step.do('', lambda: {}),
            lambda: step.do('x'*257, lambda: {}),
            lambda: step.wait_for_event('w2', {'type': '', 'timeoutSeconds': 5}),
        ]
        seen = []
        for call in calls:
            try:
                call()
                seen.append("ok")
            except TypeError:
                seen.append("TypeError")
        step.sleep('z', 0)
        name = "\\U0001F600" * 256
        step.do(name, lambda: {"emoji": True})
        return {"seen": seen, "zero": "done"}
"""


def test_WF_24_argument_checks_are_type_errors_and_sleep_zero_completes_in_place(deploy, driver):
    run = deploy(WF_24, "Args")
    run.create("wf24")
    assert driver.run() == ["complete"]
    assert run.status("wf24") == {"status": "complete", "output": {"seen": ["TypeError"] * 9, "zero": "done"}}
    assert set(run.steps("wf24")) == {"z", "\U0001f600" * 256}
    assert "ContextSuspended" not in run.event_types("wf24")


WF_24_BOUNDARIES = """
class Bounds:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.wait_for_event("w1", {"type": "\\U0001F600" * 256, "timeoutSeconds": 1})
        return {}
"""


def test_WF_24_boundary_values_are_accepted(deploy, driver):
    run = deploy(WF_24_BOUNDARIES, "Bounds")
    run.create("b")
    assert driver.run() == ["waiting"]
    run.send("b", "\U0001f600" * 256, {"ok": 1})
    assert driver.run() == ["complete"]


SANDBOX = """
import os
class Probe:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        sockets = [fd for fd in fds if os.path.islink(f"/proc/self/fd/{fd}")
                   and os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")]
        return {"takohost": sorted(k for k in os.environ if k.startswith("TAKOHOST")),
                "sockets": len(sockets), "env": sorted(os.environ)}
"""


def test_user_code_sees_no_host_settings_and_only_its_channel_socket(deploy, driver):
    assert any(k.startswith("TAKOHOST_") for k in os.environ)  # the host has them
    run = deploy(SANDBOX, "Probe")
    run.create("probe")
    driver.run()
    output = run.status("probe")["output"]
    assert output["takohost"] == []
    assert output["sockets"] == 1  # the channel to its context; no database or Redis socket


COUNTER = """
COUNT = [0]
class Counter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        COUNT[0] += 1
        first = step.do("first", lambda: {"count": COUNT[0]})
        step.sleep("nap", 5)
        return {"first": first, "second": COUNT[0]}
"""


def test_module_globals_are_fresh_in_every_context(deploy, driver):
    run = deploy(COUNTER, "Counter")
    run.create("c")
    assert driver.run() == ["sleeping"]
    assert driver.advance(5) == ["complete"]
    assert run.status("c")["output"] == {"first": {"count": 1}, "second": 1}


def test_completed_steps_replay_without_running_the_effect_again(deploy, driver, tmp_path):
    source = """
import json
class Replay:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        log = event["params"]["log"]
        def effect():
            with open(log, "a") as f:
                f.write("ran\\n")
            return {"v": 1}
        a = step.do("a", effect)
        step.sleep("s", 10)
        b = step.do("a", lambda: {"v": 2})      # same name: replays
        return {"a": a, "b": b}
"""
    log = str(tmp_path / "calls")
    run = deploy(source, "Replay")
    run.create("r", {"log": log})
    driver.run()
    driver.advance(10)
    assert run.status("r")["output"] == {"a": {"v": 1}, "b": {"v": 1}}
    assert _lines(log) == ["ran"]


def test_history_is_gapless_and_ordered(deploy, driver):
    run = deploy(WF_01, "Approve")
    run.create("h")
    driver.run()
    run.send("h", "approve")
    driver.run()
    history = run.history("h")
    assert [e["eventId"] for e in history] == list(range(1, len(history) + 1))
    types = [e["eventType"] for e in history]
    assert types[0] == "InstanceCreated" and types[-1] == "InstanceCompleted"
    assert types.count("ContextStarted") == 2
    assert run.status("h") == {"status": "complete", "output": {"got": None}}
    json.dumps(history)  # JSON-serialisable as served


SYNC_OVERLAP = """
class Nested:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def effect():
            try:
                step.do("inner", lambda: {})
            except BaseException:
                pass
            return {"escaped": True}
        try:
            step.do("outer", effect)
        except BaseException:
            pass
        return {"rescued": True}
"""


def test_a_step_called_inside_an_effect_is_an_uncatchable_mismatch(deploy, driver):
    run = deploy(SYNC_OVERLAP, "Nested")
    run.create("nested")
    assert driver.run() == ["errored"]
    status = run.status("nested")
    assert status["error"]["reason"] == "step_definition_mismatch"
    assert run.steps("nested") == {}


def test_a_pending_name_reused_as_another_kind_in_the_same_code_is_a_mismatch(deploy, driver):
    source = """
class Reuse:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.wait_for_event("x", {"type": "t", "timeoutSeconds": 1})
        except Exception:
            pass
        return {}
"""
    run = deploy(source, "Reuse")
    run.create("reuse")
    assert driver.run() == ["waiting"]
    version2 = workflows.add_version(
        run.db_url,
        space=run.space,
        worker=run.deployed.worker,
        class_names=["Reuse"],
        source=source.replace(
            'step.wait_for_event("x", {"type": "t", "timeoutSeconds": 1})', 'step.do("x", lambda: {})'
        ),
    )
    workflows.set_deployment(run.db_url, deployment=run.deployed.deployment, versions={version2: 100})
    assert driver.advance(1) == ["errored"]
    assert run.status("reuse")["error"]["reason"] == "step_definition_mismatch"


def test_DOC_09_an_oversized_output_is_run_threw_and_never_stored(deploy, driver):
    source = """
class Big:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"p": "a" * event["params"]["n"]}
"""
    run = deploy(source, "Big")
    run.create("fits", {"n": 1048568})
    run.create("big", {"n": 1048569})
    driver.run()
    assert run.status("fits")["output"] == {"p": "a" * 1048568}
    status = run.status("big")
    assert (
        status["status"] == "errored" and status["error"]["reason"] == "run_threw" and "output" not in status
    )


NESTED_SYNC = """
class Nested:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def outer():
            try:
                step.do("inner", lambda: {"x": 1})   # a step from inside a sync effect
            except BaseException:
                pass
            return {"outer": True}
        try:
            step.do("outer", outer)
        except BaseException:
            pass
        return {"rescued": True}
"""


def test_a_step_called_inside_a_sync_effect_is_an_uncatchable_mismatch(deploy, driver):
    run = deploy(NESTED_SYNC, "Nested")
    run.create("nested")
    assert driver.run() == ["errored"]
    status = run.status("nested")
    assert status["status"] == "errored" and status["error"]["reason"] == "step_definition_mismatch"
    assert "outer" not in run.steps("nested")  # the outer attempt never completed


FORGER = """
import json, os, struct, time
class Forger:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("ok", lambda: {"fine": True})
        body = json.dumps({"op": "run_failed", "reason": "step_failed", "message": "forged",
                           "phase": "run", "step": event["params"]["step"]}).encode()
        os.write(3, struct.pack(">I", len(body)) + body)   # the child is untrusted: a raw frame
        time.sleep(30)
"""


@pytest.mark.parametrize("named", ["ok", "never-ran"])
def test_a_forged_step_failed_report_is_run_threw(deploy, driver, named):
    run = deploy(FORGER, "Forger")
    run.create("forged", {"step": named})
    assert driver.run() == ["errored"]
    status = run.status("forged")
    assert status["status"] == "errored" and status["error"]["reason"] == "run_threw"
