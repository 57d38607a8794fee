"""Retries: an effect that fails its first two attempts (counted in a file the params name, since
module state starts over in every context), exponential delays, then succeeds."""

import pathlib


def flaky(path):
    counter = pathlib.Path(path)
    seen = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(seen + 1))
    if seen < 2:
        raise ConnectionError(f"attempt {seen + 1} refused")
    return {"attempts": seen + 1}


class Retries:
    def __init__(self, env):
        self.env = env

    def run(self, event, step):
        policy = {"maxAttempts": 4, "backoff": "exponential", "initialDelaySeconds": 5}
        result = step.do("call", lambda: flaky(event["params"]["counter"]), policy)
        return {"result": result}
