"""Pure rules of ``sendEvent`` (docs/spec/durable-workflow.md#dw-events sendEvent; docs/spec/http-api.md#api-inst): an event's size against the
queue limits, and whether a waiting wait takes it at once. Shared by the instance services
(``services.instance_events``, which apply them in one locked statement) and the test kit
(``takohost.testing``). No I/O; times are aware UTC datetimes.
"""

from __future__ import annotations

import datetime as dt

from takohost.domain import documents

__all__ = ["MAX_QUEUED_BYTES", "MAX_QUEUED_EVENTS", "delivers_to_wait", "event_size", "queue_full"]

#: docs/spec/durable-workflow.md#dw-events: at most 1024 unconsumed events and 1048576 canonical bytes of {type,payload?}.
MAX_QUEUED_EVENTS = 1024
MAX_QUEUED_BYTES = 1_048_576


def event_size(event_type: str, payload: object, *, has_payload: bool) -> int:
    """The RFC 8785 size in bytes of ``{"type", "payload"?}`` (what the queue limit counts); a
    payload already checked as a document (``DocumentTooLargeError`` counts its size)."""
    stored: dict = {"type": event_type}
    if has_payload:
        stored["payload"] = payload
    try:
        return len(documents.canonical_document(stored, allow_none=False) or b"")
    except documents.DocumentTooLargeError as exc:  # a 1 MiB payload plus its type: never queueable
        return exc.size


def delivers_to_wait(
    *,
    status: str,
    stopping: str | None,
    wait_type: str | None,
    wait_timeout_at: dt.datetime | None,
    event_type: str,
    now: dt.datetime,
) -> bool:
    """True when the instance's pending wait (``wait_type``/``wait_timeout_at``; ``None``: none)
    takes the event at once: the instance is ``waiting`` and not being stopped, the types match
    and the event is accepted at or before the wait's timeout. Such an event bypasses the queue
    limits and is consumed by that wait in the same commit."""
    return (
        status == "waiting"
        and stopping is None
        and wait_type == event_type
        and (wait_timeout_at is None or now <= wait_timeout_at)
    )


def queue_full(*, count: int, total_bytes: int, size: int) -> str | None:
    """The ``event_queue_full`` message when queueing one more event of ``size`` bytes on
    ``count`` events of ``total_bytes`` breaks a limit, else ``None``."""
    if count + 1 > MAX_QUEUED_EVENTS or total_bytes + size > MAX_QUEUED_BYTES:
        return (
            f"the instance holds {count} unconsumed events of {total_bytes} bytes;"
            f" limits are {MAX_QUEUED_EVENTS} events and {MAX_QUEUED_BYTES} bytes"
        )
    return None
