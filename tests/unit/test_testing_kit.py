"""takohost.testing (docs/spec/host-features.md#hf-testing): workflows run in process with the host's own step semantics
and virtual time — the README tour's workflow (examples/orders), examples/approvals with a 3-day
reminder, fresh module state per context, no line after a suspension, retry delays, the step
kinds' errors, document limits, error provenance, events, explicit time and bindings."""

from __future__ import annotations

import datetime as dt
import pathlib
import time

import pytest

from takohost import errors, testing
from takohost.domain import retry
from tests.support import kit_workflows as flows

ROOT = pathlib.Path(__file__).resolve().parents[2]
ORDERS = ROOT / "examples" / "orders"
APPROVALS = ROOT / "examples" / "approvals"
ORDER = {
    "orderId": "A-1001",
    "customer": "ada@example.com",
    "paymentMethod": "pm_card_ok",
    "items": [{"sku": "TEA-01", "qty": 2, "unitPrice": 1250}],
}
START = testing.DEFAULT_START


def at(seconds: float) -> str:
    return (START + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_the_tour_order_waits_for_shipment_then_completes_with_an_http_shaped_history():
    inst = testing.start(ORDERS, params=ORDER, id="A-1001", auto=False)
    assert inst.status == "waiting" and inst.next_timer == ("timeout", START + dt.timedelta(days=7))
    inst.send_event("shipped", {"carrier": "DHL", "trackingNumber": "00340434161094042557"})
    assert inst.status == "complete"
    assert inst.output["trackingNumber"] == "00340434161094042557" and inst.output["amount"] == 2500
    history = inst.history
    assert [e["eventId"] for e in history] == list(range(1, len(history) + 1))
    assert all(set(e) == {"eventId", "eventTimestamp", "eventType", "attributes"} for e in history)
    assert history[0]["attributes"] == {"instanceId": "A-1001", "params": ORDER}
    completed = [e["attributes"] for e in history if e["eventType"] == "StepCompleted"]
    assert [c["name"] for c in completed] == ["verify order", "charge card", "wait for shipment", "record completion"]
    assert completed[1]["result"]["chargeId"].startswith("ch_")  # joined in, as the HTTP history does
    # Two contexts: the wait ended the first; the event started the second, which replayed three steps.
    assert inst.event_types.count("ContextStarted") == 2 == inst.contexts


def test_a_declined_card_retries_with_the_policy_delays_in_fresh_contexts_then_fails_the_step():
    inst = testing.start(ORDERS, params={**ORDER, "paymentMethod": "pm_card_declined"})
    assert inst.status == "complete" and inst.output["status"] == "payment_failed"
    failed = [e for e in inst.history if e["eventType"] == "StepAttemptFailed"]
    assert [e["attributes"]["retryAt"] for e in failed[:-1]] == [at(2), at(6), at(14), at(30)]  # 2, 4, 8, 16 s
    assert failed[0]["attributes"]["error"]["type"] == "PaymentError"
    assert inst.contexts == 5 and inst.now == START + dt.timedelta(seconds=30)
    assert "step failed after 5 attempts: PaymentError: card declined" in inst.output["reason"]


def test_an_order_not_shipped_within_seven_days_is_refunded_at_once_in_virtual_time():
    began = time.perf_counter()
    inst = testing.start(ORDERS, params=ORDER)
    assert inst.output["status"] == "refunded" and "WaitTimedOut" in inst.event_types
    assert inst.now == START + dt.timedelta(days=7)
    assert time.perf_counter() - began < 1.0


def test_injected_failures_fail_the_first_attempts_without_running_the_effect():
    inst = testing.start(ORDERS, params=ORDER, auto=False, fail={"charge card": 2})
    inst.run(until_waiting=True)
    assert inst.status == "waiting" and inst.now == START + dt.timedelta(seconds=6)
    attempts = [e["attributes"] for e in inst.history if e["eventType"] == "StepAttemptStarted" and e["attributes"]["name"] == "charge card"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert inst.step("charge card").state == "succeeded" and inst.step("charge card").attempts == 3


def test_approvals_with_a_three_day_reminder_expires_after_its_reminders_in_well_under_a_second():
    began = time.perf_counter()
    inst = testing.start(APPROVALS, params={"requestId": "CR-7", "title": "t", "approvers": ["grace"]},
                         env={"REMIND_AFTER_SECONDS": 3 * 86400})
    elapsed = time.perf_counter() - began
    assert inst.output == {"requestId": "CR-7", "status": "expired", "reminders": 3}
    assert inst.now == START + dt.timedelta(days=12)  # four waits of three days
    assert inst.event_types.count("WaitTimedOut") == 4 and inst.contexts == 5
    assert elapsed < 1.0, elapsed


def test_approvals_decided_after_the_first_reminder_holds_then_applies_under_explicit_time():
    inst = testing.start(APPROVALS, params={"requestId": "CR-8", "title": "t", "holdSeconds": 3600},
                         env={"REMIND_AFTER_SECONDS": 3 * 86400}, auto=False)
    assert inst.status == "waiting"
    inst.advance(3 * 86400 - 1)
    assert inst.status == "waiting" and inst.step("reminder #1") is None
    inst.advance(1)
    assert inst.step("reminder #1").state == "succeeded" and inst.status == "waiting"
    inst.send_event("decision", {"approved": True, "by": "grace"})
    assert inst.status == "sleeping" and inst.next_timer[0] == "wake"
    inst.advance(3600)
    assert inst.output == {"requestId": "CR-8", "status": "applied", "by": "grace", "reminders": 1}
    assert inst.now == START + dt.timedelta(days=3, seconds=3600)


def test_every_context_imports_the_module_fresh():
    inst = testing.start(flows.Counter)
    seen = inst.output["seen"]
    assert [s["imports"] for s in seen] == [1, 1, 1]
    assert len({s["id"] for s in seen}) == 3  # a new class object (a new module) in each context
    assert inst.contexts == 4 and flows.IMPORTS == 1  # the test's own module is untouched


def test_no_line_runs_after_a_suspension_not_even_finally(tmp_path):
    mark = tmp_path / "mark"
    inst = testing.start(flows.NoFinally, env={"MARK_FILE": str(mark)}, auto=False)
    assert inst.status == "sleeping"
    time.sleep(0.05)
    assert not mark.exists()  # the first context's child is parked for good
    inst.run()
    assert inst.output == {"woke": True}
    assert mark.read_text() == "finally ran\n"  # once: in the second context, as run returned


def test_retry_delays_are_the_host_policy_and_now_moves_with_them():
    policy = retry.parse_retry_policy({"maxAttempts": 4, "backoff": "exponential", "initialDelaySeconds": 10, "maxDelaySeconds": 25})
    inst = testing.start(flows.Flaky, fail={"call": 3})
    delays = [retry.delay_after_attempt(policy, attempt=k) for k in (1, 2, 3)]
    assert delays == [10, 20, 25]
    failed = [e["attributes"]["retryAt"] for e in inst.history if e["eventType"] == "StepAttemptFailed"]
    assert failed == [at(10), at(30), at(55)]
    assert inst.output == {"value": {"ok": True}} and inst.now == START + dt.timedelta(seconds=55)
    exhausted = testing.start(flows.Flaky, fail={"call": 4})
    assert exhausted.output["failed"].startswith("step failed after 4 attempts: InjectedFailure")


@pytest.mark.parametrize("how", ["inside", "failed"])
def test_step_definition_mismatch_ends_the_instance(how):
    inst = testing.start(flows.Mismatch, env={"HOW": how})
    assert inst.status == "errored" and inst.error["reason"] == "step_definition_mismatch", inst.error
    assert inst.history[-1]["eventType"] == "InstanceErrored"


def test_document_limits_are_the_hosts():
    tuple_result = testing.start(flows.BadDocuments, env={"WHAT": "tuple"})
    failure = next(e["attributes"]["error"] for e in tuple_result.history if e["eventType"] == "StepAttemptFailed")
    assert failure["type"] == "InvalidDocument" and tuple_result.error["reason"] == "step_failed"
    big = testing.start(flows.BadDocuments, env={"WHAT": "big"})
    failure = next(e["attributes"]["error"] for e in big.history if e["eventType"] == "StepAttemptFailed")
    assert failure["type"] == "DocumentTooLarge"
    output = testing.start(flows.BadDocuments, env={"WHAT": "output"})
    assert output.error["reason"] == "run_threw" and "not a document" in output.error["message"]
    with pytest.raises(errors.InvalidParams):
        testing.start(flows.Waiter, params={"when": dt.datetime.now()})


def test_only_a_step_failed_the_host_raised_ends_the_instance_step_failed():
    genuine = testing.start(flows.OwnStepFailed, env={"GENUINE": True})
    assert genuine.error["reason"] == "step_failed"
    made_up = testing.start(flows.OwnStepFailed, env={"GENUINE": False})
    assert made_up.error == {"reason": "run_threw", "message": "StepFailed: made up"}


def test_events_are_consumed_by_a_waiting_wait_or_queued_for_a_later_one():
    inst = testing.start(flows.Waiter, auto=False)
    assert inst.status == "waiting"
    inst.send_event("other")  # no wait for it: queued
    inst.send_event("go", {"n": 1})
    assert inst.event_types[3:9] == ["ContextSuspended", "EventAccepted", "EventAccepted", "EventConsumed", "StepCompleted", "ContextStarted"]
    assert inst.status == "sleeping" and inst.step("go").result == {"n": 1}
    inst.run()
    assert inst.output == {"got": {"n": 1}}
    with pytest.raises(errors.InstanceTerminal):
        inst.send_event("go")


def test_a_wait_times_out_at_its_deadline():
    inst = testing.start(flows.Waiter, auto=False)
    inst.advance(3599)
    assert inst.status == "waiting"
    inst.advance(1)
    assert inst.output == {"late": "no 'go' event arrived within 3600 s"}


def test_async_run_and_terminate():
    inst = testing.start(flows.AsyncFlow, params={"p": 1})
    assert inst.output == {"b": 2, "params": {"p": 1}}
    paused = testing.start(flows.AsyncFlow, auto=False)
    assert paused.status == "sleeping"
    paused.terminate()
    assert paused.status == "terminated" and paused.next_timer is None


def test_binding_calls_are_answered_by_the_given_handlers():
    calls = []

    def others(call, args):
        calls.append((call, args))
        if call == "status":
            return {"status": "queued"}
        return {"id": args["id"]}

    inst = testing.start(flows.Caller, bindings={"OTHERS": others})
    assert inst.output == {"child": "c-1", "status": {"status": "queued"}}
    assert calls[0] == ("create", {"id": "c-1", "params": {"x": 1}})


def test_code_that_never_asks_for_a_step_times_out():
    with pytest.raises(TimeoutError):
        testing.start(flows.Slow, env={"SECONDS": 1.0}, timeout=0.2)


def test_the_docs_example_runs_as_written(monkeypatch):
    """docs/testing.md's first example, executed from the repository root as a user would."""
    import re

    text = (ROOT / "docs" / "testing.md").read_text()
    example = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)  # noqa: S102
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()


def test_the_readme_example_runs_as_written(monkeypatch):
    """README "Testing a workflow", executed from the repository root."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Testing a workflow") : text.index("### Writing a cron handler")]
    example = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102
    namespace["test_an_unshipped_order_is_refunded_after_seven_days"]()


def test_the_approvals_readme_test_kit_example_runs_as_written(monkeypatch):
    """examples/approvals/README.md shows reminders through the test kit instead of asking the
    user to edit the takohost.toml the tests pin: its snippet, run as written from the repo root."""
    import re

    text = (APPROVALS / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(snippet, "examples/approvals/README.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
