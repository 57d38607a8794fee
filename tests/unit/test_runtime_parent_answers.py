"""takohost.runtime.parent.recorded_answer and settled_answer: the one place the engine, the test
kit and a Version's replay check turn a decision into its frame (PROTOCOL.md: resolve, raise, reject_args)."""

from __future__ import annotations

import datetime as dt

from takohost.domain import decide, retry
from takohost.runtime import parent


def test_a_completed_a_failed_and_a_rejected_step_are_answered_from_the_record():
    assert parent.recorded_answer(decide.Resolve(result={"n": 1})) == {"op": "resolve", "result": {"n": 1}}
    assert parent.recorded_answer(decide.Resolve(result=None)) == {"op": "resolve", "result": None}
    assert parent.recorded_answer(decide.Raise(error="step_failed", message="boom")) == {
        "op": "raise",
        "error": "step_failed",
        "message": "boom",
    }
    assert parent.recorded_answer(decide.RejectArgs()) == {"op": "reject_args"}


def test_decisions_that_need_the_caller_to_act_have_no_recorded_answer():
    wake = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
    assert parent.recorded_answer(decide.CompleteSleep(wake_at=wake, new=True)) is None


def test_the_answer_after_a_settling_attempt_is_what_a_later_context_replays():
    """parent.settled_answer (the engine's and the test kit's answer once an attempt settled the
    step) is the frame its record answers with in every later context."""
    now = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
    policy = retry.parse_retry_policy({"maxAttempts": 1})
    run = decide.RunEffect(attempt=1, policy=policy, new=True)
    request = decide.Request(kind="do", name="a", policy=policy)
    for outcome in (
        decide.AttemptSucceeded(result={"n": 1}),
        decide.AttemptSucceeded(result=None),
        decide.AttemptFailedFinal(error={"type": "E", "message": "boom"}, message="boom"),
    ):
        record = parent.record_after_attempt("a", decision=run, outcome=outcome)
        replayed = decide.decide(request, record, now=now, known_steps=1, lifetime_ends_at=now + dt.timedelta(days=1))
        assert parent.settled_answer(outcome) == parent.recorded_answer(replayed)
    assert parent.settled_answer(decide.AttemptSucceeded(result={"n": 1})) == {"op": "resolve", "result": {"n": 1}}
    assert parent.settled_answer(decide.AttemptFailedFinal(error={}, message="boom")) == {
        "op": "raise",
        "error": "step_failed",
        "message": "boom",
    }
