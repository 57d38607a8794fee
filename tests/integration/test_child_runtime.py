"""The child runtime's workflow semantics through real sandbox children and an in-memory parent
(``tests.support.fake_parent``): step replay, argument rules, error identity, overlap, env and
bindings, scheduled handlers. Needs no Postgres or Redis."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from takohost.domain.decide import StepRecord
from tests.support.fake_parent import FakeParent


def parent(zygote, source: str, class_name: str = "W", **kwargs) -> FakeParent:
    return FakeParent(zygote, modules={"main.py": textwrap.dedent(source)}, class_name=class_name, **kwargs)


# -- WF-07: a retry runs in a fresh context, module state restarts ---------------------------------

WF07 = """
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


def test_WF_07_zero_delay_retry_runs_in_fresh_context(zygote, tmp_path: Path):
    fake = parent(zygote, WF07, "ZeroDelay", params={"marker": str(tmp_path / "wf07.marker")})
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", {"contexts_seen_by_effect": 1})
    assert fake.contexts == 2
    assert fake.steps["once-more"].attempts == 2
    assert outcome.kill_proven


# -- WF-08: bad retry policies are catchable TypeErrors, no effect runs ----------------------------

WF08 = """
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


def test_WF_08_bad_policies_raise_type_error_and_run_nothing(zygote):
    fake = parent(zygote, WF08, "BadPolicies")
    outcome = fake.run_until_suspended()
    assert outcome.status == "complete"
    assert outcome.output == {"seen": ["TypeError"] * 8}
    assert fake.effect_runs == 0
    assert fake.steps == {}  # nothing recorded for those names
    assert all("argsError" in m for m in fake.messages if m["op"] == "do")


def test_WF_08_uncaught_bad_policy_is_run_threw(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                return step.do("s", lambda: {}, {"maxAttempts": 0})
    """,
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "run_threw")
    assert outcome.message.startswith("TypeError: ")
    assert fake.effect_runs == 0


def test_completed_name_replays_without_looking_at_other_arguments(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                a = step.do("a", "not callable", {"maxAttempts": 0})
                b = step.sleep("b", -5)
                c = step.wait_for_event("c", "bad options")
                return {"a": a, "c": c}
    """,
    )
    fake.steps["a"] = StepRecord(name="a", kind="do", state="succeeded", result={"v": 1})
    fake.steps["b"] = StepRecord(name="b", kind="sleep", state="succeeded")
    fake.steps["c"] = StepRecord(name="c", kind="wait", state="succeeded", result={"p": 2})
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", {"a": {"v": 1}, "c": {"p": 2}})
    assert fake.effect_runs == 0


# -- WF-11: only the genuine StepFailed object ends as step_failed ---------------------------------

WF11 = """
from takohost import StepFailed
def boom():
    raise RuntimeError("boom")
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        variant = event["params"]["variant"]
        if variant == "a":
            step.do("x", boom)
        try:
            step.do("x", boom)
        except Exception as e:
            assert e.name == "step_failed"
            try:
                e.name = "other"
            except AttributeError:
                pass
            else:
                raise AssertionError("name was assignable")
            if variant == "b":
                raise e
            if variant == "c":
                raise RuntimeError("step_failed")
            if variant == "d":
                raise StepFailed(str(e))
            if variant == "e":
                raise RuntimeError("wrapped") from e
"""


@pytest.mark.parametrize(
    ("variant", "reason"),
    [("a", "step_failed"), ("b", "step_failed"), ("c", "run_threw"), ("d", "run_threw"), ("e", "run_threw")],
)
def test_WF_11_error_identity(zygote, variant: str, reason: str):
    fake = parent(zygote, WF11, params={"variant": variant})
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", reason), outcome.message
    failed = [m for m in fake.messages if m["op"] == "run_failed"]
    if reason == "step_failed":
        assert failed[0]["step"] == "x"
    assert "AssertionError" not in (outcome.message or "")


def test_WF_11_replayed_failure_is_genuine_in_a_later_context(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                step.sleep("first", 60)
                step.do("x", lambda: 1 / 0)
    """,
    )
    assert fake.run_until_suspended().status == "sleeping"
    fake.wake_sleeps()
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "step_failed")
    fake2 = parent(
        zygote,
        "class W:\n    def __init__(self, env): pass\n    def run(self, event, step):\n"
        "        step.do('x', lambda: {})\n",
    )
    fake2.steps["x"] = StepRecord(name="x", kind="do", state="failed", error={"message": "recorded"})
    outcome = fake2.run_until_suspended()
    assert (outcome.status, outcome.reason, outcome.message) == ("errored", "step_failed", "recorded")
    assert fake2.effect_runs == 0


