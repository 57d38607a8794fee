"""The console's timeline (``host_api.ui.timeline``): history events → drawn segments. Pure."""

from __future__ import annotations

import datetime as dt

from host_api.ui import timeline

T0 = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


def ev(n: int, seconds: float, event_type: str, **attrs) -> dict:
    stamp = (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"eventId": n, "eventTimestamp": stamp, "eventType": event_type, "attributes": attrs}


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


RETRY_SLEEP_WAIT = [
    ev(1, 0, "InstanceCreated", instanceId="x"),
    ev(2, 1, "ContextStarted", epoch=1, versionUid="v"),
    ev(3, 1, "StepAttemptStarted", name="charge", attempt=1),
    ev(4, 2, "StepAttemptFailed", name="charge", attempt=1, error={"type": "RuntimeError", "message": "no"},
       retryAt=at(4)),
    ev(5, 2, "ContextSuspended", status="running", reason="retry", until=at(4)),
    ev(6, 4, "ContextStarted", epoch=2, versionUid="v"),
    ev(7, 4, "StepAttemptStarted", name="charge", attempt=2),
    ev(8, 5, "StepCompleted", name="charge", kind="do", attempt=2),
    ev(9, 5, "SleepScheduled", name="nap", wakeAt=at(15)),
    ev(10, 5, "ContextSuspended", status="sleeping", reason="sleep", until=at(15)),
    ev(11, 15, "ContextStarted", epoch=3, versionUid="v"),
    ev(12, 15, "SleepCompleted", name="nap"),
    ev(13, 15, "StepCompleted", name="nap", kind="sleep"),
    ev(14, 15, "WaitStarted", name="ship", type="shipped", timeoutAt=at(3615)),
    ev(15, 15, "ContextSuspended", status="waiting", reason="wait"),
]


def test_attempts_retry_delay_sleep_and_an_open_wait():
    chart = timeline.build(RETRY_SLEEP_WAIT, now=T0 + dt.timedelta(seconds=20), terminal=False)
    lanes = {lane.name: lane for lane in chart.lanes}
    assert list(lanes) == ["worker code", "charge", "nap", "ship"]
    charge = [(s.kind, s.outcome, s.seconds) for s in lanes["charge"].segments]
    assert charge == [("attempt", "failed", 1.0), ("retry", "ok", 2.0), ("attempt", "ok", 1.0)]
    assert "RuntimeError: no" in lanes["charge"].segments[0].label
    assert [(s.kind, s.outcome, s.seconds) for s in lanes["nap"].segments] == [("sleep", "ok", 10.0)]
    wait = lanes["ship"].segments
    # Waited 5 s so far; the hour to its deadline follows as planned.
    assert [(s.kind, s.outcome, s.seconds) for s in wait] == [("wait", "open", 5.0), ("wait", "planned", 3595.0)]
    assert "'shipped'" in wait[0].label and "times out at" in wait[1].label
    contexts = [(s.outcome, s.seconds) for s in lanes["worker code"].segments]
    assert contexts == [("suspended", 1.0), ("suspended", 1.0), ("suspended", 0.0)]
    # The axis runs past now, the future taking FUTURE_SHARE (80 %) of it: 20 s past, 80 s ahead.
    assert chart.seconds == 100.0 and chart.now_pct == 20.0


def test_layout_keeps_every_bar_visible_and_inside_the_axis():
    chart = timeline.build(RETRY_SLEEP_WAIT, now=T0 + dt.timedelta(seconds=20), terminal=False)
    for lane in chart.lanes:
        for seg in lane.segments:
            assert seg.w_pct >= timeline.MIN_WIDTH_PCT
            assert 0 <= seg.x_pct and seg.x_pct + seg.w_pct <= 100.0001
    nap = next(lane for lane in chart.lanes if lane.name == "nap").segments[0]
    assert (nap.x_pct, nap.w_pct) == (5.0, 10.0)
    assert [text for _, text in chart.ticks] == ["+0 s", "+25 s", "+50 s", "+1 min 15 s", "+1 min 40 s"]
    # The planned wait runs past the axis's end: cut at the edge.
    planned = next(lane for lane in chart.lanes if lane.name == "ship").segments[-1]
    assert (planned.x_pct, planned.w_pct) == (20.0, 80.0)


def test_a_pending_retry_is_open_until_now_and_a_terminal_instance_closes_everything():
    events = RETRY_SLEEP_WAIT[:5]
    chart = timeline.build(events, now=T0 + dt.timedelta(seconds=3), terminal=False)
    charge = next(lane for lane in chart.lanes if lane.name == "charge").segments
    assert [(s.kind, s.outcome, s.seconds) for s in charge[-2:]] == [("retry", "open", 1.0), ("retry", "planned", 1.0)]
    assert "next attempt at" in charge[-2].label and "(in 1 s)" in charge[-1].label
    assert chart.seconds == 4.0  # through to the next attempt, all of it within the horizon
    ended = [*RETRY_SLEEP_WAIT, ev(16, 30, "InstanceTerminated")]
    chart = timeline.build(ended, now=T0 + dt.timedelta(seconds=99), terminal=True)
    assert chart.seconds == 30.0  # the axis ends at the last event, not now
    assert all(s.outcome != "open" for lane in chart.lanes for s in lane.segments)


