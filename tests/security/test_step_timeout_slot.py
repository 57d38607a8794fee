"""An effect that never returns holds a worker slot for one attempt time limit at most (docs/spec/host-features.md#hf-neighbours
item 1; docs/spec/host-limits.md#hl-decisions "Attempt time limit"): on a real worker with ONE slot, Space A's instance
whose effect never returns is stopped after ``TAKOHOST_STEP_TIMEOUT_SECONDS`` (set small for these
processes: the setting itself is what is tested), its attempt recorded as failed with an error that
names the limit, and Space B's instance then runs on the same slot. Before the limit the slot was
held for good and B stayed ``queued``.
"""

from __future__ import annotations

import time
import uuid

from models import db as models_db
from services import tokens
from tests.support import workflows

LIMIT_S = 2

HANG = """
import time
class Hang:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def forever():
            while True:
                time.sleep(0.1)
        return step.do("forever", forever, {"maxAttempts": 1})
"""

ONE = """
class One:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("one", lambda: {"ok": True})
"""


def test_a_never_ending_effect_frees_the_only_slot_after_the_attempt_time_limit():
    env = {"TAKOHOST_STEP_TIMEOUT_SECONDS": str(LIMIT_S)}
    with workflows.private_stack(workers=1, worker_pool="solo", worker_concurrency=1, extra_env=env) as stack:
        hang = workflows.deploy(stack.db_url, space=stack.space, source=HANG, class_name="Hang")
        space_b = f"s{uuid.uuid4().hex[:12]}"
        with models_db.session_scope(stack.db_url) as session:
            token_b = tokens.create_token_txn(session, space=space_b)
        one = workflows.deploy(stack.db_url, space=space_b, source=ONE, class_name="One")
        http_a = stack.instances(hang.workflow)
        http_b = workflows.HttpInstances(stack.api_url, token_b, space_b, one.workflow)
        code, body = http_a.call("POST", "", {"id": "hang"}, headers={"Idempotency-Key": uuid.uuid4().hex})
        assert code == 201, body
        workflows.wait_until(lambda: http_a.status("hang")["status"] == "running", timeout=60,
                             message="the hanging effect runs")
        started = time.monotonic()
        code, body = http_b.call("POST", "", {"id": "b"}, headers={"Idempotency-Key": uuid.uuid4().hex})
        assert code == 201, body
        workflows.wait_until(lambda: http_b.status("b")["status"] == "complete", timeout=LIMIT_S + 30,
                             message="Space B's instance runs once the slot is freed")
        waited = time.monotonic() - started
        # the attempt's failure is committed before the slot is freed; raising StepFailed in run
        # takes the hanging instance a context of its own, which may come after B's
        workflows.wait_until(lambda: http_a.status("hang")["status"] == "errored", timeout=60,
                             message="the hanging instance ends errored")
        status = {k: v for k, v in http_a.status("hang").items() if k != "id"}
        print(f"B complete {waited:.2f} s after its create, behind a never-ending effect (limit {LIMIT_S} s)")
        assert waited < LIMIT_S + 10, waited
        assert status == {
            "status": "errored",
            "error": {
                "reason": "step_failed",
                "message": "step failed after 1 attempt: StepTimeout: step 'forever' attempt 1 exceeded "
                f"TAKOHOST_STEP_TIMEOUT_SECONDS={LIMIT_S}",
            },
        }, status