def test_uncaught_wait_timeout_is_run_threw(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                step.wait_for_event("w", {"type": "t", "timeoutSeconds": 5})
    """,
    )
    assert fake.run_until_suspended().status == "waiting"
    fake.time_out_waits()
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "run_threw")
    assert outcome.message.startswith("WaitTimeout")


# -- WF-17: overlapping steps and run settling with a pending step ---------------------------------

WF17_RACE = """
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

WF17_BACKGROUND = """
import asyncio
class Bg:
    def __init__(self, env): pass
    async def run(self, event, step):
        asyncio.ensure_future(step.do("bg", lambda: open(event["params"]["marker"], "w").close()))
        return {"returned": True}
"""

WF17_GATHER = """
import asyncio
class Gather:
    def __init__(self, env): pass
    async def run(self, event, step):
        try:
            await asyncio.gather(step.do("a", lambda: {}), step.do("b", lambda: {}))
        except BaseException:
            pass
        return {"gathered": True}
"""

WF17_NESTED_SYNC = """
class Nested:
    def __init__(self, env): pass
    def run(self, event, step):
        def outer():
            try:
                step.do("inner", lambda: {})
            except BaseException:
                pass
            return {"outer": True}
        try:
            step.do("outer", outer)
        except BaseException:
            pass
        return {"survived": True}
"""


@pytest.mark.parametrize(
    ("source", "class_name"),
    [(WF17_RACE, "Race"), (WF17_BACKGROUND, "Bg"), (WF17_GATHER, "Gather"), (WF17_NESTED_SYNC, "Nested")],
)
def test_WF_17_overlap_is_an_uncatchable_mismatch(zygote, tmp_path: Path, source: str, class_name: str):
    marker = tmp_path / "bg.marker"
    fake = parent(zygote, source, class_name, params={"marker": str(marker)})
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "step_definition_mismatch")
    assert outcome.output is None
    assert outcome.kill_proven
    assert not marker.exists()  # the un-awaited step's effect never ran
    assert not any(m["op"] in ("run_returned", "run_failed") for m in fake.messages)


def test_WF_17_cancelled_async_effect_is_a_mismatch(zygote):
    fake = parent(
        zygote,
        """
        import asyncio
        class W:
            def __init__(self, env): pass
            async def run(self, event, step):
                async def slow():
                    await asyncio.sleep(30)
                    return {}
                try:
                    await asyncio.wait_for(step.do("slow", slow), 0.1)
                except BaseException:
                    pass
                return {"gave_up": True}
    """,
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "step_definition_mismatch")


def test_async_run_with_sync_and_async_effects(zygote):
    fake = parent(
        zygote,
        """
        import asyncio
        class W:
            def __init__(self, env): pass
            async def run(self, event, step):
                async def later():
                    await asyncio.sleep(0.01)
                    return {"async": True}
                a = await step.do("sync", lambda: {"sync": True})
                b = await step.do("async", later)
                await step.sleep("zero", 0)
                p = await step.wait_for_event("w", {"type": "go", "timeoutSeconds": 10})
                return {"a": a, "b": b, "p": p}
    """,
    )
    fake.send_event("go", {"x": 1})
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == (
        "complete",
        {"a": {"sync": True}, "b": {"async": True}, "p": {"x": 1}},
    )


# -- WF-24: argument checks ------------------------------------------------------------------------

WF24 = """
BAD = [
    lambda step: step.sleep("n", -1),
    lambda step: step.sleep("f", 1.5),
    lambda step: step.sleep("b", True),
    lambda step: step.sleep("big", 31536001),
    lambda step: step.wait_for_event("w0", {"type": "t", "timeoutSeconds": 0}),
    lambda step: step.wait_for_event("w1", {"type": "t"}),
    lambda step: step.do("", lambda: {}),
    lambda step: step.do("x" * 257, lambda: {}),
    lambda step: step.wait_for_event("w2", {"type": "", "timeoutSeconds": 5}),
    lambda step: step.do("\\ud800", lambda: {}),
]
class W:
    def __init__(self, env): pass
    def run(self, event, step):
        zero = step.sleep("z", 0)
        seen = []
        for call in BAD:
            try:
                call(step)
                seen.append("ran")
            except TypeError:
                seen.append("TypeError")
        return {"zero": zero, "seen": seen}
"""


