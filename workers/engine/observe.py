"""What one replay context reports about itself: metrics, a trace and log fields (docs/spec/host-features.md#hf-observability items
4–6), kept out of ``context`` so that the context reads as the protocol it is.

A :class:`ContextObserver` belongs to one :class:`~workers.engine.context.ReplayContext`. It binds
the instance's log fields (``services.telemetry.logs``) once the instance is read and the ``epoch``
once the token is taken; opens the context's span in the instance's trace, a span per step
attempt, per sandbox spawn and per commit (``services.telemetry.tracing``); and observes the
context's duration, spawn time, commit latency, timer lateness, fencing rejections, lease losses
and finished instances (``services.telemetry.metrics``). With metrics and tracing off every hook is
a few attribute reads: ``bench/engine_bench.py`` measures the difference.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

from services.telemetry import logs, metrics, tracing
from takohost.domain import decide

log = logging.getLogger("workers.engine.context")

#: ``ContextStore`` methods timed as ``takohost_step_commit_seconds{kind}``.
COMMIT_KINDS = {
    "start": "start",
    "commit_attempt": "attempt",
    "commit_sleep_completed": "sleep",
    "commit_suspend": "suspend",
    "try_wait": "wait",
    "commit_wait_suspend": "wait_suspend",
    "commit_terminal": "terminal",
}


def timer_lateness(steps: dict[str, decide.StepRecord], *, now: dt.datetime) -> tuple[str, float] | None:
    """``(timer kind, seconds late)`` of the pending step whose due time brought this context:
    a passed retry time (``retry``), sleep deadline (``wake``) or wait timeout (``timeout``); ``None``
    when no pending step is due (a new instance, an event, a restart). Pure."""
    best: tuple[str, float] | None = None
    for record in steps.values():
        if record.state != "pending":
            continue
        due, kind = None, ""
        if record.kind in ("do", "sleep") and record.wake_at is not None:
            due, kind = record.wake_at, "retry" if record.kind == "do" else "wake"
        elif record.kind == "wait" and record.timeout_at is not None:
            due, kind = record.timeout_at, "timeout"
        if due is not None and due <= now:
            late = (now - due).total_seconds()
            if best is None or late < best[1]:
                best = (kind, late)
    return best


class ContextObserver:
    """Telemetry of one replay context of instance ``pk`` (see the module doc)."""

    def __init__(self, pk: int) -> None:
        self.pk = pk
        self.started = time.perf_counter()
        self.instance: tuple[str, str] | None = None  # (workflow_uid, instance_id), the trace key
        self.space: str | None = None
        self.span: Any = None
        self.step_span: Any = None
        self.epoch: int | None = None
        self.watched: Any = None  # the heartbeat's Watched: it publishes the running step
        self._scope: contextlib.ExitStack | None = None

    # -- the context's life ------------------------------------------------------------------------
    def begin(self) -> None:
        """The context starts (before the lease): opens this thread's log-field scope."""
        self._scope = contextlib.ExitStack()
        self._scope.enter_context(logs.bound(instance=self.pk))

    def instance_read(self, *, workflow_uid: str, space: str, instance_id: str) -> None:
        """The instance is read and runnable: name it in logs, open the context's span."""
        self.instance, self.space = (workflow_uid, instance_id), space
        fields = {"workflow": workflow_uid, "space": space, "instance_id": instance_id, "instance": self.pk}
        logs.bind(**fields)
        logs.remember_instance(self.pk, fields)
        self.span = tracing.start("takohost.context", instance=self.instance, instance_pk=self.pk)

    def token_taken(self, *, epoch: int | None, version_uid: str | None) -> None:
        """The fencing token is ours."""
        self.epoch = epoch
        logs.bind(epoch=epoch)
        if self.space is not None and self.instance is not None:
            logs.remember_instance(
                self.pk,
                {"workflow": self.instance[0], "space": self.space, "instance_id": self.instance[1],
                 "instance": self.pk, "epoch": epoch},
            )
        if self.span is not None:
            self.span.set_attributes(
                {k: v for k, v in {"takohost.epoch": epoch, "takohost.version": version_uid}.items() if v is not None}
            )

    def steps_loaded(self, steps: dict[str, decide.StepRecord], *, now: dt.datetime) -> None:
        """The steps are read: how late the timer that woke this context fired."""
        if not metrics.enabled() and self.span is None:
            return
        late = timer_lateness(steps, now=now)
        if late is not None:
            metrics.observe("takohost_timer_lateness_seconds", late[1], kind=late[0])
            if self.span is not None:
                self.span.set_attributes({"takohost.woken_by": late[0], "takohost.timer_late_s": late[1]})

    def end(self, outcome: str, *, error: BaseException | None = None) -> None:
        """The context is over with ``outcome`` (``ReplayContext.run``'s word)."""
        seconds = time.perf_counter() - self.started
        metrics.observe("takohost_context_duration_seconds", seconds, outcome=outcome)
        if outcome == "fenced":
            metrics.inc("takohost_fencing_rejections_total")
        elif outcome == "lease_lost":
            metrics.inc("takohost_lease_losses_total", kind="context")
        tracing.end(self.step_span, error=error)
        tracing.end(self.span, error=error, outcome=outcome, seconds=round(seconds, 6))
        self.step_span = self.span = None
        if self.instance is not None:
            log.info("context ended", extra={"outcome": outcome, "seconds": round(seconds, 4)})
        logs.forget_instance(self.pk)
        if self._scope is not None:
            self._scope.close()
            self._scope = None

    # -- inside the context ------------------------------------------------------------------------
    @contextlib.contextmanager
    def spawn(self) -> Iterator[None]:
        """Around taking a sandbox child with the job."""
        started = time.perf_counter()
        with tracing.span("takohost.sandbox.spawn", parent=self.span):
            yield
        metrics.observe("takohost_sandbox_spawn_seconds", time.perf_counter() - started, kind="workflow")

    def attempt_started(self, name: str, attempt: int) -> None:
        """Attempt ``attempt`` of ``step.do(name)`` is sent to the child; the heartbeat publishes it
        for ``…/progress`` while it runs (no write per step)."""
        if self.watched is not None:
            self.watched.step = {"name": name, "attempt": attempt, "since": time.time()}
        if self.span is not None:
            self.step_span = tracing.start(
                "takohost.step.attempt", parent=self.span, step=name, attempt=attempt, kind="do"
            )

    def attempt_done(self, outcome: decide.Outcome) -> None:
        """The attempt's outcome is committed."""
        if self.watched is not None:
            self.watched.step = None
        if self.step_span is not None:
            failed = not isinstance(outcome, decide.AttemptSucceeded)
            tracing.end(
                self.step_span,
                error=getattr(outcome, "message", None) or ("attempt failed" if failed else None),
                outcome=type(outcome).__name__,
            )
            self.step_span = None

    def store(self, store: Any) -> Any:
        """``store`` with its commits timed (and traced as children of the current span); the
        store itself when metrics and tracing are both off."""
        if not metrics.enabled() and self.span is None:
            return store
        return TimedStore(store, self)


class TimedStore:
    """A ``ContextStore`` whose commits (:data:`COMMIT_KINDS`) are timed and traced; every other
    attribute is the store's own."""

    def __init__(self, store: Any, observer: ContextObserver) -> None:
        self._store = store
        self._observer = observer

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        kind = COMMIT_KINDS.get(name)
        if kind is None:
            return value
        observer = self._observer

        def timed(*args: Any, **kwargs: Any) -> Any:
            parent = observer.step_span or observer.span
            started = time.perf_counter()
            with tracing.span("takohost.commit", parent=parent, commit=kind) if parent is not None else _null():
                result = value(*args, **kwargs)
            metrics.observe("takohost_step_commit_seconds", time.perf_counter() - started, kind=kind)
            if kind == "terminal" and observer.instance is not None:
                error = kwargs.get("error") or {}
                metrics.inc(
                    "takohost_instances_finished_total",
                    space=observer.space or "",
                    workflow=observer.instance[0],
                    status=kwargs.get("status", ""),
                    reason=error.get("reason", ""),
                )
            return result

        return timed


@contextlib.contextmanager
def _null() -> Iterator[None]:
    yield
