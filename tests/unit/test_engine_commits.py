"""Commit plans (takohost/domain/commits.py): what each fenced commit records, without I/O."""

from __future__ import annotations

import datetime as dt

import pytest

from takohost.domain import commits, decide, retry

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
LIFE = NOW + dt.timedelta(days=365)
POLICY = retry.parse_retry_policy({"maxAttempts": 3, "initialDelaySeconds": 5})


def _types(commit):
    return [e.event_type for e in commit.events]


def test_a_successful_attempt_records_start_and_completion_in_one_commit():
    commit = commits.attempt(
        name="a",
        run=decide.RunEffect(attempt=1, policy=POLICY, new=True),
        started_at=NOW - dt.timedelta(seconds=1),
        outcome=decide.AttemptSucceeded({"v": 1}),
        lifetime_ends_at=LIFE,
    )
    assert _types(commit) == ["StepAttemptStarted", "StepCompleted"]
    assert commit.events[0].timestamp == NOW - dt.timedelta(seconds=1)  # the real start time
    assert commit.step.state == "succeeded" and commit.step.result == {"v": 1} and commit.new_steps == 1
    assert commit.status is None and not commit.touch and commit.timer is None
    # The step's policy as the decision parsed it, in the row and in the history (what replay checks).
    assert commit.step.config == {"policy": POLICY.to_json()} and commit.step.attempts == 1
    assert commit.events[0].attributes == {"name": "a", "attempt": 1, "policy": POLICY.to_json()}


def test_a_retry_keeps_the_step_pending_with_a_timer_unless_the_delay_is_zero():
    outcome = decide.decide_outcome(
        attempt=1, policy=POLICY, ok=False, error={"type": "E", "message": "m"}, now=NOW
    )
    commit = commits.attempt(
        name="a",
        run=decide.RunEffect(attempt=1, policy=POLICY, new=False),
        started_at=NOW,
        outcome=outcome,
        lifetime_ends_at=LIFE,
    )
    assert _types(commit) == ["StepAttemptStarted", "StepAttemptFailed", "ContextSuspended"]
    assert commit.step.state == "pending" and commit.step.wake_at == NOW + dt.timedelta(seconds=5)
    assert commit.timer == ("retry", NOW + dt.timedelta(seconds=5)) and commit.touch and commit.new_steps == 0
    zero = retry.parse_retry_policy({"maxAttempts": 2})
    outcome = decide.decide_outcome(attempt=1, policy=zero, ok=False, now=NOW)
    commit = commits.attempt(
        name="a",
        run=decide.RunEffect(attempt=1, policy=zero, new=True),
        started_at=NOW,
        outcome=outcome,
        lifetime_ends_at=LIFE,
    )
    assert commit.timer is None  # the context dispatches the fresh one itself


def test_the_last_failure_is_step_failed():
    outcome = decide.decide_outcome(
        attempt=3, policy=POLICY, ok=False, error={"type": "E", "message": "m"}, now=NOW
    )
    commit = commits.attempt(
        name="a",
        run=decide.RunEffect(attempt=3, policy=POLICY, new=False),
        started_at=NOW,
        outcome=outcome,
        lifetime_ends_at=LIFE,
    )
    assert _types(commit) == ["StepAttemptStarted", "StepAttemptFailed", "StepFailed"]
    assert commit.step.state == "failed" and "after 3 attempts" in commit.step.error["message"]


def test_suspensions_publish_their_status_with_a_timer():
    sleep = commits.suspend(suspend=decide.Suspend("sleep", NOW, LIFE, new=True), name="s", seconds=10)
    assert sleep.status == "sleeping" and sleep.timer == ("wake", LIFE) and sleep.step.state == "pending"
    assert _types(sleep) == ["SleepScheduled", "ContextSuspended"]
    wait = decide.TryWait("t", 60, NOW + dt.timedelta(seconds=60), new=True)
    waiting = commits.wait_suspend(name="w", wait=wait, arrived=False, lifetime_ends_at=LIFE)
    assert waiting.status == "waiting" and waiting.timer == ("timeout", wait.timeout_at)
    arrived = commits.wait_suspend(name="w", wait=wait, arrived=True, lifetime_ends_at=LIFE)
    assert arrived.status == "running" and arrived.timer is None  # an event came meanwhile: go on


def test_a_consumed_event_completes_the_wait_with_its_payload():
    wait = decide.TryWait("t", 60, NOW, new=False)
    commit = commits.wait_consumed(name="w", wait=wait, sequence=7, payload={"k": 1})
    assert _types(commit) == ["EventConsumed", "StepCompleted"]
    assert commit.events[0].attributes == {"name": "w", "sequence": 7, "type": "t"}
    assert commit.step.result == {"k": 1} and commit.step.config == {"type": "t", "timeoutSeconds": 60}


def test_a_direct_delivery_is_event_accepted_then_what_a_context_writes_for_the_started_wait():
    """send_event's direct delivery and the engine's consumption share their records: the same
    events and step row as ``wait_consumed`` of the already started wait, after ``EventAccepted``;
    the instance runs and only the wait's ``timeout`` timer goes."""
    wait = decide.StepRecord(
        name="w",
        kind="wait",
        state="pending",
        config={"type": "go", "timeoutSeconds": 60},
        timeout_at=NOW + dt.timedelta(seconds=60),
    )
    delivered = commits.event_delivered(wait=wait, sequence=3, event_type="go", payload={"p": 1})
    engine = commits.wait_consumed(name="w", wait=decide.pending_wait(wait), sequence=3, payload={"p": 1})
    assert delivered.events == [commits.event_queued(sequence=3, event_type="go").events[0], *engine.events]
    assert [(e.event_type, e.attributes) for e in delivered.events] == [
        ("EventAccepted", {"sequence": 3, "type": "go"}),
        ("EventConsumed", {"name": "w", "sequence": 3, "type": "go"}),
        ("StepCompleted", {"name": "w", "kind": "wait"}),
    ]
    assert delivered.step == engine.step and delivered.step.state == "succeeded" and delivered.step.result == {"p": 1}
    assert (delivered.status, delivered.touch, delivered.new_steps) == ("running", True, 0)
    assert (delivered.timer, delivered.cancel_timer) == (None, "timeout")
    with pytest.raises(ValueError, match="waits for 'go'"):
        commits.event_delivered(wait=wait, sequence=3, event_type="other", payload=None)


def test_connect_kwargs_keep_the_urls_query_parameters() -> None:
    """A unix-socket URL (``?host=/dir``, as a dev data dir's) reaches the socket, not 127.0.0.1."""
    from models import db as models_db

    assert models_db.connect_kwargs("postgresql+psycopg://takohost@/takohost?host=/srv/run&port=5433") == {
        "host": "/srv/run",
        "port": "5433",
        "user": "takohost",
        "dbname": "takohost",
    }
    assert models_db.connect_kwargs("postgresql+psycopg://u:p@db.example:6432/x?sslmode=require") == {
        "host": "db.example",
        "port": 6432,
        "user": "u",
        "password": "p",
        "dbname": "x",
        "sslmode": "require",
    }
