"""``core.progress``: where an instance is, decided from the store's facts (docs/spec/host-features.md#hf-observability)."""

from __future__ import annotations

import datetime as dt

from core import progress as p
from host_api import schemas

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
LATER = NOW + dt.timedelta(minutes=5)
EARLIER = NOW - dt.timedelta(minutes=5)
CONTEXT = p.ContextInfo(epoch=3, started_at=EARLIER, version_uid="v-1")


def answer(value: p.Progress) -> dict:
    """The ``progress`` answer of a decision, as the API dumps it."""
    return schemas.InstanceProgress().dump(value)


def decide(status: str, pending: p.PendingStep | None = None, *, context=CONTEXT, stopping=None, no_version=None):
    return answer(
        p.progress(status=status, stopping=stopping, pending=pending, context=context, no_version=no_version, now=NOW)
    )


def test_the_decision_is_a_value_of_datetimes_and_steps():
    step = p.PendingStep(name="charge card", kind="do", attempts=2, wake_at=LATER, error={"type": "KeyError"})
    decided = p.progress(status="running", stopping=None, pending=step, context=CONTEXT, no_version=None, now=NOW)
    assert decided == p.Progress(
        status="running",
        activity="retrying",
        step=p.StepView(name="charge card", kind="do", attempt=3),
        retry_at=LATER,
        last_error={"type": "KeyError", "message": ""},
        context=CONTEXT,
    )
    # the ended flag of the latest context is not part of the answer
    ended = p.ContextInfo(epoch=3, started_at=EARLIER, ended=True)
    assert decide("complete", context=ended) == {
        "status": "complete",
        "activity": "finished",
        "context": {"epoch": 3, "startedAt": "2026-12-01T11:55:00.000Z"},
    }


def test_queued_before_any_context_and_why():
    assert decide("queued", context=None) == {"status": "queued", "activity": "queued"}
    body = decide("queued", context=None, no_version="its Worker has no Deployment")
    assert body == {
        "status": "queued",
        "activity": "queued",
        "reason": "no_version",
        "message": "its Worker has no Deployment",
    }


def test_retry_delay_names_the_step_the_next_attempt_its_time_and_the_last_error():
    step = p.PendingStep(
        name="charge card", kind="do", attempts=2, wake_at=LATER, error={"type": "KeyError", "message": "'x'"}
    )
    assert decide("running", step) == {
        "status": "running",
        "activity": "retrying",
        "step": {"name": "charge card", "kind": "do", "attempt": 3},
        "retryAt": "2026-12-01T12:05:00.000Z",
        "lastError": {"type": "KeyError", "message": "'x'"},
        "context": {"epoch": 3, "startedAt": "2026-12-01T11:55:00.000Z", "versionUid": "v-1"},
    }


def test_a_due_retry_is_running_once_a_context_started_after_it():
    step = p.PendingStep(name="charge card", kind="do", attempts=1, wake_at=EARLIER - dt.timedelta(seconds=1))
    assert decide("running", step)["activity"] == "running"
    late_context = p.ContextInfo(epoch=2, started_at=EARLIER - dt.timedelta(minutes=1))
    assert decide("running", step, context=late_context)["activity"] == "starting"


def test_no_pending_step_is_running_unless_the_latest_context_stopped():
    assert decide("running")["activity"] == "running"
    assert decide("running", context=None)["activity"] == "starting"
    # an event completed the wait of a waiting instance: its context had stopped, the next is due
    stopped = p.ContextInfo(epoch=3, started_at=EARLIER, version_uid="v-1", ended=True)
    assert decide("running", context=stopped)["activity"] == "starting"


def test_sleep_shows_its_wake_time():
    step = p.PendingStep(name="cool off", kind="sleep", wake_at=LATER)
    body = decide("sleeping", step)
    assert body["activity"] == "sleeping" and body["wakeAt"] == "2026-12-01T12:05:00.000Z"
    assert body["step"] == {"name": "cool off", "kind": "sleep"}
    overdue = p.PendingStep(name="cool off", kind="sleep", wake_at=EARLIER)
    assert decide("running", overdue)["activity"] == "starting"


