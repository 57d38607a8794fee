"""History events written by replay contexts (docs/spec/durable-workflow.md#dw-history; SWF-style audit trail, docs/spec/durable-workflow.md#dw-history), and
the shape the history is served in (:func:`served`).

Each builder returns one :class:`Event` (``eventType`` + ``attributes``); ``store`` numbers and
inserts them in the same statement or transaction as the state change they record. Events written
outside contexts (``InstanceCreated``, ``EventAccepted`` and a direct delivery's ``EventConsumed``
and ``StepCompleted``, ``InstanceTerminated``) come from ``services.instances``,
``instance_events`` and ``instance_stop``, built here too; every one is written by a statement of
``models.instance_sql``. The history is served by
``services.instance_history`` (and, in process, by ``takohost.testing``). Pure: the engine, the
services and the test kit share it. Attributes hold names, numbers and RFC 3339 instants;
documents (results, payloads) stay in the step and inbox rows and are joined in when the history is
served, so the history is the data replay reads, not a copy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

#: docs/spec/durable-workflow.md#dw-history history event types: the vocabulary of ``models.instances.HistoryEvent.event_type``.
EVENT_TYPES = (
    "InstanceCreated",
    "ContextStarted",
    "StepAttemptStarted",
    "StepAttemptFailed",
    "StepCompleted",
    "StepFailed",
    "SleepScheduled",
    "SleepCompleted",
    "WaitStarted",
    "EventAccepted",
    "EventConsumed",
    "WaitTimedOut",
    "ContextSuspended",
    "InstanceCompleted",
    "InstanceErrored",
    "InstanceTerminated",
    # Not in docs/spec/durable-workflow.md#dw-history: a diagnostic of non-determinism (docs/spec/host-features.md#hf-observability; takohost.domain.replay_order).
    "ReplayDiverged",
)


def rfc3339(value: dt.datetime) -> str:
    """``value`` as RFC 3339 UTC with milliseconds: ``2026-11-30T09:46:00.202Z``."""
    return value.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def served(
    *,
    event_id: int,
    event_type: str,
    attributes: dict,
    timestamp: dt.datetime,
    results: dict,
    params: dict | None = None,
) -> dict:
    """One history event as the API serves it (docs/spec/durable-workflow.md#dw-history): ``{"eventId", "eventTimestamp",
    "eventType", "attributes"}``. Documents stay in their rows and are joined in here: a
    ``StepCompleted`` of a step whose recorded result (``results``: step name → result document) is
    not ``None`` carries it as ``attributes["result"]``, and ``InstanceCreated`` the instance's
    ``params`` (when it has any). So the history is the data replay reads, not a copy
    (``takohost.testing.replay`` replays an exported one)."""
    attributes = dict(attributes)
    if event_type == "StepCompleted" and results.get(attributes.get("name")) is not None:
        attributes["result"] = results[attributes["name"]]
    if event_type == "InstanceCreated" and params is not None:
        attributes["params"] = params
    return {
        "eventId": event_id,
        "eventTimestamp": rfc3339(timestamp),
        "eventType": event_type,
        "attributes": attributes,
    }


@dataclasses.dataclass(frozen=True)
class Event:
    """One history event to append; ``timestamp`` ``None`` means "the commit's ``now``"."""

    event_type: str
    attributes: dict
    timestamp: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.event_type not in EVENT_TYPES:
            raise ValueError(f"unknown history event type {self.event_type!r}")


def stamps(events: list[Event], *, now: dt.datetime, after: dt.datetime | None = None) -> list[dt.datetime]:
    """The timestamps to store for ``events`` appended in one commit: each event's own time (or
    ``now``), never earlier than the event before it nor than ``after`` (the newest stored event's
    time), so the history is newest-last in time as well as by ``eventId`` (docs/spec/durable-workflow.md#dw-history)."""
    out: list[dt.datetime] = []
    floor = after
    for event in events:
        stamp = event.timestamp or now
        if floor is not None and stamp < floor:
            stamp = floor
        out.append(stamp)
        floor = stamp
    return out


def _at(value: dt.datetime) -> str:
    return rfc3339(value)


def instance_created(instance_id: str) -> Event:
    """The instance ``instance_id`` was created (event 1; written by ``services.instances``)."""
    return Event("InstanceCreated", {"instanceId": instance_id})


def context_started(version_uid: str | None, epoch: int) -> Event:
    """A replay context took the token ``epoch`` and runs Version ``version_uid`` (the engine writes
    it in ``models.instance_sql.START_CONTEXT``; the test kit with this builder)."""
    return Event("ContextStarted", {"versionUid": version_uid, "epoch": epoch})


def event_accepted(sequence: int, event_type: str) -> Event:
    """Event ``sequence`` of ``event_type`` was accepted (``services.instance_events``)."""
    return Event("EventAccepted", {"sequence": sequence, "type": event_type})


def attempt_started(
    name: str, attempt: int, *, at: dt.datetime, policy: Mapping[str, Any] | None = None
) -> Event:
    """Attempt ``attempt`` (1-based) of ``step.do(name)`` started at ``at`` (written with its outcome)
    under the step's stored retry ``policy`` (``retry.RetryPolicy.to_json``; what replay checks)."""
    attributes: dict = {"name": name, "attempt": attempt}
    if policy is not None:
        attributes["policy"] = policy
    return Event("StepAttemptStarted", attributes, timestamp=at)


def attempt_failed(name: str, attempt: int, error: dict, *, retry_at: dt.datetime | None = None) -> Event:
    """Attempt ``attempt`` failed with ``error`` ``{"type", "message", "traceback"?}``
    (``traceback``: the tenant's own frames, ``takohost.runtime.tracebacks``); ``retryAt`` if
    another follows."""
    failure = {"type": error.get("type", "Error"), "message": error.get("message", "")}
    if error.get("traceback"):
        failure["traceback"] = error["traceback"]
    attributes = {"name": name, "attempt": attempt, "error": failure}
    if retry_at is not None:
        attributes["retryAt"] = _at(retry_at)
    return Event("StepAttemptFailed", attributes)


def step_completed(name: str, kind: str, *, attempt: int | None = None) -> Event:
    """A step of ``kind`` (do/sleep/wait) completed successfully (its result is in the step row)."""
    attributes: dict = {"name": name, "kind": kind}
    if attempt is not None:
        attributes["attempt"] = attempt
    return Event("StepCompleted", attributes)


def step_failed(name: str, attempts: int, message: str) -> Event:
    """``step.do(name)`` failed for good after ``attempts`` attempts (``step_failed``)."""
    return Event("StepFailed", {"name": name, "attempts": attempts, "message": message})


def sleep_scheduled(name: str, wake_at: dt.datetime, *, seconds: int | None = None) -> Event:
    """``step.sleep(name, seconds)``'s deadline, fixed at its first encounter."""
    attributes: dict = {"name": name, "wakeAt": _at(wake_at)}
    if seconds is not None:
        attributes["seconds"] = seconds
    return Event("SleepScheduled", attributes)


def sleep_completed(name: str) -> Event:
    """``step.sleep(name)`` completed."""
    return Event("SleepCompleted", {"name": name})


def wait_started(
    name: str, event_type: str, timeout_at: dt.datetime, *, timeout_seconds: int | None = None
) -> Event:
    """``step.wait_for_event(name)`` started waiting for ``event_type`` (``timeout_seconds``) until
    ``timeout_at``."""
    attributes: dict = {"name": name, "type": event_type, "timeoutAt": _at(timeout_at)}
    if timeout_seconds is not None:
        attributes["timeoutSeconds"] = timeout_seconds
    return Event("WaitStarted", attributes)


def event_consumed(name: str, sequence: int, event_type: str) -> Event:
    """Event ``sequence`` was consumed by the wait ``name`` (atomically with its result)."""
    return Event("EventConsumed", {"name": name, "sequence": sequence, "type": event_type})


def wait_timed_out(name: str) -> Event:
    """The wait ``name`` reached its timeout without a matching event (``wait_timeout``)."""
    return Event("WaitTimedOut", {"name": name})


def suspended(status: str, *, reason: str, until: dt.datetime | None = None) -> Event:
    """The context stopped with its child dead; the instance is now ``status`` (``reason``: sleep,
    wait, retry, restart) until ``until``."""
    attributes: dict = {"status": status, "reason": reason}
    if until is not None:
        attributes["until"] = _at(until)
    return Event("ContextSuspended", attributes)


def completed() -> Event:
    """``run`` returned a document (or nothing): ``complete``."""
    return Event("InstanceCompleted", {})


def errored(error: dict, *, details: dict | None = None) -> Event:
    """The instance ended ``errored`` with ``error`` ``{"reason", "message"?}``; ``details`` adds
    history-only attributes (``type``, ``traceback`` of a ``run_threw``): the instance's ``error``,
    which ``status()`` returns, keeps the spec's exact shape (docs/spec/durable-workflow.md#dw-status)."""
    return Event("InstanceErrored", {**(details or {}), **error})


def terminated(note: Mapping[str, Any] | None = None) -> Event:
    """The instance was terminated (``services.instance_stop``, once its stop is proven);
    ``note``: the request's ``{"reason"?, "by"?}`` (docs/spec/host-features.md#hf-console), ``None``
    or empty for none."""
    return Event("InstanceTerminated", dict(note or {}))


def replay_diverged(attributes: dict) -> Event:
    """This context's replay left the recorded order of steps (``replay_order.Divergence``): a
    diagnostic of non-determinism; nothing else changes."""
    return Event("ReplayDiverged", attributes)
