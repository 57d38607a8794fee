"""The host side of tenant log capture: one :class:`LogCollector` per replay context or cron
delivery (docs/spec/host-features.md#hf-observability; limits ``takohost.domain.tenant_logs``; frames PROTOCOL.md "Logs").

The child is untrusted, so the collector holds every ``log`` frame to the host's own copy of the
context's budget (started before the job is sent, so an honest child, which spends its own bucket
later, never exceeds it), clamps the lines' times into the context's lifetime, and tags each line
itself with the context's epoch and the step and attempt **the host** is running (``step`` /
``attempt``, set by the context around ``run_effect``): a forged frame can neither claim another
step nor write a ``host`` line. Lines are buffered and written in batches of up to
:data:`BATCH_LINES`, at most :data:`FLUSH_SECONDS` after they arrived (the context waits on the
child with :meth:`LogCollector.wait_timeout`), and before the context publishes a status. A write
that fails drops its batch with a warning: logs never fail a context. Instance batches are fenced;
the statements, and running them, are ``models.log_sql``'s (``write_lines``, ``write_marker``).

Over the Space's log quota (``services.quotas``, ``logBytes``) a batch keeps the lines that fit
and drops the rest; the collector counts them in **one** ``host`` line of its own,
``N lines dropped: the Space's log quota``, written whatever the quota and rewritten with the new
count at each later write that drops more (one marker per context or delivery, never one per line).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from models import log_sql
from models.base import utcnow
from services import quotas
from services.telemetry import metrics
from takohost.domain import tenant_logs
from takohost.runtime import protocol
from workers.egress import client as egress_client

log = logging.getLogger(__name__)

#: Lines written per statement at most, and the longest a line waits in the host (seconds).
BATCH_LINES = 500
FLUSH_SECONDS = 1.0
#: Longest host-written line (a failure with its traceback), in characters.
MAX_HOST_LINE_CHARS = 16_384
#: Lines a context may send beyond the host's budget before it counts as a flood (a violation:
#: an honest child stays within its own, identical, later-started budget).
FLOOD_LINES = tenant_logs.BURST_LINES
#: Egress records (connections, refused look-ups) one context keeps as lines of their own; the
#: rest are counted in one summary line (every one is still counted in the metrics).
MAX_EGRESS_LINES = 200


class LogFlood(Exception):
    """The child sent far more log lines than its budget allows, or an empty ``log`` frame: it is
    forging frames (the context treats this as a protocol violation)."""


class LogCollector:
    """Log lines of one context (``instance_pk`` with ``epoch``) or one delivery (``delivery_pk``).

    ``connection()`` returns the psycopg autocommit connection to write on (the context's).
    ``clock`` is monotonic seconds, ``wall`` the aware UTC now.
    """

    def __init__(
        self,
        *,
        connection: Callable[[], psycopg.Connection],
        instance_pk: int | None = None,
        delivery_pk: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        if (instance_pk is None) == (delivery_pk is None):
            raise ValueError("a log collector belongs to exactly one instance or delivery")
        self.instance_pk = instance_pk
        self.delivery_pk = delivery_pk
        self.epoch: int | None = None
        self.step: str | None = None
        #: The context is replaying the steps its history recorded: tenant lines are ``replayed``.
        self.replaying = False
        self._attempt: int | None = None
        #: (clock, step, attempt) each time the running attempt changed: what an egress record
        #: (stamped with the system-wide monotonic clock of its connection's start) is tagged with.
        self._tags: list[tuple[float, str | None, int | None]] = []
        self._egress_lines = 0
        self._egress_unlisted: dict[str, int] = {}
        self._connection = connection
        self._clock = clock
        self._wall = wall
        self._started = wall()
        self._budget = tenant_logs.Budget(now=clock())
        self._lines: list[log_sql.Line] = []
        self._oldest = 0.0
        self._host_dropped = 0
        self._child_dropped = 0
        self._host_dropped_total = 0
        self._log_quota = quotas.limits().log_bytes
        #: Lines dropped over the Space's log quota, and the ``seq`` of the marker line counting them.
        self.quota_dropped = 0
        self._marker_seq: int | None = None
        self.written = 0

    # -- lines in ----------------------------------------------------------------------------
    @property
    def attempt(self) -> int | None:
        """The attempt the host runs now (set after :attr:`step`; ``None`` outside effects)."""
        return self._attempt

    @attempt.setter
    def attempt(self, value: int | None) -> None:
        self._attempt = value
        self._tags.append((self._clock(), self.step, value))

    def egress(self, records: list[dict[str, Any]], *, space: str | None) -> None:
        """Keep the egress proxy's ``records`` (``workers.egress.client``) as ``host`` lines tagged
        with the step and attempt that ran when each connection started, and count them per
        ``space`` in the metrics. Past :data:`MAX_EGRESS_LINES` they are only counted and summed
        up in one line (:meth:`flush`)."""
        now_clock, now_wall = self._clock(), self._wall()
        for record in records:
            outcome = str(record.get("outcome"))
            if record.get("op") == "lookup":
                outcome = "lookup_refused" if outcome == "refused" else "lookup_failed"
            if space is not None:
                metrics.inc("takohost_egress_connections_total", space=space, outcome=outcome)
                for direction in ("sent", "received"):
                    amount = record.get(direction)
                    if type(amount) is int and amount > 0:
                        metrics.inc("takohost_egress_bytes_total", amount, space=space, direction=direction)
            if self._egress_lines >= MAX_EGRESS_LINES:
                self._egress_unlisted[outcome] = self._egress_unlisted.get(outcome, 0) + 1
                continue
            self._egress_lines += 1
            opened = record.get("opened")
            at = float(opened) if isinstance(opened, (int, float)) and not isinstance(opened, bool) else now_clock
            step, attempt = self._tag_at(at)
            wall = now_wall - dt.timedelta(seconds=max(0.0, now_clock - at))
            text = protocol.safe_text(egress_client.describe(record), limit=MAX_HOST_LINE_CHARS)
            self._add(max(wall, self._started), tenant_logs.HOST_STREAM, text, step=step, attempt=attempt)

    def _tag_at(self, at: float) -> tuple[str | None, int | None]:
        found: tuple[str | None, int | None] = (None, None)
        for when, step, attempt in self._tags:
            if when > at:
                break
            found = (step, attempt)
        return found

    def accept(self, message: dict[str, Any]) -> None:
        """Take one ``log`` frame already checked by ``protocol.check_child_message``.

        Raises :class:`LogFlood` for an empty frame or a child far over its budget.
        """
        lines, dropped = message["lines"], message["dropped"]
        if not lines and not dropped:
            raise LogFlood("an empty log frame")
        # Counted until the next write: at most one marker per batch, however often the child says.
        self._child_dropped += dropped
        now = self._clock()
        wall = self._wall()
        floor = self._started - dt.timedelta(seconds=1)
        for t_ms, stream, text in lines:
            if not self._budget.take(len(text), now):
                self._host_dropped += 1
                self._host_dropped_total += 1
                continue
            try:
                at = dt.datetime.fromtimestamp(t_ms / 1000, tz=dt.UTC)
            except (OverflowError, ValueError, OSError):
                at = wall
            self._add(min(max(at, floor), wall), stream, tenant_logs.clip_line(text))
        if self._host_dropped_total > FLOOD_LINES:
            raise LogFlood(f"{self._host_dropped_total} log lines over the budget")

    def host_line(self, text: str, *, step: object = ..., attempt: object = ...) -> None:
        """Add a line of the ``host`` stream (tagged with the running step unless given)."""
        text = protocol.safe_text(text, limit=MAX_HOST_LINE_CHARS).replace("\x00", "\ufffd")
        self._add(
            self._wall(),
            tenant_logs.HOST_STREAM,
            text,
            step=self.step if step is ... else step,  # type: ignore[arg-type]
            attempt=self.attempt if attempt is ... else attempt,  # type: ignore[arg-type]
        )

    def _add(
        self, at: dt.datetime, stream: str, text: str, *, step: str | None = None, attempt: int | None = None
    ) -> None:
        replayed = False
        if stream != tenant_logs.HOST_STREAM:
            step, attempt = self.step, self.attempt
            replayed = self.replaying and attempt is None  # an attempt's output is never a replay
        if not self._lines:
            self._oldest = self._clock()
        self._lines.append((at, step, attempt, stream, text, replayed))

    # -- lines out ---------------------------------------------------------------------------
    def wait_timeout(self, limit: float | None = None) -> float | None:
        """How long the caller may wait for the child before :meth:`flush_due` has work (seconds;
        ``None``: no lines wait), never more than ``limit``."""
        if not self._lines:
            return limit
        due = max(0.0, self._oldest + FLUSH_SECONDS - self._clock())
        return due if limit is None else min(due, limit)

    def flush_due(self) -> None:
        """Write the buffered lines if the oldest waited :data:`FLUSH_SECONDS` or they fill a batch."""
        if self._lines and (
            len(self._lines) >= BATCH_LINES or self._clock() - self._oldest >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        """Write every buffered line now (the host-dropped marker first). Never raises."""
        if self._child_dropped:
            count, self._child_dropped = self._child_dropped, 0
            self.host_line(tenant_logs.dropped_text(count, by="sandbox"))
        if self._host_dropped:
            count, self._host_dropped = self._host_dropped, 0
            self.host_line(tenant_logs.dropped_text(count, by="host"))
        if self._egress_unlisted:
            counts, self._egress_unlisted = self._egress_unlisted, {}
            detail = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            self.host_line(f"egress: {sum(counts.values())} more records not listed ({detail})", step=None, attempt=None)
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        try:
            conn = self._connection()
            for start in range(0, len(lines), BATCH_LINES):
                self._write(conn, lines[start : start + BATCH_LINES])
        except (psycopg.Error, OSError):
            log.warning(
                "tenant log lines dropped: the write failed",
                extra={"instance": self.instance_pk, "delivery": self.delivery_pk, "lines": len(lines)},
                exc_info=True,
            )

    def _write(self, conn: psycopg.Connection, batch: list[log_sql.Line]) -> None:
        if self.instance_pk is not None and self.epoch is None:
            return  # no token: nothing of this context may be stored
        cap = tenant_logs.MAX_STORED_LINES
        skip = max(0, len(batch) - cap)  # lines the cap would remove at once are not written at all
        batch = batch[skip:]
        if self.instance_pk is not None:
            owner: dict[str, Any] = {"instance_pk": self.instance_pk, "epoch": self.epoch}
        else:
            owner = {"delivery_pk": self.delivery_pk}
        inserted, accepted = log_sql.write_lines(
            conn, lines=batch, skip=skip, cap=cap, limit=self._log_quota, **owner
        )
        self.written += inserted
        if accepted and inserted < len(batch):
            self.quota_dropped += len(batch) - inserted
            self._write_marker(conn, owner)

    def _write_marker(self, conn: psycopg.Connection, owner: dict[str, Any]) -> None:
        """Write (or rewrite with the new count) this context's one log-quota marker line."""
        self._marker_seq = log_sql.write_marker(
            conn, message=quotas.dropped_text(self.quota_dropped), at=self._wall(), seq=self._marker_seq, **owner
        )
