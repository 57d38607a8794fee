"""Where is it? What a DurableWorkflow instance is doing or waiting for (docs/spec/host-features.md#hf-observability); pure.

:func:`progress` decides the body of ``GET …/instances/{id}/progress`` from what the store holds —
the instance's status, its pending step (the steps table: at most one step is pending at a time,
steps run one after the other), the latest ``ContextStarted`` event of its history, the step attempt
a context runs right now (published by its worker's heartbeat, at most one lease renewal late) and
whether a Version can run it now — with the clock passed in. It is a view beside the spec's ``status()``,
whose shape it never changes (docs/spec/durable-workflow.md#dw-binding), and it adds nothing to the history.

Body (``TypedDict`` :class:`Progress`)::

    {"status": "running",                 # the seven statuses of status()
     "activity": "retrying",              # see ACTIVITIES
     "step"?: {"name", "kind": "do"|"sleep"|"wait", "attempt"?},   # the step it is on
     "since"?,                                                     # its running attempt's start
     "retryAt"?, "lastError"?: {"type", "message"},               # a do step between attempts
     "wakeAt"?,                                                    # a sleep
     "eventType"?, "timeoutAt"?,                                   # a wait
     "context"?: {"epoch", "versionUid"?, "startedAt"},            # the latest replay context
     "reason"?: "no_version", "message"?: "…"}                     # why it is queued, if known

Times are RFC 3339 UTC strings (``…Z``); ``attempt`` is 1-based: the attempt that runs next (or
runs now, once its retry time has passed).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, NotRequired, TypedDict

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


class StepView(TypedDict):
    name: str
    kind: str
    attempt: NotRequired[int]


class Progress(TypedDict):
    status: str
    activity: str
    step: NotRequired[StepView]
    since: NotRequired[str]
    retryAt: NotRequired[str]
    lastError: NotRequired[dict]
    wakeAt: NotRequired[str]
    eventType: NotRequired[str]
    timeoutAt: NotRequired[str]
    context: NotRequired[dict]
    reason: NotRequired[str]
    message: NotRequired[str]


def rfc3339(value: dt.datetime) -> str:
    """``value`` (aware) as RFC 3339 UTC with milliseconds and ``Z``."""
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
    body: dict[str, Any] = {"status": status}
    if context is not None:
        started: dict[str, Any] = {"epoch": context.epoch, "startedAt": rfc3339(context.started_at)}
        if context.version_uid is not None:
            started["versionUid"] = context.version_uid
        body["context"] = started
    if status in TERMINAL:
        body["activity"] = "finished"
        return body  # type: ignore[return-value]
    if stopping is not None:
        body["activity"] = "stopping"
        body["reason"] = stopping
        return body  # type: ignore[return-value]
    if running is not None and status == "running" and context is not None and running.epoch == context.epoch and (
        pending is None or (pending.kind == "do" and pending.name == running.name)
    ):
        body["activity"] = "running"
        body["step"] = {"name": running.name, "kind": "do", "attempt": running.attempt}
        body["since"] = rfc3339(running.since)
        if pending is not None and pending.error:
            body["lastError"] = {
                "type": pending.error.get("type", "Error"),
                "message": pending.error.get("message", ""),
            }
    elif pending is not None:
        body.update(_pending(pending, status=status, context=context, now=now))
    elif status == "queued":
        body["activity"] = "queued"
    else:
        # No pending step: a context runs the code, unless the latest one stopped (an event woke
        # the instance by completing its wait: the next context is due).
        body["activity"] = "running" if context is not None and not context.ended else "starting"
    if no_version is not None and body["activity"] in ("queued", "starting", "running"):
        body["reason"] = "no_version"
        body["message"] = no_version
        if body["activity"] == "running":  # no code can run it: nothing is running
            body["activity"] = "starting"
    return body  # type: ignore[return-value]


def _pending(
    step: PendingStep, *, status: str, context: ContextInfo | None, now: dt.datetime
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if step.kind == "do":
        out["step"] = {"name": step.name, "kind": "do", "attempt": step.attempts + 1}
        if step.wake_at is not None and step.wake_at > now:
            out["activity"] = "retrying"
        else:  # the retry is due: running once a context started after it, else starting
            started = context is not None and (step.wake_at is None or context.started_at >= step.wake_at)
            out["activity"] = "running" if status == "running" and started else "starting"
        if step.wake_at is not None:
            out["retryAt"] = rfc3339(step.wake_at)
        if step.error:
            out["lastError"] = {"type": step.error.get("type", "Error"), "message": step.error.get("message", "")}
    elif step.kind == "sleep":
        out["step"] = {"name": step.name, "kind": "sleep"}
        due = step.wake_at is not None and step.wake_at <= now
        out["activity"] = "sleeping" if status == "sleeping" and not due else "starting"
        if step.wake_at is not None:
            out["wakeAt"] = rfc3339(step.wake_at)
    else:
        out["step"] = {"name": step.name, "kind": "wait"}
        out["activity"] = "waiting" if status == "waiting" else "starting"
        if step.config and "type" in step.config:
            out["eventType"] = step.config["type"]
        if step.timeout_at is not None:
            out["timeoutAt"] = rfc3339(step.timeout_at)
    return out
