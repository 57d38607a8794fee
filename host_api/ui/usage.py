"""The console's usage panel (docs/spec/host-features.md#hf-neighbours): the rows of ``services.quotas.usage`` for people,
shown on the Space's overview (the workflows page, ``_usage.html``). Pure.
"""

from __future__ import annotations

from typing import TypedDict

from core import units
from services import quotas

_LABELS = {
    quotas.LIVE_INSTANCES: ("Live instances", "not complete, errored or terminated", False),
    quotas.STORED_EVENTS: ("Stored events", "sent, not yet consumed", False),
    quotas.LOG_BYTES: ("Log bytes", "stored log lines, retained with their instance", True),
    quotas.VERSION_CODE_BYTES: ("Version code", "module sources of live WorkerVersions", True),
    quotas.LAYER_BYTES: ("Package layers", "installed packages", True),
}


class Row(TypedDict):
    """One quota for the panel: texts ready to show, ``percent`` 0–100 (``None``: no limit)."""

    quota: str
    label: str
    what: str
    used: str
    limit: str
    percent: int | None
    full: bool


def size_text(value: int, *, in_bytes: bool) -> str:
    """A count as ``12,345``; bytes as ``core.units.size_text`` (``512 B``, ``1.5 KiB`` …)."""
    return units.size_text(value) if in_bytes else f"{value:,}"


def rows(usage: quotas.Usage) -> list[Row]:
    """The panel's rows, in ``quotas.QUOTAS`` order."""
    out: list[Row] = []
    for quota in quotas.QUOTAS:
        value = usage["quotas"][quota]
        label, what, in_bytes = _LABELS[quota]
        used, limit = value["used"], value["limit"]
        out.append(
            {
                "quota": quota,
                "label": label,
                "what": what,
                "used": size_text(used, in_bytes=in_bytes),
                "limit": size_text(limit, in_bytes=in_bytes) if limit else "no limit",
                "percent": min(100, round(100 * used / limit)) if limit else None,
                "full": bool(limit) and used >= limit,
            }
        )
    return out
