"""What each commit to an instance writes, as data (pure; no I/O): the fenced commits of a replay
context, and ``send_event``'s acceptance of an event (:func:`event_queued`, :func:`event_delivered`).

A :class:`Commit` says: the instance's new status (if any), whether ``updated_at`` moves, how many
new step names it adds, the step row to upsert, the timer row to upsert or delete, and the history
events (docs/spec/durable-workflow.md#dw-history) — in the order they are numbered. The engine's
store (``workers.engine.store``) and the instance services (``services.instance_events``) apply
these plans with the statements of ``models.instance_sql``, and the test kit
(``takohost.testing``) to its in-memory rows, so step semantics exist once (``decide``), their
records once (here) and their SQL once (``models.instance_sql``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from takohost.domain import decide, history


@dataclasses.dataclass(frozen=True)
class Commit:
    """One commit: ``status`` (``None``: unchanged), ``touch`` (move ``updated_at``, which
    the sweep reads; only on status changes, retries and accepted events), ``new_steps`` (names
    added, for the 1024 limit), the ``step`` row and the ``timer`` ``(kind, due_at)`` to upsert,
    the timer kind to delete (``cancel_timer``) and the ``events``, numbered in this order."""

    events: list[history.Event]
    status: str | None = None
    touch: bool = False
    new_steps: int = 0
    step: decide.StepRecord | None = None
    timer: tuple[str, dt.datetime] | None = None
    cancel_timer: str | None = None


def attempt(
    *,
    name: str,
    run: decide.RunEffect,
    started_at: dt.datetime,
    outcome: decide.Outcome,
    lifetime_ends_at: dt.datetime,
) -> Commit:
    """The attempt ``run`` of ``step.do(name)`` finished with ``outcome``: success, a retry (pending,
    next attempt time, a ``retry`` timer unless the delay is 0) or the final failure
    (``step_failed``). ``run`` is ``decide``'s decision to run it (its 1-based number, the
    step's retry policy, stored as ``RetryPolicy.to_json``, and whether the name is new).

    ``StepAttemptStarted`` is written here, with its real start time, in the same commit as the
    attempt's outcome (one commit per step, docs/performance.md); an attempt whose worker died before its
    outcome was committed leaves no record and runs again (at-least-once).
    """
    attempt, new, policy = run.attempt, run.new, run.policy.to_json()
    events = [history.attempt_started(name, attempt, at=started_at, policy=policy)]
    config = {"policy": policy}
    if isinstance(outcome, decide.AttemptSucceeded):
        events.append(history.step_completed(name, "do", attempt=attempt))
        step = decide.StepRecord(
            name=name, kind="do", state="succeeded", attempts=attempt, result=outcome.result, config=config
        )
        return Commit(events=events, new_steps=int(new), step=step)
    # The traceback is history only: the step row keeps what replay needs ({type, message}).
    row_error = {k: v for k, v in getattr(outcome, "error", {}).items() if k != "traceback"}
    if isinstance(outcome, decide.AttemptFailedRetry):
        events.append(history.attempt_failed(name, attempt, outcome.error, retry_at=outcome.retry_at))
        events.append(history.suspended("running", reason="retry", until=outcome.retry_at))
        step = decide.StepRecord(
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
    step = decide.StepRecord(
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
    step = decide.StepRecord(
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
            step = decide.StepRecord(
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


def _wait_row(name: str, wait: decide.TryWait, **values: object) -> decide.StepRecord:
    config = {"type": wait.event_type, "timeoutSeconds": wait.timeout_seconds}
    return decide.StepRecord(name=name, kind="wait", config=config, timeout_at=wait.timeout_at, **values)  # type: ignore[arg-type]


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


def event_queued(*, sequence: int, event_type: str) -> Commit:
    """``send_event`` accepted event ``sequence`` (the instance's per-instance order) of
    ``event_type`` into the inbox (docs/spec/durable-workflow.md#dw-events): ``EventAccepted``;
    ``updated_at`` moves. The inbox row and its counters are the caller's
    (``models.instance_sql.accept_event``)."""
    return Commit(events=[history.event_accepted(sequence, event_type)], touch=True)


def event_delivered(
    *, wait: decide.StepRecord, sequence: int, event_type: str, payload: dict | None
) -> Commit:
    """``send_event``'s direct delivery (docs/spec/durable-workflow.md#dw-step-wait, #dw-events):
    event ``sequence`` of ``event_type`` (``payload``: its document, ``None`` for none) is accepted
    and consumed at once by the pending wait ``wait`` (its stored row) of a ``waiting`` instance.

    ``EventAccepted``, then exactly what a context writes when it consumes that event for the
    same, already started wait (:func:`wait_consumed` with ``decide.pending_wait``:
    ``EventConsumed``, ``StepCompleted`` and the wait's row ``succeeded`` with the payload as its
    result); the instance becomes ``running`` and the wait's ``timeout`` timer is deleted (the
    ``lifetime`` timer stays). Raises ``ValueError`` when ``event_type`` is not the wait's type.
    """
    pending = decide.pending_wait(wait)
    if pending.event_type != event_type:
        raise ValueError(f"the wait {wait.name!r} waits for {pending.event_type!r}, not {event_type!r}")
    consumed = wait_consumed(name=wait.name, wait=pending, sequence=sequence, payload=payload)
    return dataclasses.replace(
        consumed,
        events=[history.event_accepted(sequence, event_type), *consumed.events],
        status="running",
        touch=True,
        cancel_timer="timeout",
    )
