"""Pure step decisions (takohost/domain/decide.py): docs/spec/durable-workflow.md#dw-replay "Class ABI、replay、step", no I/O."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from takohost.domain import decide, history, retry
from workers.engine import context

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
LIFE = NOW + dt.timedelta(days=365)
POLICY = retry.parse_retry_policy({"maxAttempts": 3, "initialDelaySeconds": 60})


def _decide(request, record=None, *, known=0, now=NOW, life=LIFE):
    return decide.decide(request, record, now=now, known_steps=known, lifetime_ends_at=life)


def do(name="a", policy=POLICY, args_error=None):
    return decide.Request(kind="do", name=name, policy=None if args_error else policy, args_error=args_error)


def test_completed_success_replays_result_without_looking_at_arguments():
    record = decide.StepRecord(name="a", kind="do", state="succeeded", attempts=1, result={"n": 1})
    assert _decide(do(args_error="TypeError: bad policy"), record) == decide.Resolve({"n": 1})
    assert _decide(do(), record) == decide.Resolve({"n": 1})


def test_completed_failure_replays_step_failed_and_wait_timeout():
    failed_do = decide.StepRecord(name="a", kind="do", state="failed", error={"message": "boom"})
    assert _decide(do(args_error="x"), failed_do) == decide.Raise("step_failed", "boom")
    failed_wait = decide.StepRecord(name="w", kind="wait", state="failed", error={"message": "late"})
    request = decide.Request(kind="wait", name="w", event_type="t", timeout_seconds=5)
    assert _decide(request, failed_wait) == decide.Raise("wait_timeout", "late")


def test_completed_name_of_another_kind_replays_success_but_not_failure():
    done = decide.StepRecord(name="a", kind="do", state="succeeded", result={"x": 1})
    assert _decide(decide.Request(kind="sleep", name="a", seconds=5), done) == decide.Resolve(None)
    failed = decide.StepRecord(name="a", kind="do", state="failed", error={"message": "m"})
    outcome = _decide(decide.Request(kind="wait", name="a", event_type="t", timeout_seconds=1), failed)
    assert isinstance(outcome, decide.EndInstance) and outcome.reason == "step_definition_mismatch"


def test_pending_name_reused_for_another_kind_is_a_mismatch():
    pending = decide.StepRecord(
        name="a", kind="do", state="pending", attempts=1, config={"policy": POLICY.to_json()}
    )
    outcome = _decide(decide.Request(kind="sleep", name="a", seconds=10), pending)
    assert isinstance(outcome, decide.EndInstance) and outcome.reason == "step_definition_mismatch"


def test_bad_arguments_of_uncompleted_names_are_rejected_without_recording():
    assert _decide(do(args_error="TypeError: maxAttempts")) == decide.RejectArgs()
    pending = decide.StepRecord(
        name="a", kind="do", state="pending", attempts=1, config={"policy": POLICY.to_json()}
    )
    assert _decide(do(args_error="TypeError"), pending) == decide.RejectArgs()


def test_the_1025th_distinct_name_exceeds_the_step_limit_but_known_names_replay():
    outcome = _decide(do(name="new"), known=1024)
    assert isinstance(outcome, decide.EndInstance) and outcome.reason == "step_limit_exceeded"
    assert isinstance(_decide(do(name="new"), known=1023), decide.RunEffect)
    done = decide.StepRecord(name="old", kind="do", state="succeeded", result=None)
    assert _decide(do(name="old"), done, known=1024) == decide.Resolve(None)


def test_lifetime_end_stops_everything():
    outcome = _decide(do(), now=LIFE)
    assert isinstance(outcome, decide.EndInstance) and outcome.reason == "lifetime_exceeded"


def test_do_runs_attempts_with_the_first_stored_policy():
    first = _decide(do())
    assert first == decide.RunEffect(attempt=1, policy=POLICY, new=True)
    stored = decide.StepRecord(
        name="a",
        kind="do",
        state="pending",
        attempts=1,
        config={"policy": POLICY.to_json()},
        wake_at=NOW - dt.timedelta(seconds=1),
    )
    other = retry.parse_retry_policy({"maxAttempts": 1})
    assert _decide(do(policy=other), stored) == decide.RunEffect(attempt=2, policy=POLICY, new=False)  # WF-15


def test_do_before_the_retry_delay_ran_out_suspends_again():
    wake = NOW + dt.timedelta(seconds=30)
    stored = decide.StepRecord(
        name="a", kind="do", state="pending", attempts=1, config={"policy": POLICY.to_json()}, wake_at=wake
    )
    assert _decide(do(), stored) == decide.Suspend("retry", wake, wake, new=False)


def test_sleep_zero_completes_in_place_and_other_sleeps_fix_their_deadline_once():
    assert _decide(decide.Request(kind="sleep", name="s", seconds=0)) == decide.CompleteSleep(
        wake_at=NOW, new=True
    )
    suspend = _decide(decide.Request(kind="sleep", name="s", seconds=3600))
    assert suspend == decide.Suspend(
        "sleep", NOW + dt.timedelta(hours=1), NOW + dt.timedelta(hours=1), new=True
    )
    fixed = NOW + dt.timedelta(seconds=10)
    pending = decide.StepRecord(name="s", kind="sleep", state="pending", wake_at=fixed)
    # a later context asking for another duration keeps the first deadline
    assert _decide(decide.Request(kind="sleep", name="s", seconds=99999), pending).due == fixed
    assert _decide(
        decide.Request(kind="sleep", name="s", seconds=1), pending, now=fixed
    ) == decide.CompleteSleep(wake_at=fixed, new=False)


def test_a_deadline_past_the_lifetime_is_kept_but_its_timer_fires_at_the_lifetime_end():
    life = NOW + dt.timedelta(seconds=100)
    suspend = _decide(decide.Request(kind="sleep", name="s", seconds=31536000), life=life)
    assert suspend.due == NOW + dt.timedelta(seconds=31536000)
    assert suspend.timer_due == life


def test_wait_new_and_pending():
    request = decide.Request(kind="wait", name="w", event_type="t", timeout_seconds=60)
    assert _decide(request) == decide.TryWait("t", 60, NOW + dt.timedelta(seconds=60), new=True)
    stored = decide.StepRecord(
        name="w",
        kind="wait",
        state="pending",
        config={"type": "u", "timeoutSeconds": 5},
        timeout_at=NOW + dt.timedelta(seconds=5),
    )
    assert _decide(request, stored) == decide.TryWait("u", 5, NOW + dt.timedelta(seconds=5), new=False)


def _delays(policy_json):
    policy = retry.parse_retry_policy(policy_json)
    delays = []
    attempt = 1
    while True:
        outcome = decide.decide_outcome(
            attempt=attempt, policy=policy, ok=False, error={"type": "E", "message": "m"}, now=NOW
        )
        if isinstance(outcome, decide.AttemptFailedFinal):
            return delays, attempt, outcome
        assert outcome.retry_at == NOW + dt.timedelta(seconds=outcome.delay)
        delays.append(outcome.delay)
        attempt += 1


def test_WF_06_retry_delays_constant_capped_and_exponential_default_cap():
    delays, attempts, final = _delays({"maxAttempts": 4, "initialDelaySeconds": 100, "maxDelaySeconds": 30})
    assert (delays, attempts) == ([30, 30, 30], 4)
    delays, attempts, _ = _delays({"maxAttempts": 5, "initialDelaySeconds": 20000, "backoff": "exponential"})
    assert (delays, attempts) == ([20000, 40000, 43200, 43200], 5)
    assert "after 4 attempts" in final.message


def test_WF_05_exponential_delays_double_from_the_initial_delay():
    delays, attempts, _ = _delays({"maxAttempts": 3, "initialDelaySeconds": 10, "backoff": "exponential"})
    assert (delays, attempts) == ([10, 20], 3)


def test_default_policy_has_one_attempt_and_success_is_success():
    _, attempts, _ = _delays(None)
    assert attempts == 1
    assert decide.decide_outcome(
        attempt=1, policy=POLICY, ok=True, result={"r": 1}, now=NOW
    ) == decide.AttemptSucceeded({"r": 1})


def test_pick_version_follows_the_weights():
    spec = {
        "versions": [
            {"version": {"resourceUid": "a"}, "weight": 90},
            {"version": {"resourceUid": "b"}, "weight": 10},
        ]
    }
    rng = random.Random(7)
    picks = [context.pick_version(spec, rng=rng) for _ in range(2000)]
    assert 0.85 < picks.count("a") / len(picks) < 0.95
    assert context.pick_version(None) is None
    assert context.pick_version({"versions": []}) is None


def test_history_events_are_the_contract_types_only():
    assert history.wait_started("w", "t", NOW).attributes == {
        "name": "w",
        "type": "t",
        "timeoutAt": "2026-11-30T12:00:00.000Z",
    }
    with pytest.raises(ValueError):
        history.Event("NotAnEvent", {})