def test_timeout_and_failed_step_and_an_empty_history():
    events = [
        ev(1, 0, "InstanceCreated"),
        ev(2, 0, "ContextStarted", epoch=1),
        ev(3, 0, "WaitStarted", name="w", type="t", timeoutAt=at(5)),
        ev(4, 5, "WaitTimedOut", name="w"),
        ev(5, 5, "StepAttemptStarted", name="d", attempt=1),
        ev(6, 6, "StepAttemptFailed", name="d", attempt=1, error={"type": "E", "message": "m"}),
        ev(7, 6, "StepFailed", name="d", attempts=1, message="m"),
        ev(8, 6, "InstanceErrored", reason="step_failed"),
    ]
    chart = timeline.build(events, now=T0 + dt.timedelta(seconds=60), terminal=True)
    lanes = {lane.name: lane for lane in chart.lanes}
    assert [(s.kind, s.outcome) for s in lanes["w"].segments] == [("wait", "timeout")]
    assert [(s.kind, s.outcome) for s in lanes["d"].segments] == [("attempt", "failed")]
    assert [s.outcome for s in lanes["worker code"].segments] == ["failed"]
    empty = timeline.build([], now=T0, terminal=False)
    assert empty.lanes == [] and empty.seconds == 0.0


def test_duration_text():
    assert timeline.duration_text(0.0042) == "0.0042 s"
    assert timeline.duration_text(42) == "42 s"
    assert timeline.duration_text(185) == "3 min 5 s"
    assert timeline.duration_text(7800) == "2 h 10 min"
    assert timeline.duration_text(90000) == "1 d 1 h"


def test_where_is_it_sentences():
    from host_api.ui import where

    assert where.when_text("2026-12-01T12:00:00.5Z") == "2026-12-01 12:00:00.500 UTC"
    waiting = {"activity": "waiting", "step": {"name": "ship", "kind": "wait"}, "eventType": "shipped",
               "timeoutAt": "2026-12-01T13:00:00Z"}
    assert where.where_text(waiting) == (
        "waiting in “ship” for an event of type “shipped” until 2026-12-01 13:00:00.000 UTC"
    )
    retrying = {"activity": "retrying", "step": {"name": "charge", "kind": "do", "attempt": 2},
                "retryAt": "2026-12-01T12:00:04Z", "lastError": {"type": "RuntimeError", "message": "no"}}
    assert where.where_text(retrying) == (
        "retrying “charge” (attempt 2) at 2026-12-01 12:00:04.000 UTC; last error RuntimeError: no"
    )
    assert where.where_text({"activity": "queued", "message": "no Version to run"}) == "queued: no Version to run"
    assert where.where_text({"activity": "running"}) == "running worker code"
    assert where.where_text({"activity": "finished"}) is None and where.where_text({}) is None


def test_traceback_text_lays_out_the_tenants_frames():
    from host_api.ui import where

    error = {"type": "KeyError", "message": "'params'", "traceback": [
        {"module": "main", "file": "main.py", "line": 7, "function": "run", "source": "x = event['params']"},
        {"module": "util", "file": "pkg/util.py", "line": 3, "function": "f", "source": ""},
    ]}
    assert where.traceback_text(error) == (
        "Traceback (the Version's frames, innermost last):\n"
        '  File "main.py", line 7, in run\n'
        "    x = event['params']\n"
        '  File "pkg/util.py", line 3, in f\n'
        "KeyError: 'params'"
    )
    assert where.traceback_text({"type": "E", "message": "m"}) is None
    assert where.traceback_text({"traceback": []}) is None
    assert where.traceback_text({"traceback": "already text"}) == "already text"


def test_only_the_most_recent_step_lanes_are_drawn():
    events = [ev(1, 0, "InstanceCreated"), ev(2, 0, "ContextStarted", epoch=1)]
    for i in range(10):
        events += [ev(3 + 2 * i, i, "StepAttemptStarted", name=f"s{i}", attempt=1),
                   ev(4 + 2 * i, i + 0.5, "StepCompleted", name=f"s{i}", kind="do", attempt=1)]
    chart = timeline.build(events, now=T0 + dt.timedelta(seconds=20), terminal=False)
    assert timeline.keep_recent_lanes(chart, 3) == 7
    assert [lane.name for lane in chart.lanes] == ["worker code", "s7", "s8", "s9"]
    assert timeline.keep_recent_lanes(chart, 3) == 0