def test_WF_24_argument_checks(zygote):
    fake = parent(zygote, WF24)
    outcome = fake.run_until_suspended()
    assert outcome.status == "complete"
    assert outcome.output == {"zero": None, "seen": ["TypeError"] * 10}
    assert fake.contexts == 1  # sleep 0 completed in place
    assert set(fake.steps) == {"z"}  # nothing recorded for the bad calls


def test_WF_24_boundaries_are_accepted(zygote):
    fake = parent(
        zygote,
        """
        NAME = "\\U0001F600" * 256
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                step.do(NAME, lambda: {})
                step.sleep("big", 31536000)
                a = step.wait_for_event("long", {"type": NAME, "timeoutSeconds": 31536000})
                try:
                    step.wait_for_event("short", {"type": "t", "timeoutSeconds": 1})
                except Exception as e:
                    return {"a": a, "timeout": e.name}
    """,
    )
    name = "\U0001f600" * 256
    assert fake.run_until_suspended().status == "sleeping"
    assert fake.steps[name].state == "succeeded"
    fake.wake_sleeps()
    assert fake.run_until_suspended().status == "waiting"
    fake.send_event(name, {"ok": True})
    assert fake.run_until_suspended().status == "waiting"
    fake.time_out_waits()
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", {"a": {"ok": True}, "timeout": "wait_timeout"})


# -- documents ------------------------------------------------------------------------------------


def test_non_document_effect_result_is_a_failed_attempt(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                try:
                    step.do("bad", lambda: {"t": (1, 2)}, {"maxAttempts": 1})
                except Exception as e:
                    return {"caught": e.name}
    """,
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", {"caught": "step_failed"})
    result = next(m for m in fake.messages if m["op"] == "effect_result")
    assert result["ok"] is False and result["error"]["type"] == "InvalidDocument"


def test_non_document_return_is_run_threw(zygote):
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                return {"n": float("nan")}
    """,
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "run_threw")


