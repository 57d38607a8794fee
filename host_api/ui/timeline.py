"""The instance timeline: history events → rows of time segments for the console's chart.

Pure (no I/O, the clock is passed in): :func:`build` reads the docs/spec/durable-workflow.md#dw-history history of one
instance (the dicts ``GET …/history`` serves, oldest first) and returns one lane for the replay
contexts (when worker code ran) and one per step, by first appearance, each a list of
:class:`Segment` — an attempt of ``step.do`` (ok or failed), the retry delay after a failed
attempt, a sleep, a wait for an event — with start, end and duration. A segment still open
(a sleep or wait in progress, a retry delay not yet over) ends at ``now`` and is marked
``open``; what it still has to go, up to its wake time, deadline or next attempt, follows as a
``planned`` segment, and the axis runs on past ``now`` to the latest of those instants (at most
:data:`FUTURE_SHARE` of the chart: a wait with a year's timeout is cut at the edge, its label
says until when). :func:`layout` adds the chart geometry (percent of the time axis, with a
minimum width so an instant is still visible, and where ``now`` is).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

#: Narrowest drawn segment, in percent of the chart width (a 2 ms attempt must still show).
MIN_WIDTH_PCT = 0.6
#: Narrowest failed attempt (percent): a failure is what a person looks for, so a sub-second one
#: is drawn a few characters wide, never a 1-px sliver (docs/spec/host-features.md#hf-console).
MIN_FAILED_PCT = 1.5
#: Largest part of the axis drawn after ``now`` (planned segments): the past keeps the rest.
FUTURE_SHARE = 0.8


@dataclasses.dataclass
class Segment:
    """One bar: ``kind`` ∈ context, attempt, retry, sleep, wait; ``outcome`` ∈ ok, failed,
    timeout, open, suspended, planned (from now to a known wake time, deadline or next attempt);
    ``label`` is the text a person reads (tooltip and table)."""

    kind: str
    start: dt.datetime
    end: dt.datetime
    outcome: str
    label: str
    x_pct: float = 0.0
    w_pct: float = 0.0

    @property
    def seconds(self) -> float:
        """The segment's duration in seconds."""
        return max((self.end - self.start).total_seconds(), 0.0)


@dataclasses.dataclass
class Lane:
    """One row of the chart: the contexts lane (``kind`` context) or a step (do, sleep, wait)."""

    name: str
    kind: str
    segments: list[Segment] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Timeline:
    """The chart: lanes, the axis ``start``..``end``, its tick labels ``(x_pct, text)`` and
    ``now_pct``, where ``now`` is on the axis (None for an ended instance, whose axis ends at its
    last event)."""

    lanes: list[Lane]
    start: dt.datetime
    end: dt.datetime
    ticks: list[tuple[float, str]]
    now: dt.datetime | None = None
    now_pct: float | None = None

    @property
    def seconds(self) -> float:
        """Length of the time axis in seconds."""
        return max((self.end - self.start).total_seconds(), 0.0)


def parse_time(text: str) -> dt.datetime:
    """An RFC 3339 UTC instant (``…Z``) as an aware datetime."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def duration_text(seconds: float) -> str:
    """``0.004 s``, ``1.2 s``, ``3 min 5 s``, ``2 h 10 min``: short, for labels."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{int(seconds // 86400)} d {int(seconds % 86400 // 3600)} h"


