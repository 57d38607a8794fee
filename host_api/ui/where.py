"""Text for people: instants, and the "where is it" sentence of an instance. Pure.

:func:`where_text` turns the API's ``GET …/instances/{id}/progress`` body (docs/spec/host-features.md#hf-observability:
``activity``, ``step``, ``retryAt``, ``lastError``, ``wakeAt``, ``eventType``, ``timeoutAt``,
``message``) into one sentence for the instance page.
"""

from __future__ import annotations

import datetime as dt


def when_text(value: dt.datetime | str | None) -> str:
    """An instant (aware datetime or RFC 3339 text) as ``2026-12-01 16:20:05.123 UTC``; ``""`` for none."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # not an instant: shown as given
        if parsed.tzinfo is None:
            return parsed.isoformat()
        value = parsed
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def relative_text(value: dt.datetime, *, now: dt.datetime) -> str:
    """``value`` relative to ``now``: ``just now``, ``42 s ago``, ``3 min ago``, ``in 2 h``,
    ``5 d ago`` (the console's script keeps it current; the UTC instant is its tooltip)."""
    seconds = (now - value).total_seconds()
    ahead, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    for limit, unit, size in ((60, "s", 1), (3600, "min", 60), (86400, "h", 3600), (float("inf"), "d", 86400)):
        if seconds < limit:
            amount = f"{int(seconds // size)} {unit}"
            return f"in {amount}" if ahead else f"{amount} ago"
    raise AssertionError("unreachable")


def in_flight(progress: dict) -> dict | None:
    """``{"name", "attempt", "since"}`` (``since`` an aware datetime) of the step attempt a context
    runs now, from the progress body; None when no attempt runs (or its start is unknown)."""
    step = progress.get("step") or {}
    if progress.get("activity") != "running" or not isinstance(step.get("name"), str) or not progress.get("since"):
        return None
    try:
        since = dt.datetime.fromisoformat(str(progress["since"]).replace("Z", "+00:00"))
    except ValueError:
        return None
    return {"name": step["name"], "attempt": step.get("attempt"), "since": since}


def where_text(progress: dict) -> str | None:
    """One sentence saying what a live instance does or waits for; None when there is nothing to
    say (``finished``, or a shape this console does not know)."""
    activity = progress.get("activity")
    step = progress.get("step") or {}
    name = f"“{step['name']}”" if isinstance(step.get("name"), str) else "a step"
    attempt = f" (attempt {step['attempt']})" if step.get("attempt") else ""
    if activity == "retrying":
        text = f"retrying {name}{attempt} at {when_text(progress.get('retryAt'))}"
        error = progress.get("lastError") or {}
        if error:
            text += f"; last error {error.get('type', 'Error')}: {error.get('message', '')}"
        return text
    if activity == "sleeping":
        return f"sleeping in {name} until {when_text(progress.get('wakeAt'))}"
    if activity == "waiting":
        until = f" until {when_text(progress['timeoutAt'])}" if progress.get("timeoutAt") else ""
        return f"waiting in {name} for an event of type “{progress.get('eventType', '')}”{until}"
    if activity == "running":
        return f"running {name}{attempt}" if step else "running worker code"
    if activity in ("queued", "starting", "stopping"):
        message = progress.get("message")
        return f"{activity}: {message}" if message else activity
    return None


def traceback_text(error: dict) -> str | None:
    """A failure's traceback as Python lays it out, from an error ``{"type"?, "message"?,
    "traceback"?}`` whose ``traceback`` is the tenant's frames (``[{"file", "line", "function",
    "source"}]``, innermost last; docs/spec/host-features.md#hf-observability) or already text; None when it has none."""
    frames = error.get("traceback")
    if isinstance(frames, str):
        return frames or None
    if not isinstance(frames, list) or not frames:
        return None
    lines = ["Traceback (the Version's frames, innermost last):"]
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        lines.append(f'  File "{frame.get("file", "?")}", line {frame.get("line", "?")}, in {frame.get("function", "?")}')
        if frame.get("source"):
            lines.append(f"    {frame['source']}")
    kind, message = error.get("type"), error.get("message")
    if kind or message:
        lines.append(f"{kind}: {message}" if kind and message else str(kind or message))
    return "\n".join(lines)


def attempt_errors(events: list[dict]) -> list[dict]:
    """Every failed ``step.do`` attempt in the history ``events`` (oldest first), for the instance
    page's "Attempt errors" list: ``{"name", "attempt", "type", "message", "at"`` (the
    ``StepAttemptFailed`` event's RFC 3339 timestamp), ``"retryAt"`` (the next attempt's time, or
    None), ``"final"`` (the step failed for good with this attempt: a ``StepFailed`` follows) and
    ``"traceback"`` (text, or None)``}``, oldest first."""
    found: list[dict] = []
    for event in events:
        attrs = event.get("attributes") or {}
        kind = event.get("eventType")
        if kind == "StepAttemptFailed" and isinstance(attrs.get("name"), str):
            raw = attrs.get("error")
            error: dict = raw if isinstance(raw, dict) else {}
            found.append({
                "name": attrs["name"], "attempt": attrs.get("attempt"), "type": error.get("type") or "Error",
                "message": error.get("message") or "", "at": event.get("eventTimestamp"),
                "retryAt": attrs.get("retryAt"), "final": False, "traceback": traceback_text(error),
            })
        elif kind == "StepFailed":
            last = next((e for e in reversed(found) if e["name"] == attrs.get("name")), None)
            if last is not None and last["retryAt"] is None:
                last["final"] = True
    return found
