"""The one line that flags non-deterministic workflow code (docs/spec/host-features.md#hf-console). Pure.

The engine records a ``ReplayDiverged`` history event when a replay context asks for steps in a
way the recorded history contradicts (``takohost.domain.replay_order``: recorded steps skipped, or
asked out of order). :func:`divergence_text` turns the first one into the sentence ``takohost
status`` and the console's instance page show: ``replay diverged at step 'x': …``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["divergence_text"]


def divergence_text(events: Iterable[dict[str, Any]]) -> str | None:
    """``replay diverged at step 'x': <message>`` for the first ``ReplayDiverged`` of ``events``
    (history events as the API serves them, oldest first; ``at the end of run`` when it was seen
    as ``run`` returned), or None when the history has none."""
    for event in events:
        if event.get("eventType") != "ReplayDiverged":
            continue
        attributes = event.get("attributes") or {}
        name = attributes.get("name")
        where = f"at step {name!r}" if isinstance(name, str) else "at the end of run"
        message = attributes.get("message")
        return f"replay diverged {where}" + (f": {message}" if message else "")
    return None