def test_a_failed_attempt_is_drawn_wider_than_any_instant():
    events = [*RETRY_SLEEP_WAIT[:3], ev(4, 1.001, "StepAttemptFailed", name="charge", attempt=1,
                                        error={"type": "E", "message": "m"})]
    chart = timeline.build(events, now=T0 + dt.timedelta(days=2), terminal=False)
    failed = [s for lane in chart.lanes for s in lane.segments if s.outcome == "failed"]
    assert failed and all(s.w_pct >= timeline.MIN_FAILED_PCT for s in failed)


def test_the_attempt_in_flight_is_drawn_open_in_its_lane():
    chart = timeline.build(RETRY_SLEEP_WAIT[:2], now=T0 + dt.timedelta(seconds=10), terminal=False)
    timeline.add_in_flight(chart, name="charge", attempt=1, since=T0 + dt.timedelta(seconds=2),
                           now=T0 + dt.timedelta(seconds=12))
    lane = next(lane for lane in chart.lanes if lane.name == "charge")
    (seg,) = lane.segments
    assert (seg.kind, seg.outcome, seg.label) == ("attempt", "open", "attempt 1 running (10 s so far)")
    assert chart.end == T0 + dt.timedelta(seconds=12) and seg.x_pct + seg.w_pct == 100


def test_relative_times():
    from host_api.ui import where

    assert where.relative_text(T0, now=T0 + dt.timedelta(seconds=2)) == "just now"
    assert where.relative_text(T0, now=T0 + dt.timedelta(seconds=42)) == "42 s ago"
    assert where.relative_text(T0, now=T0 + dt.timedelta(minutes=3, seconds=59)) == "3 min ago"
    assert where.relative_text(T0 + dt.timedelta(hours=2, minutes=1), now=T0) == "in 2 h"
    assert where.relative_text(T0, now=T0 + dt.timedelta(days=5)) == "5 d ago"


def test_the_axis_is_drawn_through_to_the_wake_time_and_marks_now():
    # A sleep of 10 s, 3 s in: the chart ends at the wake time, not at now (issue found: the
    # timeline stopped at "now" and never showed when the instance wakes).
    events = RETRY_SLEEP_WAIT[:10]
    chart = timeline.build(events, now=T0 + dt.timedelta(seconds=8), terminal=False)
    nap = next(lane for lane in chart.lanes if lane.name == "nap").segments
    assert [(s.outcome, s.seconds) for s in nap] == [("open", 3.0), ("planned", 7.0)]
    assert nap[1].end == T0 + dt.timedelta(seconds=15) and "wakes at" in nap[1].label
    assert chart.end == T0 + dt.timedelta(seconds=15)
    assert chart.now_pct == round(8 / 15 * 100, 3)
    assert nap[1].x_pct == chart.now_pct and nap[1].x_pct + nap[1].w_pct == 100.0
    # Past its wake time (the context not started yet): nothing planned, the axis ends at now.
    late = timeline.build(events, now=T0 + dt.timedelta(seconds=16), terminal=False)
    assert [s.outcome for s in late.lanes[-1].segments] == ["open"] and late.end == T0 + dt.timedelta(seconds=16)
    # An ended instance has no now and nothing planned.
    ended = timeline.build([*events, ev(11, 9, "InstanceTerminated")], now=T0 + dt.timedelta(seconds=20), terminal=True)
    assert ended.now_pct is None and all(s.outcome != "planned" for lane in ended.lanes for s in lane.segments)


def test_every_failed_attempt_is_listed_with_what_followed():
    from host_api.ui import where

    frames = [{"file": "main.py", "line": 7, "function": "charge", "source": "raise RuntimeError('no')"}]
    events = [
        *RETRY_SLEEP_WAIT[:4],
        ev(16, 20, "StepAttemptStarted", name="ship", attempt=1),
        ev(17, 21, "StepAttemptFailed", name="ship", attempt=1,
           error={"type": "OSError", "message": "<gone>", "traceback": frames}),
        ev(18, 21, "StepFailed", name="ship", attempts=1, message="step failed after 1 attempt: OSError: <gone>"),
        ev(19, 22, "StepAttemptFailed", name="odd", attempt=2, error="not a dict"),
    ]
    found = where.attempt_errors(events)
    assert [(e["name"], e["attempt"], e["type"], e["message"], e["final"]) for e in found] == [
        ("charge", 1, "RuntimeError", "no", False), ("ship", 1, "OSError", "<gone>", True),
        ("odd", 2, "Error", "", False)]
    assert found[0]["retryAt"] == at(4) and found[0]["at"] == RETRY_SLEEP_WAIT[3]["eventTimestamp"]
    assert found[0]["traceback"] is None and found[1]["traceback"].endswith("OSError: <gone>")
    assert where.attempt_errors(RETRY_SLEEP_WAIT[4:]) == []
