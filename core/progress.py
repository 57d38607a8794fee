"""Where is it? What a DurableWorkflow instance is doing or waiting for (docs/spec/host-features.md#hf-observability); pure.

:func:`progress` decides what ``GET …/instances/{id}/progress`` answers from what the store holds —
the instance's status, its pending step (the steps table: at most one step is pending at a time,
steps run one after the other), the latest ``ContextStarted`` event of its history, the step attempt
a context runs right now (published by its worker's heartbeat, at most one lease renewal late) and
whether a Version can run it now — with the clock passed in. It is a view beside the spec's ``status()``,
whose shape it never changes (docs/spec/durable-workflow.md#dw-binding), and it adds nothing to the history.

The answer is a :class:`Progress` value, which ``host_api.schemas.InstanceProgress`` dumps as
(members that are ``None`` left out)::

    {"status": "running",                 # the seven statuses of status()
     "activity": "retrying",              # see ACTIVITIES
     "step"?: {"name", "kind": "do"|"sleep"|"wait", "attempt"?},   # the step it is on
     "since"?,                                                     # its running attempt's start
     "retryAt"?, "lastError"?: {"type", "message"},               # a do step between attempts
     "wakeAt"?,                                                    # a sleep
     "eventType"?, "timeoutAt"?,                                   # a wait
     "context"?: {"epoch", "startedAt", "versionUid"?},            # the latest replay context
     "reason"?: "no_version", "message"?: "…"}                     # why it is queued, if known

Times are aware UTC datetimes (RFC 3339 UTC strings with milliseconds on the wire); ``attempt`` is
1-based: the attempt that runs next (or runs now, once its retry time has passed).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

#: ``activity`` values: ``queued`` (no context has started; ``reason`` may say why), ``starting``
#: (a context is due or starting), ``running`` (a context runs the code), ``retrying`` (a ``do``
#: step waits for its next attempt: ``retryAt``), ``sleeping`` (``wakeAt``), ``waiting``
#: (``eventType``, ``timeoutAt``), ``stopping`` (terminate or DELETE is stopping it), ``finished``.
ACTIVITIES = ("queued", "starting", "running", "retrying", "sleeping", "waiting", "stopping", "finished")
TERMINAL = ("complete", "errored", "terminated")


@dataclasses.dataclass(frozen=True)
class PendingStep:
    """The instance's pending step row: ``kind`` do/sleep/wait, ``attempts`` made so far (do),
    ``wake_at`` (a do step's retry time or a sleep's deadline), ``timeout_at`` and ``config``
    (``{"type", "timeoutSeconds"}`` of a wait), ``error`` (a do step's last failed attempt)."""

    name: str
    kind: str
    attempts: int = 0
    wake_at: dt.datetime | None = None
    timeout_at: dt.datetime | None = None
    config: dict | None = None
    error: dict | None = None


@dataclasses.dataclass(frozen=True)
class RunningStep:
    """The step attempt a context's child runs right now, as its worker's heartbeat published it
    (``epoch``: that context's token; ``since``: when the attempt started)."""

    name: str
    attempt: int
    since: dt.datetime
    epoch: int


@dataclasses.dataclass(frozen=True)
class ContextInfo:
    """The latest ``ContextStarted``: its ``epoch``, Version and time; ``ended`` when a
    ``ContextSuspended`` follows it (that context stopped its code; a woken instance waits for the
    next one)."""

    epoch: int
    started_at: dt.datetime
    version_uid: str | None = None
    ended: bool = False


@dataclasses.dataclass(frozen=True)
class StepView:
    """The step an instance is on: ``kind`` do/sleep/wait; ``attempt`` (do steps only, 1-based) the
    attempt that runs next or runs now."""

    name: str
    kind: str
    attempt: int | None = None


@dataclasses.dataclass(frozen=True)
class Progress:
    """What an instance does or waits for (the module doc): ``activity`` one of :data:`ACTIVITIES`;
    ``step`` the step it is on; ``since`` its running attempt's start; ``retry_at`` and
    ``last_error`` (``{"type", "message"}``) a do step's next attempt and last failure; ``wake_at``
    a sleep's deadline; ``event_type`` and ``timeout_at`` a wait's; ``context`` the latest replay
    context (its ``ended`` is not part of the answer); ``reason`` ``no_version`` with its
    ``message``, or the stop (``terminate``/``delete``) of a stopping instance. ``None``: absent."""

    status: str
    activity: str
    step: StepView | None = None
    since: dt.datetime | None = None
    retry_at: dt.datetime | None = None
    last_error: dict[str, str] | None = None
    wake_at: dt.datetime | None = None
    event_type: str | None = None
    timeout_at: dt.datetime | None = None
    context: ContextInfo | None = None
    reason: str | None = None
    message: str | None = None


def progress(
    *,
    status: str,
    stopping: str | None,
    pending: PendingStep | None,
    context: ContextInfo | None,
    no_version: str | None,
    now: dt.datetime,
    running: RunningStep | None = None,
) -> Progress:
    """Decide what instance is doing (see the module doc).

    ``status`` and ``stopping`` come from the instance row; ``pending`` is its pending step (if
    several are stored, the most recently updated one); ``context`` the latest ``ContextStarted``;
    ``no_version`` a human reason when no applied Deployment can run the workflow now (``None``:
    a Version can run it, or not checked); ``now`` aware UTC; ``running`` the step attempt the
    heartbeat says a context runs (used only while it is the latest context's and no other step is
    pending: ``step`` and ``since``).
    """
    if status in TERMINAL:
        return Progress(status=status, activity="finished", context=context)
    if stopping is not None:
        return Progress(status=status, activity="stopping", reason=stopping, context=context)
    if running is not None and status == "running" and context is not None and running.epoch == context.epoch and (
        pending is None or (pending.kind == "do" and pending.name == running.name)
    ):
        found = Progress(
            status=status,
            activity="running",
            step=StepView(name=running.name, kind="do", attempt=running.attempt),
            since=running.since,
            last_error=None if pending is None else _last_error(pending.error),
            context=context,
        )
    elif pending is not None:
        found = _pending(pending, status=status, context=context, now=now)
    elif status == "queued":
        found = Progress(status=status, activity="queued", context=context)
    else:
        # No pending step: a context runs the code, unless the latest one stopped (an event woke
        # the instance by completing its wait: the next context is due).
        activity = "running" if context is not None and not context.ended else "starting"
        found = Progress(status=status, activity=activity, context=context)
    if no_version is not None and found.activity in ("queued", "starting", "running"):
        # no code can run it: nothing is running
        activity = "starting" if found.activity == "running" else found.activity
        found = dataclasses.replace(found, activity=activity, reason="no_version", message=no_version)
    return found


def _last_error(error: dict | None) -> dict[str, str] | None:
    """A do step's last failed attempt as ``{"type", "message"}`` (``None``: none failed)."""
    return {"type": error.get("type", "Error"), "message": error.get("message", "")} if error else None


def _pending(step: PendingStep, *, status: str, context: ContextInfo | None, now: dt.datetime) -> Progress:
    if step.kind == "do":
        if step.wake_at is not None and step.wake_at > now:
            activity = "retrying"
        else:  # the retry is due: running once a context started after it, else starting
            started = context is not None and (step.wake_at is None or context.started_at >= step.wake_at)
            activity = "running" if status == "running" and started else "starting"
        return Progress(
            status=status,
            activity=activity,
            step=StepView(name=step.name, kind="do", attempt=step.attempts + 1),
            retry_at=step.wake_at,
            last_error=_last_error(step.error),
            context=context,
        )
    if step.kind == "sleep":
        due = step.wake_at is not None and step.wake_at <= now
        return Progress(
            status=status,
            activity="sleeping" if status == "sleeping" and not due else "starting",
            step=StepView(name=step.name, kind="sleep"),
            wake_at=step.wake_at,
            context=context,
        )
    return Progress(
        status=status,
        activity="waiting" if status == "waiting" else "starting",
        step=StepView(name=step.name, kind="wait"),
        event_type=step.config.get("type") if step.config else None,
        timeout_at=step.timeout_at,
        context=context,
    )
