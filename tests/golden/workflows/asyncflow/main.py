"""An async run: awaited do and sleep steps, and an event."""


class AsyncFlow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        first = await step.do("first", lambda: {"n": 1})
        await step.sleep("pause", 5)
        got = await step.wait_for_event("go", {"type": "go", "timeoutSeconds": 100})
        return {"first": first, "got": got}
