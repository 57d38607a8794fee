"""Non-deterministic code outside steps: a step name drawn at random per context. The second
context asks for a name the history never recorded: ReplayDiverged (a diagnostic) in the engine's
history, and a divergence at step 1 when the history is replayed."""

import uuid


class Divergence:
    def __init__(self, env):
        self.suffix = uuid.uuid4().hex[:8]

    def run(self, event, step):
        step.do(f"pick {self.suffix}", lambda: {"picked": True})
        step.sleep("pause", 10)
        return {"done": True}
