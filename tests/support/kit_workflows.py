"""Workflow classes for the test kit's own tests (tests/unit/test_testing_kit.py): top-level in an
importable module, so the kit executes this module again for every context."""

from __future__ import annotations

import time

from takohost import StepFailed, WaitTimeout

#: Executions of this module's code in this module object (fresh state: always 1 in a context).
IMPORTS = 0
IMPORTS += 1


class Counter:
    """Each context reports the module state it saw; sleeps split it into three contexts."""

    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        global IMPORTS
        seen = []
        for i in range(3):
            seen.append(step.do(f"look {i}", lambda: {"imports": IMPORTS, "id": id(Counter)}))
            step.sleep(f"nap {i}", 60)
        return {"seen": seen}


class NoFinally:
    """Code after a suspension never runs: not even a ``finally:`` (the context's child is gone)."""

    def __init__(self, env):
        self.path = env.MARK_FILE

    def run(self, event, step):
        try:
            step.sleep("nap", 30)
        finally:
            with open(self.path, "a") as f:
                f.write("finally ran\n")
        return {"woke": True}


class Flaky:
    """A step with an exponential retry policy."""

    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        policy = {"maxAttempts": 4, "backoff": "exponential", "initialDelaySeconds": 10, "maxDelaySeconds": 25}
        try:
            value = step.do("call", lambda: {"ok": True}, policy)
        except StepFailed as failure:
            return {"failed": failure.message}
        return {"value": value}


class Mismatch:
    """``step_definition_mismatch``: a step called from inside an effect, or a failed ``do``'s name
    reused as a wait (a completed success would replay; a failure cannot be another kind's)."""

    def __init__(self, env):
        self.how = env.HOW

    def run(self, event, step):
        if self.how == "inside":
            step.do("outer", lambda: step.do("inner", lambda: {}))
            return {}
        try:
            step.do("a", lambda: 1 / 0)
        except StepFailed:
            pass
        step.wait_for_event("a", {"type": "t", "timeoutSeconds": 5})
        return {}


class BadDocuments:
    def __init__(self, env):
        self.what = env.WHAT

    def run(self, event, step):
        if self.what == "tuple":
            return {"v": step.do("t", lambda: (1, 2))}
        if self.what == "big":
            return {"v": step.do("b", lambda: {"s": "x" * (1024 * 1024)})}
        return ("not", "a", "document")


class OwnStepFailed:
    def __init__(self, env):
        self.genuine = env.GENUINE

    def run(self, event, step):
        if self.genuine:
            step.do("always", lambda: (_ for _ in ()).throw(RuntimeError("no")))
        raise StepFailed("made up")


class Waiter:
    def __init__(self, env):
        pass

    def run(self, event, step):
        try:
            got = step.wait_for_event("go", {"type": "go", "timeoutSeconds": 3600})
        except WaitTimeout as late:
            return {"late": late.message}
        step.sleep("after", 100)
        return {"got": got}


class AsyncFlow:
    def __init__(self, env):
        pass

    async def run(self, event, step):
        a = await step.do("a", lambda: {"n": 1})
        await step.sleep("s", 5)
        b = await step.do("b", lambda: {"n": a["n"] + 1})
        return {"b": b["n"], "params": event.get("params")}


class Caller:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        child = step.do("create child", lambda: {"id": self.env.OTHERS.create(id="c-1", params={"x": 1}).id})
        return {"child": child["id"], "status": self.env.OTHERS.get("c-1").status()}


class Slow:
    """Code that runs longer than the kit's ``timeout`` without a step request."""

    def __init__(self, env):
        self.seconds = env.SECONDS

    def run(self, event, step):
        time.sleep(self.seconds)
        return {}