class _Builder:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.lanes: dict[str, Lane] = {}
        self.contexts = Lane(name="worker code", kind="context")
        self.open_context: tuple[dt.datetime, int | None] | None = None
        self.pending_retry: dict[str, tuple[dt.datetime, dt.datetime]] = {}
        self.open_steps: dict[str, tuple[str, dt.datetime, dict]] = {}

    def lane(self, name: str, kind: str) -> Lane:
        if name not in self.lanes:
            self.lanes[name] = Lane(name=name, kind=kind)
        return self.lanes[name]

    def close_context(self, at: dt.datetime, outcome: str, why: str) -> None:
        if self.open_context is None:
            return
        started, epoch = self.open_context
        label = f"context {epoch}: {why}" if epoch is not None else why
        self.contexts.segments.append(Segment("context", started, at, outcome, label))
        self.open_context = None

    def event(self, kind: str, at: dt.datetime, attrs: dict) -> None:
        name = attrs.get("name")
        if kind == "ContextStarted":
            self.close_context(at, "ok", "replaced")
            self.open_context = (at, attrs.get("epoch"))
        elif kind == "ContextSuspended":
            self.close_context(at, "suspended", f"suspended ({attrs.get('reason', '?')})")
        elif kind in ("InstanceCompleted", "InstanceErrored", "InstanceTerminated"):
            self.close_context(at, "failed" if kind != "InstanceCompleted" else "ok", kind[8:].lower())
        elif kind == "StepAttemptStarted" and name is not None:
            lane = self.lane(name, "do")
            retry = self.pending_retry.pop(name, None)
            if retry is not None:
                lane.segments.append(Segment("retry", retry[0], at, "ok", f"retry delay before attempt {attrs.get('attempt')}"))
            self.open_steps[name] = ("attempt", at, attrs)
        elif kind in ("StepAttemptFailed", "StepCompleted", "StepFailed") and name is not None:
            self.step_end(kind, name, at, attrs)
        elif kind == "SleepScheduled" and name is not None:
            self.lane(name, "sleep")
            self.open_steps[name] = ("sleep", at, attrs)
        elif kind == "SleepCompleted" and name is not None:
            self.finish(name, at, "ok", "slept")
        elif kind == "WaitStarted" and name is not None:
            self.lane(name, "wait")
            self.open_steps[name] = ("wait", at, attrs)
        elif kind == "EventConsumed" and name is not None:
            self.finish(name, at, "ok", f"got event {attrs.get('type', '')!r} (#{attrs.get('sequence')})")
        elif kind == "WaitTimedOut" and name is not None:
            self.finish(name, at, "timeout", "timed out")

    def step_end(self, kind: str, name: str, at: dt.datetime, attrs: dict) -> None:
        opened = self.open_steps.get(name)
        if opened is None or opened[0] != "attempt":  # e.g. a sleep's StepCompleted after SleepCompleted
            return
        attempt = opened[2].get("attempt")
        if kind == "StepAttemptFailed":
            error = attrs.get("error") or {}
            text = f"attempt {attempt} failed: {error.get('type', 'Error')}: {error.get('message', '')}"
            self.finish(name, at, "failed", text)
            if "retryAt" in attrs:
                self.pending_retry[name] = (at, parse_time(attrs["retryAt"]))
        elif kind == "StepCompleted":
            self.finish(name, at, "ok", f"attempt {attempt} succeeded")
        else:
            self.finish(name, at, "failed", f"attempt {attempt} failed for good: {attrs.get('message', '')}")

    def finish(self, name: str, at: dt.datetime, outcome: str, text: str) -> None:
        opened = self.open_steps.pop(name, None)
        if opened is None:
            return
        kind, started, _ = opened
        self.lane(name, "do" if kind == "attempt" else kind).segments.append(
            Segment(kind, started, at, outcome, f"{text} ({duration_text((at - started).total_seconds())})")
        )

    def plan(self, lane: Lane, kind: str, until: dt.datetime, text: str) -> None:
        """The rest of an open segment, from now to ``until`` (nothing when that is past)."""
        if until > self.now:
            left = duration_text((until - self.now).total_seconds())
            lane.segments.append(Segment(kind, self.now, until, "planned", f"{text} (in {left})"))

    def result(self, *, terminal: bool) -> list[Lane]:
        end = self.now
        if self.open_context is not None and not terminal:
            started, epoch = self.open_context
            self.contexts.segments.append(Segment("context", started, end, "open", f"context {epoch}: running"))
        for name, (kind, started, attrs) in self.open_steps.items():
            if terminal or kind == "attempt":
                continue
            until = attrs.get("wakeAt") if kind == "sleep" else attrs.get("timeoutAt")
            what = "sleeping" if kind == "sleep" else f"waiting for {attrs.get('type', '')!r}"
            label = f"{what} until {until}" if until else what
            lane = self.lane(name, kind)
            lane.segments.append(Segment(kind, started, end, "open", label))
            if until:
                then = "wakes" if kind == "sleep" else "times out"
                self.plan(lane, kind, parse_time(until), f"{then} at {until}")
        for name, (failed_at, retry_at) in self.pending_retry.items():
            if not terminal:
                stamp = retry_at.isoformat().replace("+00:00", "Z")
                lane = self.lane(name, "do")
                lane.segments.append(Segment("retry", failed_at, end, "open", f"retry delay: next attempt at {stamp}"))
                self.plan(lane, "retry", retry_at, f"next attempt at {stamp}")
        lanes = list(self.lanes.values())
        return ([self.contexts] if self.contexts.segments else []) + lanes