def test_none_return_and_missing_class(zygote):
    fake = parent(
        zygote, "class W:\n    def __init__(self, env): pass\n    def run(self, event, step): pass\n"
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", None)
    missing = parent(zygote, "X = 1\n", "Nope")
    outcome = missing.run_until_suspended()
    assert (outcome.status, outcome.reason) == ("errored", "run_threw")
    assert "Nope" in outcome.message


# -- env and bindings ------------------------------------------------------------------------------

ENV = """
class W:
    def __init__(self, env):
        self.env = env
    def run(self, event, step):
        before = dict(self.env.CONF)
        self.env.CONF["mutated"] = True
        step.sleep("s", 10)
        return {"attrs": sorted(vars(self.env)), "before": before, "currency": self.env.CURRENCY}
"""


def test_env_holds_exactly_vars_as_deep_copies_and_bindings(zygote):
    variables = {"CURRENCY": "EUR", "CONF": {"a": [1, 2]}}
    fake = parent(zygote, ENV, variables=variables, bindings=["ORDERS"])
    assert fake.run_until_suspended().status == "sleeping"
    fake.wake_sleeps()
    outcome = fake.run_until_suspended()
    assert outcome.status == "complete"
    assert outcome.output == {
        "attrs": ["CONF", "CURRENCY", "ORDERS"],
        "before": {"a": [1, 2]},
        "currency": "EUR",
    }
    assert variables == {"CURRENCY": "EUR", "CONF": {"a": [1, 2]}}


BINDINGS = """
from takohost import InstanceExists
class W:
    def __init__(self, env):
        self.env = env
    def run(self, event, step):
        out = {}
        inst = self.env.ORDERS.create(id="order-1", params={"n": 1})
        out["id"] = inst.id
        out["status"] = inst.status()
        inst.send_event("approved", {"ok": True})
        inst.terminate()
        out["got"] = self.env.ORDERS.get("order-2").id
        for label, call in [
            ("bad_id", lambda: self.env.ORDERS.create(id="")),
            ("bad_params", lambda: self.env.ORDERS.create(params={"x": {1, 2}})),
            ("bad_type", lambda: inst.send_event(type=7)),
            ("big_payload", lambda: inst.send_event("t", {"s": "x" * 1048577})),
            ("exists", lambda: self.env.ORDERS.create(id="taken")),
        ]:
            try:
                call()
                out[label] = "no error"
            except Exception as e:
                out[label] = [type(e).__name__, getattr(e, "name", None)]
        return out
"""


def test_bindings_validate_then_call_the_parent(zygote):
    calls = []

    def handler(message):
        calls.append((message["call"], message["args"]))
        if message["args"].get("id") == "taken":
            return {"op": "binding_error", "name": "instance_exists", "message": "taken"}
        if message["call"] in ("create", "get"):
            return {"op": "binding_result", "value": {"id": message["args"]["id"]}}
        if message["call"] == "status":
            return {"op": "binding_result", "value": {"status": "waiting"}}
        return {"op": "binding_result", "value": None}

    fake = parent(zygote, BINDINGS, bindings=["ORDERS"], binding_handler=handler)
    outcome = fake.run_until_suspended()
    assert outcome.status == "complete", outcome.message
    assert outcome.output == {
        "id": "order-1",
        "status": {"status": "waiting"},
        "got": "order-2",
        "bad_id": ["TypeError", None],
        "bad_params": ["InvalidParams", "invalid_params"],
        "bad_type": ["TypeError", None],
        "big_payload": ["DocumentTooLarge", "document_too_large"],
        "exists": ["InstanceExists", "instance_exists"],
    }
    assert calls == [
        ("create", {"id": "order-1", "params": {"n": 1}}),
        ("status", {"id": "order-1"}),
        ("send_event", {"id": "order-1", "type": "approved", "payload": {"ok": True}}),
        ("terminate", {"id": "order-1"}),
        ("get", {"id": "order-2"}),
        ("create", {"id": "taken"}),
    ]


# -- scheduled handlers ----------------------------------------------------------------------------


def run_scheduled(zygote, source: str, **job) -> dict:
    handle = zygote.spawn(
        {
            "kind": "scheduled",
            "mainModule": "main.py",
            "modules": {"main.py": textwrap.dedent(source)},
            "event": {"cron": "* * * * *", "scheduledTime": 1_700_000_000_000},
            **job,
        }
    )
    with handle:
        return handle.recv(timeout=10)


def test_scheduled_handler_outcomes(zygote, tmp_path: Path):
    marker = tmp_path / "late"
    ok = run_scheduled(
        zygote,
        f"""
        import asyncio
        async def late():
            await asyncio.sleep(0.05)
            open({str(marker)!r}, "w").write("done")
        def scheduled(event, env, ctx):
            assert event == {{"cron": "* * * * *", "scheduledTime": 1700000000000}}
            ctx.wait_until(late())
    """,
    )
    assert ok == {"op": "scheduled_done", "ok": True}
    assert marker.read_text() == "done"
    raised = run_scheduled(zygote, "def scheduled(event, env, ctx):\n    raise ValueError('nope')\n")
    assert raised == {
        "op": "scheduled_done",
        "ok": False,
        "message": "ValueError: nope",
        "traceback": [  # the handler's own frame (docs/spec/host-features.md#hf-observability); the runtime's are trimmed
            {"module": "main", "file": "main.py", "line": 2, "function": "scheduled", "source": "raise ValueError('nope')"}
        ],
    }
    failed_wait = run_scheduled(
        zygote,
        """
        async def bad():
            raise KeyError("k")
        async def scheduled(event, env, ctx):
            ctx.wait_until(bad())
    """,
    )
    assert failed_wait["ok"] is False and failed_wait["message"].startswith("KeyError")
    missing = run_scheduled(zygote, "x = 1\n")
    assert missing["ok"] is False


def test_step_latency_is_small(zygote):
    """Not a benchmark: a 200-step workflow through the fake parent stays well below 2 s."""
    fake = parent(
        zygote,
        """
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                for i in range(200):
                    step.do(f"s{i}", lambda: {"i": 1})
                return {"n": 200}
    """,
    )
    started = time.perf_counter()
    outcome = fake.run_until_suspended()
    assert outcome.output == {"n": 200}
    assert time.perf_counter() - started < 2.0


def test_sys_exit_in_an_effect_is_a_failed_attempt(zygote):
    fake = parent(
        zygote,
        """
        import sys
        class W:
            def __init__(self, env): pass
            def run(self, event, step):
                try:
                    step.do("exit", lambda: sys.exit(2))
                except Exception as e:
                    return {"caught": e.name}
    """,
    )
    outcome = fake.run_until_suspended()
    assert (outcome.status, outcome.output) == ("complete", {"caught": "step_failed"})
    result = next(m for m in fake.messages if m["op"] == "effect_result")
    assert {k: v for k, v in result["error"].items() if k != "traceback"} == {"type": "SystemExit", "message": "2"}
    assert [f["function"] for f in result["error"]["traceback"]] == ["<lambda>"]
