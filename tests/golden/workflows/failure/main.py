"""A step that fails every attempt (delay 0: each retry in a fresh context at once), uncaught:
the instance ends errored with reason step_failed."""


def refuse():
    raise ValueError("always refused")


class Failure:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        step.do("first", lambda: {"ok": True})
        step.do("refused", refuse, {"maxAttempts": 3, "initialDelaySeconds": 0})
        return {"unreachable": True}
