"""The SDK's types import inside the sandbox: ``takohost/`` is copied into every context's root
(``takohost.runtime.isolation.mounts.SDK_ROOT``), so ``from takohost import sdk`` works in tenant
code, runs the standard library only, and the host's own ``step``, ``env`` bindings and ``ctx``
satisfy its Protocols there (docs/spec/worker-forms.md#wf-abi). Real zygote and children."""

from __future__ import annotations

import textwrap

from takohost.runtime.isolation import mounts
from tests.support.fake_parent import FakeParent

WORKFLOW = """
import sys
from takohost import sdk
import takohost

class W:
    def __init__(self, env: sdk.Env) -> None:
        self.env = env

    def run(self, event: sdk.WorkflowEvent, step: sdk.Step) -> sdk.Document:
        policy: sdk.RetryPolicy = {"maxAttempts": 2}
        value = step.do("typed", lambda: {"n": 1}, policy)
        orders: sdk.WorkflowBinding = self.env.ORDERS
        return {
            "file": sdk.__file__,
            "step": isinstance(step, sdk.Step),
            "binding": isinstance(orders, sdk.WorkflowBinding),
            "errors": sdk.StepFailed is takohost.StepFailed and sdk.WaitTimeout is takohost.WaitTimeout,
            "value": value,
            "host_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("workers", "services", "models")),
        }
"""

SCHEDULED = """
from takohost import sdk

def scheduled(event: sdk.ScheduledEvent, env: sdk.Env, ctx: sdk.ScheduledContext) -> None:
    assert isinstance(ctx, sdk.ScheduledContext), type(ctx)
    assert isinstance(event["scheduledTime"], int) and event["cron"] == "* * * * *"
    assert sdk.__file__.startswith(%r), sdk.__file__
"""


def test_the_sdk_types_import_in_a_replay_context_and_match_the_hosts_objects(zygote):
    fake = FakeParent(zygote, modules={"main.py": textwrap.dedent(WORKFLOW)}, class_name="W", bindings=["ORDERS"])
    outcome = fake.run_until_suspended()
    assert outcome.status == "complete", outcome
    output = outcome.output
    assert output is not None
    assert output["file"] == f"{mounts.SDK_DIR}/sdk.py"
    assert output["step"] is True
    assert output["binding"] is True
    assert output["errors"] is True
    assert output["value"] == {"n": 1}
    assert output["host_modules"] == []


def test_the_sdk_types_import_in_a_scheduled_handler(zygote):
    handle = zygote.spawn(
        {
            "kind": "scheduled",
            "mainModule": "main.py",
            "modules": {"main.py": textwrap.dedent(SCHEDULED % mounts.SDK_DIR)},
            "event": {"cron": "* * * * *", "scheduledTime": 1_700_000_000_000},
        }
    )
    with handle:
        assert handle.recv(timeout=10) == {"op": "scheduled_done", "ok": True}
