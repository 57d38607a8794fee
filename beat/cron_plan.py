"""Decide which cron matches of one schedule to record and which to skip (pure, no I/O).

docs/spec/cron-trigger.md#cr-match: a match the Host could not record in time is skipped, never back-filled or
accumulated; once recorded, the handler is owed at least one call (docs/spec/cron-trigger.md#cr-delivery).
docs/spec/cron-trigger.md#cr-runs: a match is recorded only while ``now − scheduledTime < 60 s``. The beat
applies a ``Plan`` in one transaction (``beat.cron_recorder``); everything here takes ``now`` as a parameter.

A schedule is a chain of ``Segment``s: each cron expression owns the matches in
``(previous segment's end, end]``. An update closes the old segment at the update instant, so
old and new expressions never fire side by side (CB-05); a delete closes the last one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterator, Sequence

from core import cron

#: docs/spec/cron-trigger.md#cr-runs: a match is recorded only while now − scheduledTime < 60 s.
RECORD_GRACE = dt.timedelta(seconds=60)
#: For one long gap, skipped matches listed one by one at its start and at its end.
SKIPS_KEPT_EACH_END = 50
#: Skipped matches counted one by one for the summary row before giving "at least N".
SKIP_COUNT_LIMIT = 20_000

_MS = dt.timedelta(milliseconds=1)


@dataclasses.dataclass(frozen=True)
class Segment:
    """Expression ``cron`` owns the matches ``t`` with ``start < t <= end`` (``end`` None: open)."""

    cron: str
    end: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Decision:
    """One match of the window: ``record`` it (``reason`` None) or skip it with ``reason``.

    ``scheduled_time`` is a whole UTC minute; ``cron`` the expression that matched. A summary
    skip (``summary`` true) stands for every omitted match of a long gap, placed at the first.
    """

    scheduled_time: dt.datetime
    cron: str
    record: bool
    reason: str | None = None
    summary: bool = False


@dataclasses.dataclass(frozen=True)
class Ticks:
    """What beat knows about its own ticks, to say truly why a match was skipped (docs/spec/host-features.md#hf-newcomer).

    ``previous``: any beat's latest tick before this one (None: unknown). ``running_since``: this
    beat process's first tick — it has been ticking ever since, so a match after it was missed by
    a *late* beat, not an absent one. ``own_previous``: this process's previous tick (wall clock).
    ``clock_jump``: how much further the wall clock moved than real (monotonic) time since
    ``own_previous``, when that is a forward jump worth naming (None otherwise).
    """

    previous: dt.datetime | None
    running_since: dt.datetime | None = None
    own_previous: dt.datetime | None = None
    clock_jump: dt.timedelta | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to apply for one schedule: the decisions (ascending ``scheduled_time``), the new
    ``considered_until`` (= ``now``), the segments still owed a decision later, and
    ``next_due_at`` (the first instant with something to decide, None: never again)."""

    decisions: tuple[Decision, ...]
    considered_until: dt.datetime
    remaining: tuple[Segment, ...]
    next_due_at: dt.datetime | None


def plan(
    *,
    segments: Sequence[Segment],
    considered_until: dt.datetime,
    now: dt.datetime,
    previous_tick: dt.datetime | None,
    grace: dt.timedelta = RECORD_GRACE,
    running_since: dt.datetime | None = None,
    own_previous_tick: dt.datetime | None = None,
    clock_jump: dt.timedelta | None = None,
) -> Plan:
    """Decide every match ``t`` with ``considered_until < t <= now`` (docs/spec/cron-trigger.md#cr-grammar, docs/spec/cron-trigger.md#cr-runs).

    ``segments``: ascending by ``end``; only the last may have ``end`` None. ``previous_tick``:
    when any beat last ticked before this tick (None: unknown); with ``running_since``,
    ``own_previous_tick`` and ``clock_jump`` (:class:`Ticks`) it only picks the skip reason:
    a forward clock jump, a beat that ran but was late, a match recorded too late, or no beat
    running at all.
    Matches with ``now − t < grace`` are recorded, older ones skipped; of a long run of skips
    only ``SKIPS_KEPT_EACH_END`` at each end get a row, plus one summary row, so a year-long
    outage costs about a hundred rows. ``now <= considered_until`` decides nothing.
    Raises ``cron.CronSyntaxError`` if a stored expression does not parse.
    """
    parsed = [(cron.parse(s.cron), s) for s in segments]
    ticks = Ticks(previous_tick, running_since, own_previous_tick, clock_jump)
    decisions: list[Decision] = []
    if now > considered_until:
        skip_end = now - grace
        if skip_end > considered_until:
            decisions.extend(
                _skips(parsed, start=considered_until, end=skip_end, now=now, ticks=ticks)
            )
        record_start = max(considered_until, skip_end)
        decisions.extend(
            Decision(scheduled_time=t, cron=expr, record=True)
            for t, expr in _matches(parsed, start=record_start, end=now)
        )
    until = max(now, considered_until)
    remaining = tuple(s for s in segments if s.end is None or s.end > until)
    first_due = next(_matches([(p, s) for p, s in parsed if s in remaining], start=until, end=None), None)
    return Plan(
        decisions=tuple(decisions),
        considered_until=until,
        remaining=remaining,
        next_due_at=None if first_due is None else first_due[0],
    )


def _matches(
    parsed: Sequence[tuple[cron.CronSchedule, Segment]], *, start: dt.datetime, end: dt.datetime | None
) -> Iterator[tuple[dt.datetime, str]]:
    """Matches ``start < t <= end`` (``end`` None: unbounded), ascending, across the segments.

    The first segment is taken to start before ``start``; each later one starts where the
    previous one ends.
    """
    segment_start: dt.datetime | None = None
    for schedule, segment in parsed:
        low = start if segment_start is None else max(start, segment_start)
        if end is not None and low >= end:
            return
        high = _min_or_none(segment.end, end)
        current = cron.next_match(schedule, low) if high is None or high > low else None
        while current is not None and (high is None or current <= high):
            yield current, segment.cron
            current = cron.next_match(schedule, current)
        if segment.end is None:
            return
        segment_start = segment.end


def _min_or_none(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _skips(
    parsed: Sequence[tuple[cron.CronSchedule, Segment]],
    *,
    start: dt.datetime,
    end: dt.datetime,
    now: dt.datetime,
    ticks: Ticks,
) -> list[Decision]:
    """Skip decisions for ``start < t <= end``: the first and last few, and one summary between
    that names exactly the span (and expressions) it stands for, and why."""
    keep = SKIPS_KEPT_EACH_END
    head = list(itertools.islice(_matches(parsed, start=start, end=end), keep + 1))
    if len(head) <= keep:
        return [_skip(t, expr, now=now, ticks=ticks) for t, expr in head]
    head = head[:keep]
    tail = _last_matches(parsed, after=head[-1][0], end=end, count=keep)
    middle = _matches(parsed, start=head[-1][0], end=tail[0][0] - _MS)
    omitted = list(itertools.islice(middle, 1))
    counted = len(omitted)
    last = omitted[0][0] if omitted else None
    expressions = dict.fromkeys([omitted[0][1]] if omitted else [])  # in order of appearance
    for t, expr in itertools.islice(middle, SKIP_COUNT_LIMIT):
        counted, last = counted + 1, t
        expressions[expr] = None
    result = [_skip(t, expr, now=now, ticks=ticks) for t, expr in head]
    if omitted:
        assert last is not None  # the first omitted match at least
        capped = counted > SKIP_COUNT_LIMIT
        if capped:  # not every match was seen: name every expression in force over the span
            expressions = dict.fromkeys(_expressions_between(parsed, start=omitted[0][0], end=tail[0][0]))
        result.append(
            _summary(
                omitted[0],
                last=tail[0][0] if capped else last,
                counted=counted,
                capped=capped,
                expressions=list(expressions),
                why=_why(omitted[0][0], last or omitted[0][0], now=now, ticks=ticks),
            )
        )
    result.extend(_skip(t, expr, now=now, ticks=ticks) for t, expr in tail)
    return result


def _expressions_between(
    parsed: Sequence[tuple[cron.CronSchedule, Segment]], *, start: dt.datetime, end: dt.datetime
) -> list[str]:
    """The expressions whose segments overlap ``[start, end)`` (segments as in :func:`_matches`)."""
    found, segment_start = [], None
    for _schedule, segment in parsed:
        if (segment_start is None or segment_start < end) and (segment.end is None or segment.end >= start):
            found.append(segment.cron)
        if segment.end is None:
            break
        segment_start = segment.end
    return found


def _last_matches(
    parsed: Sequence[tuple[cron.CronSchedule, Segment]], *, after: dt.datetime, end: dt.datetime, count: int
) -> list[tuple[dt.datetime, str]]:
    """The last ``count`` matches in ``(after, end]``, found in growing windows back from ``end``."""
    width = dt.timedelta(hours=1)
    while True:
        low = max(after, end - width)
        found = list(_matches(parsed, start=low, end=end))
        if len(found) >= count or low == after:
            return found[-count:]
        width *= 4


def _kind(t: dt.datetime, *, ticks: Ticks) -> str:
    """Why match ``t`` was not recorded in time: ``clock_jump``, ``too_late`` (a tick came after
    it but it was recorded over 60 s late), ``late_beat`` (this beat was running, its tick was
    late) or ``no_beat``."""
    if ticks.clock_jump is not None and ticks.own_previous is not None and t > ticks.own_previous:
        return "clock_jump"
    if ticks.previous is not None and ticks.previous >= t:
        return "too_late"
    if ticks.running_since is not None and t >= ticks.running_since:
        return "late_beat"
    return "no_beat"


_WHY = {
    "clock_jump": "the host clock jumped forward",
    "too_late": "recorded too late",
    "late_beat": "the beat was running but late",
    "no_beat": "no beat was running",
}


def _why(first: dt.datetime, last: dt.datetime, *, now: dt.datetime, ticks: Ticks) -> str:
    """The summary's reason for the skipped span ``first``..``last``."""
    kinds = [_kind(first, ticks=ticks), _kind(last, ticks=ticks)]
    if kinds[0] == kinds[1]:
        return _WHY[kinds[0]]
    return f"{_WHY[kinds[0]]}, then {_WHY[kinds[1]]}"


def _reason(t: dt.datetime, *, now: dt.datetime, ticks: Ticks) -> str:
    late = int((now - t).total_seconds())
    kind = _kind(t, ticks=ticks)
    if kind == "clock_jump":
        assert ticks.clock_jump is not None and ticks.own_previous is not None
        real = int((now - ticks.own_previous - ticks.clock_jump).total_seconds())
        return (
            f"the host clock jumped forward about {_span(int(ticks.clock_jump.total_seconds()))} between two "
            f"beat ticks (from {cron.format_rfc3339(ticks.own_previous)} to {cron.format_rfc3339(now)} in "
            f"{_span(real)} of real time: a clock change or a suspended machine); skipped, never back-filled"
        )
    if kind == "too_late":
        return f"recorded too late ({_span(late)} after scheduledTime; limit 60 s); skipped, never back-filled"
    if kind == "late_beat":
        since = ticks.own_previous or ticks.running_since
        assert since is not None
        return (
            f"the beat was running but late: its tick after {cron.format_rfc3339(since)} came {_span(late)} "
            "after scheduledTime (limit 60 s; the beat was stalled or overloaded); skipped, never back-filled"
        )
    return (
        f"no beat was running at scheduledTime (considered {_span(late)} later); "
        "skipped, never back-filled"
    )


def _skip(t: dt.datetime, expr: str, *, now: dt.datetime, ticks: Ticks) -> Decision:
    return Decision(scheduled_time=t, cron=expr, record=False, reason=_reason(t, now=now, ticks=ticks))


def _summary(
    first: tuple[dt.datetime, str],
    *,
    last: dt.datetime,
    counted: int,
    capped: bool,
    expressions: list[str],
    why: str,
) -> Decision:
    """The one row standing for every omitted match: ``first`` through ``last`` (or, capped, up to
    but not including ``last``, the first match listed after the gap), of ``expressions``."""
    t, expr = first
    if len(expressions) == 1:
        of = f"of {expressions[0]!r}"
    else:
        of = "of the expression then in force (" + ", then ".join(repr(e) for e in expressions) + ")"
    if capped:
        what = (
            f"more than {SKIP_COUNT_LIMIT} matches from {cron.format_rfc3339(t)} until just before "
            f"{cron.format_rfc3339(last)}"
        )
    else:
        what = f"{counted} matches from {cron.format_rfc3339(t)} through {cron.format_rfc3339(last)}"
    reason = (
        f"{what} were skipped ({why}): every match {of} in that span, not listed one by one; "
        "never back-filled"
    )
    return Decision(scheduled_time=t, cron=expr, record=False, reason=reason, summary=True)


def _span(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 172800:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} days"
