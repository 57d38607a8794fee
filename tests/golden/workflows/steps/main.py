"""Every step kind: a do with a result, a 0-second sleep, a sleep, a wait that an event ends, a
wait that times out (golden history, tests/golden/README.md)."""

from takohost import WaitTimeout


class Steps:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        total = step.do("add", lambda: {"sum": sum(event["params"]["numbers"])})
        step.sleep("no pause", 0)
        step.sleep("pause", 60)
        got = step.wait_for_event("approval", {"type": "approve", "timeoutSeconds": 600})
        try:
            late = step.wait_for_event("second approval", {"type": "approve", "timeoutSeconds": 30})
        except WaitTimeout as timeout:
            late = {"timedOut": timeout.message}
        return {"total": total, "got": got, "late": late}
