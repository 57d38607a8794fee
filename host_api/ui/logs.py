"""Tenant logs for the console: a cron run's lines (docs/spec/host-features.md#hf-observability's ``services.tenant_logs``, the same
service as ``GET …/runs/{scheduledTime}/logs``), pages followed up to :data:`MAX_LINES`, and
:func:`line_text` for every panel (an instance's panel reads its newest lines through
``services.console.instance_log_tail_txn``: the newest first, filtered, paged back).

A line is what the API serves: ``{"time", "epoch", "step", "attempt", "stream", "message"}`` for
an instance, ``{"time", "delivery", "stream", "message"}`` for a run. A run with no recorded match
(a skipped one) has no logs: the panel says "no logs available". Any other refusal is shown as
the API would put it (``code: message``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from host_api import schemas
from models.errors import DomainError
from services import tenant_logs
from services.instance_pages import PageRequest

#: Log lines the console reads for one panel.
MAX_LINES = 2000
#: Lines asked per page; a shorter page is the last one (the service always answers a
#: ``nextPageToken``, a cursor to follow later lines with).
PAGE = 500


@dataclasses.dataclass
class Logs:
    """What the logs panel shows: ``available`` False → "no logs available"; ``error`` is the
    service's ``code: message`` when it refused; ``lines`` are the entries as the API gives them;
    ``truncated`` when more than :data:`MAX_LINES` exist; ``removed``: the oldest lines the host
    dropped at its cap (``removedLines``)."""

    available: bool
    lines: list[dict] = dataclasses.field(default_factory=list)
    error: str | None = None
    truncated: bool = False
    removed: int = 0

    @property
    def text(self) -> str:
        """Every line as :func:`line_text` writes it, one per line (rendered in one piece: a
        template loop over thousands of lines would cost more than the page's queries)."""
        return "\n".join(line_text(entry) for entry in self.lines)


def _follow(page: Callable[[str | None], dict]) -> Logs:
    lines: list[dict] = []
    token = None
    removed = 0
    while True:
        body = page(token)
        if token is None:
            removed = int(body.get("removedLines") or 0)
        entries = body.get("logs") or []
        lines.extend(entries)
        token = body.get("nextPageToken")
        if not token or len(entries) < PAGE:
            return Logs(available=True, lines=lines[:MAX_LINES], removed=removed)
        if len(lines) >= MAX_LINES:
            return Logs(available=True, lines=lines[:MAX_LINES], truncated=True, removed=removed)


def run_logs(*, space: str, trigger_uid: str, scheduled_time: str) -> Logs:
    """The log lines of every delivery of the run at ``scheduled_time`` (as the ledger writes it)."""
    try:
        return _follow(
            lambda token: schemas.RunLogPage().dump(
                tenant_logs.run_logs(
                    space=space,
                    trigger_uid=trigger_uid,
                    scheduled_time=scheduled_time,
                    page=PageRequest(token=token, limit=PAGE),
                )
            )
        )
    except DomainError as exc:
        if exc.code == "not_found":  # no recorded match at that time (or no such trigger)
            return Logs(available=False, error=exc.message)
        return Logs(available=True, error=f"{exc.code}: {exc.message}")


def line_text(entry: dict) -> str:
    """One log entry as the panel shows it: ``time [delivery N] [step #attempt] [(replay)] [stream:]
    message`` (``stdout`` is not named; ``stderr`` and the host's own lines are; ``(replay)``: the
    line was printed again while a context replayed recorded steps)."""
    parts = [entry["time"]] if isinstance(entry.get("time"), str) else []
    if entry.get("delivery"):
        parts.append(f"delivery {entry['delivery']}")
    if entry.get("step"):
        parts.append(f"[{entry['step']} #{entry['attempt']}]" if entry.get("attempt") else f"[{entry['step']}]")
    if entry.get("replayed"):
        parts.append("(replay)")
    if entry.get("stream") and entry["stream"] != "stdout":
        parts.append(f"{entry['stream']}:")
    message = entry.get("message")
    parts.append(message if isinstance(message, str) else str(entry))
    return " ".join(parts)
