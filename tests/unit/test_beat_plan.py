"""The pure match planner of beat (``beat.cron_plan``): record vs skip, segments, skip capping.

docs/spec/cron-trigger.md#cr-match: matches that could not be recorded are skipped, never back-filled; an
update applies to future matches only (docs/spec/cron-trigger.md#cr-spec). docs/spec/cron-trigger.md#cr-runs:
recorded only while now − scheduledTime < 60 s.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat import cron_plan
from beat.cron_plan import Segment
from core import cron

U = dt.UTC


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def times(plan: cron_plan.Plan, *, record: bool) -> list[str]:
    return [cron.format_rfc3339(d.scheduled_time) for d in plan.decisions if d.record is record]


def test_CB_01_outage_skips_every_match_and_never_backfills() -> None:
    # 10:00 recorded by a beat that ticked last at 10:02:00.3; every process stopped; 10:23 restart.
    considered = at("2026-03-04T10:02:00.300Z")
    plan = cron_plan.plan(
        segments=[Segment("*/5 * * * *", None)],
        considered_until=considered,
        now=at("2026-03-04T10:23:00.400Z"),
        previous_tick=considered,
    )
    assert times(plan, record=True) == []
    assert times(plan, record=False) == [
        "2026-03-04T10:05:00Z",
        "2026-03-04T10:10:00Z",
        "2026-03-04T10:15:00Z",
        "2026-03-04T10:20:00Z",
    ]
    assert all("no beat was running" in d.reason for d in plan.decisions)
    assert plan.considered_until == at("2026-03-04T10:23:00.400Z")
    # No burst between 10:23 and 10:25: the next thing to decide is 10:25 (1772619900000 ms).
    assert plan.next_due_at == at("2026-03-04T10:25:00Z")
    assert plan.next_due_at.timestamp() * 1000 == 1772619900000
    after = cron_plan.plan(
        segments=[Segment("*/5 * * * *", None)],
        considered_until=plan.considered_until,
        now=at("2026-03-04T10:25:00.010Z"),
        previous_tick=at("2026-03-04T10:24:59Z"),
    )
    assert times(after, record=True) == ["2026-03-04T10:25:00Z"]
    assert times(after, record=False) == []


def test_grace_boundary_is_strictly_less_than_sixty_seconds() -> None:
    segments = [Segment("* * * * *", None)]
    base = at("2026-03-04T10:00:30Z")
    just_in = cron_plan.plan(
        segments=segments, considered_until=base, now=at("2026-03-04T10:01:59.999Z"), previous_tick=base
    )
    assert times(just_in, record=True) == ["2026-03-04T10:01:00Z"]
    exactly = cron_plan.plan(
        segments=segments, considered_until=base, now=at("2026-03-04T10:02:00Z"), previous_tick=base
    )
    assert times(exactly, record=False) == ["2026-03-04T10:01:00Z"]
    assert times(exactly, record=True) == ["2026-03-04T10:02:00Z"]


def test_late_recording_while_a_beat_was_running_says_recorded_too_late() -> None:
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=at("2026-03-04T09:59:59Z"),
        now=at("2026-03-04T10:01:15Z"),
        previous_tick=at("2026-03-04T10:01:14Z"),
    )
    assert times(plan, record=False) == ["2026-03-04T10:00:00Z"]
    assert plan.decisions[0].reason.startswith("recorded too late (75 s after scheduledTime")
    assert times(plan, record=True) == ["2026-03-04T10:01:00Z"]


def test_nothing_is_decided_at_or_before_considered_until() -> None:
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=at("2026-03-04T10:00:00Z"),
        now=at("2026-03-04T10:00:00Z"),
        previous_tick=None,
    )
    assert plan.decisions == ()
    assert plan.next_due_at == at("2026-03-04T10:01:00Z")
    behind = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=at("2026-03-04T10:05:00Z"),
        now=at("2026-03-04T10:03:00Z"),  # a beat whose clock is behind
        previous_tick=None,
    )
    assert behind.decisions == ()
    assert behind.considered_until == at("2026-03-04T10:05:00Z")


def test_CB_05_update_applies_to_future_matches_only() -> None:
    # '0 * * * *' updated to '30 * * * *' at 10:07:00; beat last considered at 10:06:59.
    segments = [Segment("0 * * * *", at("2026-03-04T10:07:00Z")), Segment("30 * * * *", None)]
    first = cron_plan.plan(
        segments=segments,
        considered_until=at("2026-03-04T10:06:59Z"),
        now=at("2026-03-04T10:07:00.500Z"),
        previous_tick=at("2026-03-04T10:06:59Z"),
    )
    assert first.decisions == ()  # never an immediate call at update time
    assert first.remaining == (Segment("30 * * * *", None),)
    assert first.next_due_at == at("2026-03-04T10:30:00Z")
    second = cron_plan.plan(
        segments=first.remaining,
        considered_until=first.considered_until,
        now=at("2026-03-04T11:00:00.5Z"),
        previous_tick=at("2026-03-04T10:59:59Z"),
    )
    assert [(cron.format_rfc3339(d.scheduled_time), d.cron, d.record) for d in second.decisions] == [
        ("2026-03-04T10:30:00Z", "30 * * * *", False),  # beat was asleep here: decided late, skipped
    ]
    third = cron_plan.plan(
        segments=first.remaining,
        considered_until=first.considered_until,
        now=at("2026-03-04T10:30:00.2Z"),
        previous_tick=at("2026-03-04T10:29:59Z"),
    )
    assert [(cron.format_rfc3339(d.scheduled_time), d.cron, d.record) for d in third.decisions] == [
        ("2026-03-04T10:30:00Z", "30 * * * *", True),
    ]
    assert third.next_due_at == at("2026-03-04T11:30:00Z")  # no 11:00 for the old expression


def test_old_expression_keeps_the_match_at_the_update_instant_and_nothing_after() -> None:
    # Updated at exactly 10:05:00 while beat lagged: the old expression owns 10:05, the new one
    # only later matches — never both for the same minute.
    segments = [Segment("*/5 * * * *", at("2026-03-04T10:05:00Z")), Segment("* * * * *", None)]
    plan = cron_plan.plan(
        segments=segments,
        considered_until=at("2026-03-04T10:04:59Z"),
        now=at("2026-03-04T10:06:00.1Z"),
        previous_tick=at("2026-03-04T10:04:59Z"),
    )
    assert [(cron.format_rfc3339(d.scheduled_time), d.cron) for d in plan.decisions] == [
        ("2026-03-04T10:05:00Z", "*/5 * * * *"),
        ("2026-03-04T10:06:00Z", "* * * * *"),
    ]


def test_delete_boundary_decides_up_to_it_and_then_nothing_ever() -> None:
    segments = [Segment("* * * * *", at("2026-03-04T10:03:30Z"))]
    plan = cron_plan.plan(
        segments=segments,
        considered_until=at("2026-03-04T10:01:30Z"),
        now=at("2026-03-04T10:03:40Z"),
        previous_tick=at("2026-03-04T10:03:39Z"),
    )
    assert times(plan, record=True) == ["2026-03-04T10:03:00Z"]
    assert times(plan, record=False) == ["2026-03-04T10:02:00Z"]  # 100 s late
    assert plan.remaining == ()
    assert plan.next_due_at is None


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 2,4,6 *"])
def test_never_firing_schedule_has_no_next_due(expression: str) -> None:
    plan = cron_plan.plan(
        segments=[Segment(expression, None)],
        considered_until=at("2026-03-04T10:00:00Z"),
        now=at("2026-03-04T10:00:01Z"),
        previous_tick=None,
    )
    assert plan.decisions == ()
    assert plan.next_due_at is None


def test_year_long_outage_writes_a_bounded_number_of_skip_rows() -> None:
    keep = cron_plan.SKIPS_KEPT_EACH_END
    start = at("2026-01-01T00:00:00.5Z")
    now = at("2027-01-01T00:00:30Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)], considered_until=start, now=now, previous_tick=start
    )
    skips = [d for d in plan.decisions if not d.record]
    assert len(skips) == 2 * keep + 1
    assert [d.summary for d in skips].count(True) == 1
    assert cron.format_rfc3339(skips[0].scheduled_time) == "2026-01-01T00:01:00Z"
    assert cron.format_rfc3339(skips[keep].scheduled_time) == "2026-01-01T00:51:00Z"  # first omitted
    assert "more than" in skips[keep].reason and "not listed one by one" in skips[keep].reason
    # The last listed skip is the last minute at least 60 s old; 00:00:00 is 30 s old: recorded.
    assert cron.format_rfc3339(skips[-1].scheduled_time) == "2026-12-31T23:59:00Z"
    assert times(plan, record=True) == ["2027-01-01T00:00:00Z"]
    times_listed = [d.scheduled_time for d in plan.decisions]
    assert times_listed == sorted(times_listed) and len(set(times_listed)) == len(times_listed)


def test_medium_gap_summary_counts_the_omitted_matches_exactly() -> None:
    keep = cron_plan.SKIPS_KEPT_EACH_END
    start = at("2026-01-01T00:00:00Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=start,
        now=at("2026-01-01T05:00:30Z"),
        previous_tick=start,
    )
    skips = [d for d in plan.decisions if not d.record]
    # 299 skipped minutes (00:01 … 04:59): 50 + 50 listed, 199 summarised.
    assert len(skips) == 2 * keep + 1
    summary = next(d for d in skips if d.summary)
    assert summary.reason.startswith(
        "199 matches from 2026-01-01T00:51:00Z through 2026-01-01T04:09:00Z were skipped (no beat was running)"
    )


EXPRESSIONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "7,13 */2 * * *",
    "0 0 31 2 *",
    "*/7 3-5 * * 1-5",
    "0 12 1 * 1",
    "59 23 * * *",
    "*/2,1-5/2 * * * *",
]
instants = st.datetimes(
    min_value=dt.datetime(2024, 1, 1), max_value=dt.datetime(2030, 12, 31), timezones=st.just(U)
)


@settings(max_examples=150, deadline=None)
@given(
    first=st.sampled_from(EXPRESSIONS),
    second=st.sampled_from(EXPRESSIONS),
    considered=instants,
    gap_s=st.integers(min_value=0, max_value=3 * 3600),
    switch_s=st.integers(min_value=0, max_value=3 * 3600),
    deleted=st.booleans(),
    delete_s=st.integers(min_value=0, max_value=4 * 3600),
)
def test_plan_matches_a_minute_by_minute_reference(
    first: str, second: str, considered: dt.datetime, gap_s: int, switch_s: int, deleted: bool, delete_s: int
) -> None:
    now = considered + dt.timedelta(seconds=gap_s)
    switch = considered + dt.timedelta(seconds=switch_s)
    end = max(switch, considered + dt.timedelta(seconds=delete_s)) if deleted else None
    segments = [Segment(first, switch), Segment(second, end)]
    plan = cron_plan.plan(segments=segments, considered_until=considered, now=now, previous_tick=None)

    # Reference: every whole minute in (considered, now], owned by the expression in force.
    expected: list[tuple[dt.datetime, str, bool]] = []
    minute = considered.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    while minute <= now:
        owner = first if minute <= switch else second
        alive = end is None or minute <= end
        if alive and cron.matches(cron.parse(owner), minute):
            expected.append((minute, owner, now - minute < dt.timedelta(seconds=60)))
        minute += dt.timedelta(minutes=1)
    skipped = [e for e in expected if not e[2]]
    got = [(d.scheduled_time, d.cron, d.record) for d in plan.decisions]
    if len(skipped) <= 2 * cron_plan.SKIPS_KEPT_EACH_END:
        assert got == expected
    else:
        keep = cron_plan.SKIPS_KEPT_EACH_END
        assert got[:keep] == skipped[:keep]
        assert got[keep + 1 : 2 * keep + 1] == skipped[-keep:]
        assert plan.decisions[keep].summary and plan.decisions[keep].scheduled_time == skipped[keep][0]
        assert got[2 * keep + 1 :] == [e for e in expected if e[2]]

    # The next thing to decide: the first owned match after now (None once deleted and past).
    later = None
    minute = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    for _ in range(3 * 24 * 60):
        owner = first if minute <= switch else second
        if end is not None and minute > end:
            break
        if cron.matches(cron.parse(owner), minute):
            later = minute
            break
        minute += dt.timedelta(minutes=1)
    if later is not None:
        assert plan.next_due_at == later
    elif end is not None and minute > end:
        assert plan.next_due_at is None
    else:
        assert plan.next_due_at is None or plan.next_due_at > minute


# --- why a match was skipped (docs/spec/host-features.md#hf-newcomer) ---------------------------------------------------


def _skip_reasons(plan: cron_plan.Plan) -> list[str]:
    return [d.reason for d in plan.decisions if not d.record]


def test_a_clock_jump_is_not_reported_as_no_beat_running() -> None:
    """Before: a forward jump of the wall clock between two ticks of a running beat was reported
    as "no beat was running"."""
    own = at("2026-03-04T10:00:00.5Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=own,
        now=at("2026-03-04T10:10:01.5Z"),  # one real second later, the wall clock says 10 min
        previous_tick=own,
        running_since=at("2026-03-04T09:00:00Z"),
        own_previous_tick=own,
        clock_jump=dt.timedelta(seconds=600),
    )
    reasons = _skip_reasons(plan)
    assert len(reasons) == 9  # 10:01 … 10:09; 10:10 is 1.5 s old: recorded
    assert all(r.startswith("the host clock jumped forward about 10 min 0 s between two beat ticks")
               for r in reasons), reasons[0]
    assert "in 1 s of real time" in reasons[0]
    assert not any("no beat was running" in r for r in reasons)


def test_a_late_beat_is_not_reported_as_no_beat_running() -> None:
    own = at("2026-03-04T10:00:00.5Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=own,
        now=at("2026-03-04T10:05:30Z"),  # the beat process stalled for five minutes
        previous_tick=own,
        running_since=at("2026-03-04T09:00:00Z"),
        own_previous_tick=own,
    )
    reasons = _skip_reasons(plan)
    assert len(reasons) == 4  # 10:01 … 10:04
    assert all(r.startswith("the beat was running but late: its tick after 2026-03-04T10:00:00Z")
               for r in reasons), reasons[0]


def test_no_beat_before_this_beat_started_then_late_in_one_summary() -> None:
    """A long gap partly before this beat's first tick and partly after it: the summary row says
    exactly which matches it stands for (span and expression) and both reasons."""
    keep = cron_plan.SKIPS_KEPT_EACH_END
    start = at("2026-01-01T00:00:00Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", None)],
        considered_until=start,
        now=at("2026-01-01T05:00:30Z"),
        previous_tick=start,  # another beat's last tick
        running_since=at("2026-01-01T03:00:00Z"),  # this one started at 03:00 and then stalled
        own_previous_tick=at("2026-01-01T03:00:00Z"),
    )
    skips = [d for d in plan.decisions if not d.record]
    assert "no beat was running" in skips[0].reason
    assert skips[-1].reason.startswith("the beat was running but late")
    summary = next(d for d in skips if d.summary)
    assert summary.reason == (
        "199 matches from 2026-01-01T00:51:00Z through 2026-01-01T04:09:00Z were skipped (no beat was "
        "running, then the beat was running but late): every match of '* * * * *' in that span, not "
        "listed one by one; never back-filled"
    )
    assert len(skips) == 2 * keep + 1


def test_the_capped_summary_names_its_span_and_expressions() -> None:
    start = at("2026-01-01T00:00:00.5Z")
    update = at("2026-06-01T00:00:00Z")
    plan = cron_plan.plan(
        segments=[Segment("* * * * *", update), Segment("*/2 * * * *", None)],
        considered_until=start,
        now=at("2027-01-01T00:00:30Z"),
        previous_tick=start,
    )
    summary = next(d for d in plan.decisions if d.summary)
    assert summary.reason.startswith(
        "more than 20000 matches from 2026-01-01T00:51:00Z until just before 2026-12-31T22:20:00Z "
        "were skipped (no beat was running): every match of the expression then in force ('* * * * *', "
        "then '*/2 * * * *') in that span"
    ), summary.reason


def test_own_tick_clock_sees_a_forward_jump_and_nothing_else() -> None:
    from beat import cron_recorder

    clock = cron_recorder._OwnTickClock()
    first = clock.advance(now=at("2026-03-04T10:00:00Z"), monotonic=100.0)
    assert (first.running_since, first.previous, first.clock_jump) == (at("2026-03-04T10:00:00Z"), None, None)
    steady = clock.advance(now=at("2026-03-04T10:00:01Z"), monotonic=101.0)
    assert steady.previous == at("2026-03-04T10:00:00Z") and steady.clock_jump is None
    jumped = clock.advance(now=at("2026-03-04T10:10:02Z"), monotonic=102.0)
    assert jumped.clock_jump == dt.timedelta(seconds=600)
    assert jumped.running_since == at("2026-03-04T10:00:00Z")
    stalled = clock.advance(now=at("2026-03-04T10:15:02Z"), monotonic=402.0)
    assert stalled.clock_jump is None  # five real minutes passed: a late beat, not a jump