def test_wait_shows_the_event_type_and_its_timeout():
    step = p.PendingStep(
        name="approval", kind="wait", timeout_at=LATER, config={"type": "approved", "timeoutSeconds": 300}
    )
    body = decide("waiting", step)
    assert body["activity"] == "waiting"
    assert body["eventType"] == "approved" and body["timeoutAt"] == "2026-12-01T12:05:00.000Z"
    assert decide("running", step)["activity"] == "starting"  # the event arrived: a context is due


def test_running_without_a_pending_step_and_no_version_means_nothing_runs():
    assert decide("running")["activity"] == "running"
    assert decide("running", context=None)["activity"] == "starting"
    body = decide("running", no_version="Version v-2 lacks class 'W'")
    assert body["activity"] == "starting" and body["reason"] == "no_version"


def test_stopping_and_terminal():
    assert decide("waiting", stopping="terminate")["activity"] == "stopping"
    for status in p.TERMINAL:
        body = decide(status)
        assert body["activity"] == "finished" and "step" not in body and "reason" not in body


def test_every_activity_is_listed():
    seen = {
        decide("queued", context=None)["activity"],
        decide("running", context=None)["activity"],
        decide("running")["activity"],
        decide("running", p.PendingStep(name="a", kind="do", attempts=1, wake_at=LATER))["activity"],
        decide("sleeping", p.PendingStep(name="a", kind="sleep", wake_at=LATER))["activity"],
        decide("waiting", p.PendingStep(name="a", kind="wait", timeout_at=LATER))["activity"],
        decide("waiting", stopping="terminate")["activity"],
        decide("complete")["activity"],
    }
    assert seen == set(p.ACTIVITIES)


def test_the_cli_says_it_in_one_line():
    from host_cli import instances as cli

    step = p.PendingStep(name="charge", kind="do", attempts=1, wake_at=LATER, error={"type": "E", "message": "m"})
    assert cli.progress_detail(decide("running", step)) == (
        "retrying step 'charge' (attempt 2 at 2026-12-01T12:05:00.000Z; attempt 1 failed: E: m)"
    )
    nap = p.PendingStep(name="nap", kind="sleep", wake_at=LATER)
    assert cli.progress_detail(decide("sleeping", nap)) == "sleeping in step 'nap' until 2026-12-01T12:05:00.000Z"
    queued = cli.progress_detail(decide("queued", context=None, no_version="its Worker has no Deployment"))
    assert queued == "queued: no replay context has started yet; no Version to run it: its Worker has no Deployment"
    assert cli.progress_detail(decide("complete")) is None


def test_the_step_a_context_runs_now_as_its_heartbeat_published_it():
    running = p.RunningStep(name="charge", attempt=1, since=EARLIER, epoch=3)
    body = answer(p.progress(status="running", stopping=None, pending=None, context=CONTEXT, no_version=None,
                             now=NOW, running=running))
    assert body["activity"] == "running" and body["since"] == "2026-12-01T11:55:00.000Z"
    assert body["step"] == {"name": "charge", "kind": "do", "attempt": 1}
    stale = p.RunningStep(name="charge", attempt=1, since=EARLIER, epoch=2)  # an earlier context's
    assert "step" not in answer(p.progress(status="running", stopping=None, pending=None, context=CONTEXT,
                                           no_version=None, now=NOW, running=stale))
    waiting = p.PendingStep(name="approval", kind="wait", timeout_at=LATER, config={"type": "ok"})
    assert p.progress(status="waiting", stopping=None, pending=waiting, context=CONTEXT, no_version=None,
                      now=NOW, running=running).activity == "waiting"
    from host_cli import instances as cli

    assert cli.progress_detail(body) == "running step 'charge' attempt 1 since 2026-12-01T11:55:00.000Z"
