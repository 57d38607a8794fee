"""What each fenced commit of a replay context writes, as data (pure; no I/O).

A :class:`Commit` says: the instance's new status (if any), whether ``updated_at`` moves, how many
new step names it adds, the step row to upsert, the timer row to upsert, and the history events
(docs/spec/durable-workflow.md#dw-history) — in the order they are numbered. The store (``store``) applies these plans, so step
semantics exist once (``decide``), their records once (here) and their SQL once (``store``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from takohost.domain import decide, history


@dataclasses.dataclass(frozen=True)
class StepRow:
    """The values of one ``steps`` row to insert or update (by ``(instance, name)``).

    On conflict every column but ``config``, ``kind`` and ``created_at`` is replaced: the first stored config
    (policy, seconds, wait type/timeout) is kept (docs/spec/durable-workflow.md#dw-step: a pending step of the
    same kind keeps the settings stored first).
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


@dataclasses.dataclass(frozen=True)
class Commit:
    """One fenced commit: ``status`` (``None``: unchanged), ``touch`` (move ``updated_at``, which
    the sweep reads; only on status changes and retries), ``new_steps`` (names added, for the 1024
    limit), ``step``/``timer`` upserts (``timer`` = ``(kind, due_at)``) and ``events``."""

    events: list[history.Event]
    status: str | None = None
    touch: bool = False
    new_steps: int = 0
    step: StepRow | None = None
    timer: tuple[str, dt.datetime] | None = None


def attempt(
    *,
    name: str,
    attempt: int,
    new: bool,
    policy: Mapping[str, Any],
    started_at: dt.datetime,
    outcome: decide.Outcome,
    lifetime_ends_at: dt.datetime,
) -> Commit:
    """A finished attempt of ``step.do(name)``: success, a retry (pending, next attempt time, a
    ``retry`` timer unless the delay is 0) or the final failure (``step_failed``).

    ``StepAttemptStarted`` is written here, with its real start time, in the same commit as the
    attempt's outcome (one commit per step, docs/performance.md); an attempt whose worker died before its
    outcome was committed leaves no record and runs again (at-least-once).
    """
    events = [history.attempt_started(name, attempt, at=started_at, policy=policy)]
    config = {"policy": policy}
    if isinstance(outcome, decide.AttemptSucceeded):
        events.append(history.step_completed(name, "do", attempt=attempt))
        step = StepRow(
            name=name, kind="do", state="succeeded", attempts=attempt, result=outcome.result, config=config
        )
        return Commit(events=events, new_steps=int(new), step=step)
    # The traceback is history only: the step row keeps what replay needs ({type, message}).
    row_error = {k: v for k, v in getattr(outcome, "error", {}).items() if k != "traceback"}
    if isinstance(outcome, decide.AttemptFailedRetry):
        events.append(history.attempt_failed(name, attempt, outcome.error, retry_at=outcome.retry_at))
        events.append(history.suspended("running", reason="retry", until=outcome.retry_at))
        step = StepRow(
            name=name,
            kind="do",
            state="pending",
            attempts=attempt,
            error=row_error,
            config=config,
            wake_at=outcome.retry_at,
        )
        timer = None
        if outcome.delay > 0:
            timer = ("retry", decide.timer_due(outcome.retry_at, lifetime_ends_at=lifetime_ends_at))
        return Commit(events=events, touch=True, new_steps=int(new), step=step, timer=timer)
    assert isinstance(outcome, decide.AttemptFailedFinal)
    events.append(history.attempt_failed(name, attempt, outcome.error))
    events.append(history.step_failed(name, attempt, outcome.message))
    step = StepRow(
        name=name,
        kind="do",
        state="failed",
        attempts=attempt,
        error={**row_error, "message": outcome.message},
        config=config,
    )
    return Commit(events=events, new_steps=int(new), step=step)


def sleep_completed(*, name: str, seconds: int | None, wake_at: dt.datetime, new: bool) -> Commit:
    """A sleep completed: 0 s in place (``new``), or a deadline that has passed."""
    events = [history.sleep_scheduled(name, wake_at, seconds=seconds)] if new else []
    events.append(history.sleep_completed(name))
    step = StepRow(
        name=name,
        kind="sleep",
        state="succeeded",
        config={"seconds": seconds} if new else None,
        wake_at=wake_at,
    )
    return Commit(events=events, new_steps=int(new), step=step)


def suspend(*, suspend: decide.Suspend, name: str, seconds: int | None) -> Commit:
    """After the child is dead: ``sleeping`` with a ``wake`` timer (a first encounter records the
    deadline), or ``running`` with the ``retry`` timer of a delay that is not over yet."""
    events: list[history.Event] = []
    step = None
    if suspend.kind == "sleep":
        status, timer_kind = "sleeping", "wake"
        if suspend.new:
            events.append(history.sleep_scheduled(name, suspend.due, seconds=seconds))
            step = StepRow(
                name=name, kind="sleep", state="pending", config={"seconds": seconds}, wake_at=suspend.due
            )
    else:
        status, timer_kind = "running", "retry"
    events.append(history.suspended(status, reason=suspend.kind, until=suspend.due))
    return Commit(
        events=events,
        status=status,
        touch=True,
        new_steps=int(step is not None),
        step=step,
        timer=(timer_kind, suspend.timer_due),
    )


def _wait_started(name: str, wait: decide.TryWait) -> history.Event:
    return history.wait_started(name, wait.event_type, wait.timeout_at, timeout_seconds=wait.timeout_seconds)


def _wait_row(name: str, wait: decide.TryWait, **values: object) -> StepRow:
    config = {"type": wait.event_type, "timeoutSeconds": wait.timeout_seconds}
    return StepRow(name=name, kind="wait", config=config, timeout_at=wait.timeout_at, **values)  # type: ignore[arg-type]


def wait_consumed(*, name: str, wait: decide.TryWait, sequence: int, payload: dict | None) -> Commit:
    """The wait consumed event ``sequence`` (deleted in the same commit); its payload is the result."""
    events = [_wait_started(name, wait)] if wait.new else []
    events += [history.event_consumed(name, sequence, wait.event_type), history.step_completed(name, "wait")]
    return Commit(
        events=events, new_steps=int(wait.new), step=_wait_row(name, wait, state="succeeded", result=payload)
    )


def wait_timed_out(*, name: str, wait: decide.TryWait) -> Commit:
    """The wait reached its timeout without a matching event: ``wait_timeout`` is recorded."""
    events = [_wait_started(name, wait)] if wait.new else []
    events.append(history.wait_timed_out(name))
    error = {"type": "WaitTimeout", "message": decide.wait_timeout_message(wait.event_type, wait.timeout_seconds)}
    return Commit(
        events=events, new_steps=int(wait.new), step=_wait_row(name, wait, state="failed", error=error)
    )


def wait_suspend(*, name: str, wait: decide.TryWait, arrived: bool, lifetime_ends_at: dt.datetime) -> Commit:
    """After the child is dead: ``waiting`` with the ``timeout`` timer — or, when a matching event
    arrived meanwhile, ``running`` without a timer (the caller dispatches a fresh context)."""
    status = "running" if arrived else "waiting"
    events = [_wait_started(name, wait)] if wait.new else []
    events.append(history.suspended(status, reason="wait", until=wait.timeout_at))
    timer = (
        None if arrived else ("timeout", decide.timer_due(wait.timeout_at, lifetime_ends_at=lifetime_ends_at))
    )
    step = _wait_row(name, wait, state="pending") if wait.new else None
    return Commit(events=events, status=status, touch=True, new_steps=int(wait.new), step=step, timer=timer)
