"""Pure step decisions of a replay context (docs/spec/durable-workflow.md#dw-replay, docs/spec/durable-workflow.md#dw-step; docs/spec/architecture.md#ar-context point 5).

Given the stored step record of a name (or none), the child's request and the clock, say what the
context answers or commits. No I/O: the context (``context.py``) applies a decision, the store
(``store.py``) commits it. Decide purely, apply once (docs/spec/house-rules.md#hr-decide-purely).

Rules, each from docs/spec/durable-workflow.md#dw-step:

* A completed name, succeeded or failed, replays its recorded outcome and causes no new effect; the
  name is checked first: a completed name replays whatever the other arguments (even invalid ones)
  are. Decision (the spec is silent): a completed *failure*
  asked for by another kind of step cannot be replayed as that kind's error and is a
  ``step_definition_mismatch``; a completed success replays its result (``None`` for a sleep).
* Reusing an unfinished name for a step of another kind is the uncatchable
  ``step_definition_mismatch``.
* Bad arguments of a not-completed name are a ``TypeError`` → ``reject_args``.
* A pending step of the same kind keeps the settings stored first: its policy / deadline / type
  and timeout.
* At most 1024 distinct step names: the 1025th ends the instance ``step_limit_exceeded`` (docs/spec/host-limits.md#hl-decisions).
* An instance lives at most 31 536 000 s from creation: past ``lifetime_ends_at`` the instance ends
  ``lifetime_exceeded``; a deadline beyond it is kept, but its timer fires at the lifetime end.
* do: the delay after failed attempt k is ``retry.delay_after_attempt``; every retry runs in a fresh
  context (even with delay 0); the last failure is ``step_failed``.
* sleep: 0 s completes in place; otherwise the deadline is fixed at the first encounter.
* waitForEvent: the oldest matching event accepted at or before the timeout instant wins; at or
  after the timeout without one → ``wait_timeout``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from takohost.domain import retry

MAX_STEPS = 1024
#: An instance's lifetime from its creation (docs/spec/durable-workflow.md#dw-step "instance寿命は作成から31536000秒").
LIFETIME_SECONDS = 31_536_000
STEP_KINDS = ("do", "sleep", "wait")
#: The host error a failed step of each kind replays as (the child's ``raise`` names).
FAILURE_ERROR = {"do": "step_failed", "wait": "wait_timeout"}


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One ``steps`` row (``models.instances.Step``): what replay reads, and what a commit writes
    (``commits.Commit.step``, upserted by ``(instance, name)``) — one type for both.

    ``state`` ∈ pending/succeeded/failed; ``attempts`` = failed-or-finished attempts recorded;
    ``config`` is the first stored setting: ``{"policy": {...}}`` (do), ``{"seconds": n}`` (sleep),
    ``{"type": t, "timeoutSeconds": n}`` (wait); ``wake_at`` is a sleep's deadline or a pending do's
    next-attempt time; ``timeout_at`` a wait's deadline; ``error`` ``{"message", ...}`` of a failure.
    Written as an upsert, every column but ``config``, ``kind``, ``timeout_at`` and ``created_at``
    is replaced on conflict: the first stored settings (policy, seconds, wait type/timeout) are kept
    (docs/spec/durable-workflow.md#dw-step: a pending step of the same kind keeps the settings stored
    first).
    """

    name: str
    kind: str
    state: str
    attempts: int = 0
    result: dict | None = None
    error: dict | None = None
    config: dict | None = None
    wake_at: dt.datetime | None = None
    timeout_at: dt.datetime | None = None

    @property
    def completed(self) -> bool:
        """True once the step succeeded or failed for good."""
        return self.state != "pending"


@dataclasses.dataclass(frozen=True)
class Request:
    """A step request from the child, already shape-checked (``protocol.check_child_message``).

    ``kind`` ∈ do/sleep/wait; ``args_error`` is the child's ``TypeError`` text for invalid other
    arguments (then the argument fields are ``None``); ``policy`` is re-validated by the parent.
    """

    kind: str
    name: str
    args_error: str | None = None
    policy: retry.RetryPolicy | None = None
    seconds: int | None = None
    event_type: str | None = None
    timeout_seconds: int | None = None


# Decisions ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Resolve:
    """Answer ``resolve {result}`` (a replay, nothing to commit)."""

    result: dict | None


@dataclasses.dataclass(frozen=True)
class Raise:
    """Answer ``raise {error, message}`` (a replayed failure, nothing to commit)."""

    error: str
    message: str


