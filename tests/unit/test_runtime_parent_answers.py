"""takohost.runtime.parent.recorded_answer: the one place the engine and the test kit turn a
decision answered from the record into its frame (PROTOCOL.md: resolve, raise, reject_args)."""

from __future__ import annotations

import datetime as dt

from takohost.domain import decide
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