def build(events: list[dict], *, now: dt.datetime, terminal: bool) -> Timeline:
    """The timeline of one instance from its history ``events`` (oldest first) at ``now``.

    ``terminal``: the instance has ended (nothing is open any more; the axis ends at its last
    event instead of ``now``).
    """
    builder = _Builder(now)
    times = []
    for event in events:
        at = parse_time(event["eventTimestamp"])
        times.append(at)
        builder.event(event["eventType"], at, event.get("attributes") or {})
    start = times[0] if times else now
    end = (times[-1] if times else now) if terminal else max(now, times[-1] if times else now)
    lanes = builder.result(terminal=terminal)
    timeline = Timeline(lanes=lanes, start=start, end=end, ticks=[], now=None if terminal else now)
    planned = [seg.end for lane in lanes for seg in lane.segments if seg.outcome == "planned"]
    if planned:
        timeline.end = min(max(planned), horizon(start, now))
    layout(timeline)
    return timeline


def horizon(start: dt.datetime, now: dt.datetime) -> dt.datetime:
    """The farthest instant the axis reaches past ``now``: planned segments take at most
    :data:`FUTURE_SHARE` of the chart (the past, at least one second of it, keeps the rest)."""
    past = max((now - start).total_seconds(), 1.0)
    return now + dt.timedelta(seconds=past * FUTURE_SHARE / (1 - FUTURE_SHARE))


def add_in_flight(timeline: Timeline, *, name: str, attempt: int | None, since: dt.datetime, now: dt.datetime) -> None:
    """Draw the attempt a context runs now (the progress service's ``step`` and ``since``: the
    history records an attempt only when it ends) as an open segment in its step's lane, and lay
    the chart out again. Pure."""
    lane = next((lane for lane in timeline.lanes if lane.name == name), None)
    if lane is None:
        lane = Lane(name=name, kind="do")
        timeline.lanes.append(lane)
    label = f"attempt {attempt or '?'} running ({duration_text((now - since).total_seconds())} so far)"
    lane.segments.append(Segment("attempt", since, max(now, since), "open", label))
    timeline.end = max(timeline.end, now)
    timeline.now = now
    layout(timeline)


def layout(timeline: Timeline) -> None:
    """Set every segment's ``x_pct``/``w_pct`` on the axis (a segment running past the axis's
    end is cut there), ``now_pct`` and the axis ticks (five labels)."""
    total = timeline.seconds or 1e-9
    for lane in timeline.lanes:
        for seg in lane.segments:
            x = (seg.start - timeline.start).total_seconds() / total * 100
            w = (min(seg.end, timeline.end) - seg.start).total_seconds() / total * 100
            w = max(w, MIN_FAILED_PCT if seg.outcome == "failed" and seg.kind == "attempt" else MIN_WIDTH_PCT)
            x = min(max(x, 0.0), 100 - w)
            seg.x_pct, seg.w_pct = round(x, 3), round(w, 3)
    timeline.ticks = [(i * 25.0, "+" + duration_text(timeline.seconds * i / 4)) for i in range(5)]
    if timeline.now is not None:
        at = (timeline.now - timeline.start).total_seconds() / total * 100
        timeline.now_pct = round(min(max(at, 0.0), 100.0), 3)


def keep_recent_lanes(timeline: Timeline, limit: int) -> int:
    """Keep the contexts lane and the ``limit`` step lanes that started last; returns how many
    step lanes were dropped (a chart of a thousand steps is no longer readable)."""
    contexts = [lane for lane in timeline.lanes if lane.kind == "context"]
    steps = [lane for lane in timeline.lanes if lane.kind != "context"]
    if len(steps) <= limit:
        return 0
    timeline.lanes = contexts + steps[-limit:]
    return len(steps) - limit