@dataclasses.dataclass(frozen=True)
class RejectArgs:
    """Answer ``reject_args``: the child raises its ``TypeError``; nothing is recorded."""


@dataclasses.dataclass(frozen=True)
class EndInstance:
    """Stop the context and end the instance ``errored`` with ``reason`` (uncatchable)."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class RunEffect:
    """Answer ``run_effect``: attempt number ``attempt`` (1-based) under ``policy``."""

    attempt: int
    policy: retry.RetryPolicy
    new: bool


@dataclasses.dataclass(frozen=True)
class CompleteSleep:
    """Commit the sleep as completed (``new``: no row yet), then answer ``resolve``."""

    wake_at: dt.datetime
    new: bool


@dataclasses.dataclass(frozen=True)
class Suspend:
    """Stop the context (kill the child first), then commit the suspension.

    ``kind`` ∈ sleep (status ``sleeping``, timer ``wake``), retry (status ``running``, timer
    ``retry``), wait (status ``waiting``, timer ``timeout``). ``due`` is the step's own deadline,
    ``timer_due`` when the timer fires (the lifetime end if that comes first).
    """

    kind: str
    due: dt.datetime
    timer_due: dt.datetime
    new: bool


@dataclasses.dataclass(frozen=True)
class TryWait:
    """Look for the oldest event of ``event_type`` accepted at or before ``timeout_at``: consume it
    with the step result, or (none) time out when ``now >= timeout_at``, or suspend."""

    event_type: str
    timeout_seconds: int
    timeout_at: dt.datetime
    new: bool


Decision = Resolve | Raise | RejectArgs | EndInstance | RunEffect | CompleteSleep | Suspend | TryWait


def wait_timeout_message(event_type: str, timeout_seconds: int) -> str:
    """The ``wait_timeout`` message of a wait that timed out: raised in the context that saw the
    timeout and stored in its step row, so a later context replays the very same text."""
    return f"no {event_type!r} event arrived within {timeout_seconds} s"


def timer_due(due: dt.datetime, *, lifetime_ends_at: dt.datetime) -> dt.datetime:
    """When a deadline's timer fires: the deadline, or the lifetime end if earlier (docs/spec/host-limits.md#hl-decisions:
    the deadline is kept, the instance ends when its lifetime does)."""
    return min(due, lifetime_ends_at)


def decide(
    request: Request,
    record: StepRecord | None,
    *,
    now: dt.datetime,
    known_steps: int,
    lifetime_ends_at: dt.datetime,
) -> Decision:
    """Decide what to do about ``request`` given the name's stored ``record`` (``None``: new name).

    ``known_steps`` is how many distinct names the instance has recorded (the 1024 limit);
    ``now`` and ``lifetime_ends_at`` are aware datetimes.
    """
    if now >= lifetime_ends_at:
        return EndInstance("lifetime_exceeded", "the instance reached its lifetime of 31536000 seconds")
    if record is not None and record.completed:
        return _replay(request, record)
    if record is not None and record.kind != request.kind:
        return EndInstance(
            "step_definition_mismatch",
            f"step name {request.name!r} is pending as a {record.kind} step and was reused"
            f" as a {request.kind} step",
        )
    if request.args_error is not None:
        return RejectArgs()
    if record is None and known_steps >= MAX_STEPS:
        return EndInstance("step_limit_exceeded", f"the instance already has {MAX_STEPS} steps")
    if request.kind == "do":
        return _decide_do(request, record, now=now, lifetime_ends_at=lifetime_ends_at)
    if request.kind == "sleep":
        return _decide_sleep(request, record, now=now, lifetime_ends_at=lifetime_ends_at)
    return _decide_wait(request, record, now=now)


def _replay(request: Request, record: StepRecord) -> Decision:
    if record.state == "succeeded":
        return Resolve(None if record.kind == "sleep" or request.kind == "sleep" else record.result)
    if record.kind != request.kind:
        return EndInstance(
            "step_definition_mismatch",
            f"step name {request.name!r} failed as a {record.kind} step and was reused as a"
            f" {request.kind} step",
        )
    message = (record.error or {}).get("message", "")
    return Raise(FAILURE_ERROR[record.kind], message if isinstance(message, str) else "")


def _decide_do(
    request: Request, record: StepRecord | None, *, now: dt.datetime, lifetime_ends_at: dt.datetime
) -> Decision:
    if record is None:
        assert request.policy is not None
        return RunEffect(attempt=1, policy=request.policy, new=True)
    if record.wake_at is not None and record.wake_at > now:
        # A context started before the retry delay ran out (a duplicate dispatch): wait for it.
        return Suspend(
            "retry", record.wake_at, timer_due(record.wake_at, lifetime_ends_at=lifetime_ends_at), new=False
        )
    policy = stored_policy(record) or request.policy
    assert policy is not None
    return RunEffect(attempt=record.attempts + 1, policy=policy, new=False)


def stored_policy(record: StepRecord) -> retry.RetryPolicy | None:
    """The first stored retry policy of a pending ``do`` step (``None`` if none was stored)."""
    policy = (record.config or {}).get("policy")
    return None if policy is None else retry.RetryPolicy.from_json(policy)


def _decide_sleep(
    request: Request, record: StepRecord | None, *, now: dt.datetime, lifetime_ends_at: dt.datetime
) -> Decision:
    if record is None:
        assert request.seconds is not None
        wake_at = now + dt.timedelta(seconds=request.seconds)
        if request.seconds == 0:
            return CompleteSleep(wake_at=now, new=True)
        return Suspend("sleep", wake_at, timer_due(wake_at, lifetime_ends_at=lifetime_ends_at), new=True)
    assert record.wake_at is not None
    if record.wake_at <= now:
        return CompleteSleep(wake_at=record.wake_at, new=False)
    return Suspend(
        "sleep", record.wake_at, timer_due(record.wake_at, lifetime_ends_at=lifetime_ends_at), new=False
    )


def _decide_wait(request: Request, record: StepRecord | None, *, now: dt.datetime) -> Decision:
    if record is None:
        assert request.event_type is not None and request.timeout_seconds is not None
        return TryWait(
            event_type=request.event_type,
            timeout_seconds=request.timeout_seconds,
            timeout_at=now + dt.timedelta(seconds=request.timeout_seconds),
            new=True,
        )
    return pending_wait(record)


def pending_wait(record: StepRecord) -> TryWait:
    """The :class:`TryWait` of a wait already started (``record``: its stored ``wait`` row, whose
    ``config`` ``{"type", "timeoutSeconds"}`` and ``timeout_at`` were fixed at its first
    encounter): what a later context tries, and what ``send_event``'s direct delivery consumes
    (``commits.event_delivered``). ``new`` is False: ``WaitStarted`` is in the history already.

    Raises ``KeyError``/``AssertionError`` for a row that is not a started wait's."""
    config = record.config or {}
    assert record.kind == "wait" and record.timeout_at is not None
    return TryWait(
        event_type=config["type"],
        timeout_seconds=int(config["timeoutSeconds"]),
        timeout_at=record.timeout_at,
        new=False,
    )


