"""The tenant SDK's types (``takohost.sdk``, docs/spec/worker-forms.md#wf-abi) check a tenant's code:
mypy accepts a module that uses ``step``, ``env``, the scheduled handler's ``event``/``ctx`` and the
errors correctly, and rejects each wrong use below with the error a tenant's editor would show.
Real mypy runs over sample modules; the host's own ``step`` objects satisfy the Protocols."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from takohost import sdk
from takohost.runtime import step as runtime_step

REPO = Path(__file__).resolve().parents[2]

GOOD = """
from __future__ import annotations

import asyncio

from takohost import sdk


def fetch() -> sdk.Document:
    return {"id": 1}


class ReportWorkflow:
    def __init__(self, env: sdk.Env) -> None:
        self.env = env

    def run(self, event: sdk.WorkflowEvent, step: sdk.Step) -> sdk.Document | None:
        params = event.get("params", {})
        policy: sdk.RetryPolicy = {"maxAttempts": 3, "backoff": "exponential", "initialDelaySeconds": 2}
        user = step.do("load user", fetch, policy)
        step.do("plain", lambda: None)
        step.sleep("cool off", 60)
        ok = step.wait_for_event("approval", {"type": "approved", "timeoutSeconds": 3600})
        orders: sdk.WorkflowBinding = self.env.ORDERS
        child = orders.create(id="order-1", params={"n": 1})
        status: sdk.InstanceStatus = child.status()
        if status["status"] == "errored" and "error" in status:
            reason: sdk.FailureReason = status["error"]["reason"]
            print(reason)
        child.send_event("approved", {"by": "me"})
        child.terminate()
        try:
            step.do("may fail", fetch, {"maxAttempts": 1})
        except sdk.StepFailed as exc:
            name: str = exc.name
            print(name)
        return {"user": user, "approved": ok, "params": params, "instance": event["instanceId"]}


class AsyncWorkflow:
    def __init__(self, env: sdk.Env) -> None:
        pass

    async def run(self, event: sdk.WorkflowEvent, step: sdk.AsyncStep) -> None:
        await step.do("a", fetch)
        await step.sleep("b", 0)
        payload = await step.wait_for_event("c", {"type": "t", "timeoutSeconds": 1})
        print(payload)


def scheduled(event: sdk.ScheduledEvent, env: sdk.Env, ctx: sdk.ScheduledContext) -> None:
    when: int = event["scheduledTime"]
    cron: str = event["cron"]
    ctx.wait_until(lambda: print(when, cron))
    ctx.wait_until(asyncio.sleep(0))
"""

#: (label, a wrong statement inside ``run``, a fragment of mypy's message)
WRONG = [
    ("unknown retry key", 'step.do("x", lambda: None, {"maxAttempts": 1, "retries": 2})', "RetryPolicy"),
    ("retry policy without maxAttempts", 'step.do("x", lambda: None, {"backoff": "constant"})', "RetryPolicy"),
    ("backoff not a known word", 'step.do("x", lambda: None, {"maxAttempts": 1, "backoff": "linear"})', "RetryPolicy"),
    ("sleep of a string", 'step.sleep("x", "60")', 'expected "int"'),
    ("wait without timeout", 'step.wait_for_event("x", {"type": "t"})', "timeoutSeconds"),
    ("a step method that does not exist", 'step.wait("x")', 'has no attribute "wait"'),
    ("an effect that takes an argument", 'step.do("x", lambda n: None)', "Callable[[]"),
    ("event key that run does not get", 'print(event["params2"])', "params2"),
    ("the instance id used as a number", 'print(event["instanceId"] + 1)', "Unsupported operand"),
]

WRONG_TEMPLATE = """
from takohost import sdk


class W:
    def run(self, event: sdk.WorkflowEvent, step: sdk.Step) -> None:
        {statement}
"""


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "tenant_main.py"
    module.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "--no-error-summary", str(module)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_tenant_module_using_the_sdk_correctly_passes_strict_mypy(tmp_path):
    result = mypy(tmp_path, GOOD)
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_wrong_use_of_the_sdk_fails_mypy_where_it_is(tmp_path):
    source = WRONG_TEMPLATE
    lines = []
    for _, statement, _ in WRONG:
        lines.append(statement)
    body = "\n        ".join(lines)
    result = mypy(tmp_path, source.format(statement=body))
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    first_line = 7  # line of the first statement in WRONG_TEMPLATE
    for index, (label, _, fragment) in enumerate(WRONG):
        at = [e for e in errors if e.split(":")[1] == str(first_line + index)]
        assert at, f"{label}: no mypy error on its line\n{result.stdout}"
        assert any(fragment in e for e in at), f"{label}: {at}"


@pytest.mark.parametrize(
    ("host_class", "protocol"),
    [(runtime_step.Step, sdk.Step), (runtime_step.AsyncStep, sdk.AsyncStep)],
)
def test_the_hosts_step_classes_satisfy_the_sdk_protocols(host_class, protocol):
    assert issubclass(host_class, protocol)


def test_the_package_ships_its_type_marker():
    assert (REPO / "takohost" / "py.typed").is_file()
    assert 'takohost = ["py.typed"]' in (REPO / "pyproject.toml").read_text()