# Effect outcomes -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AttemptSucceeded:
    """Commit the step as succeeded with ``result``, then answer ``resolve``."""

    result: dict | None


@dataclasses.dataclass(frozen=True)
class AttemptFailedRetry:
    """Commit the failed attempt and the next attempt's time ``retry_at`` (``delay`` seconds),
    then stop the context: the retry runs in a fresh one, even with delay 0 (docs/spec/durable-workflow.md#dw-step-do)."""

    error: dict
    delay: int
    retry_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class AttemptFailedFinal:
    """Commit ``step_failed`` for the step, then answer ``raise step_failed``."""

    error: dict
    message: str


Outcome = AttemptSucceeded | AttemptFailedRetry | AttemptFailedFinal


def decide_outcome(
    *,
    attempt: int,
    policy: retry.RetryPolicy,
    ok: bool,
    result: Any = None,
    error: dict | None = None,
    now: dt.datetime,
) -> Outcome:
    """What a finished attempt means. ``ok``/``result`` come from the parent's own validation of
    the child's report (a non-document result is a failed attempt, docs/spec/durable-workflow.md#dw-doc); ``error`` is
    ``{"type", "message"}`` of a failure."""
    if ok:
        return AttemptSucceeded(result)
    error = dict(error or {"type": "Error", "message": ""})
    if attempt < policy.max_attempts:
        delay = retry.delay_after_attempt(policy, attempt=attempt)
        return AttemptFailedRetry(error=error, delay=delay, retry_at=now + dt.timedelta(seconds=delay))
    kind, text = error.get("type", "Error"), error.get("message", "")
    message = f"step failed after {attempt} attempt{'s' if attempt != 1 else ''}: {kind}: {text}".rstrip(": ")
    return AttemptFailedFinal(error=error, message=message)
