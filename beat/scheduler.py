"""``HostScheduler``: the custom Celery beat scheduler that ``takohost beat`` runs (docs/spec/architecture.md#ar-beat "Beat").

Unlike Celery's own schedulers it keeps no schedule of Celery entries: Postgres is the
schedule. Each tick (about once a second, and right at the next cron match) runs the beat
duties — record due cron matches, fire due timers — and, every ``sweep_interval_s``, the
sweeps that re-dispatch what a lost message or a dead process left behind. Each duty is a
function ``fn(*, now: datetime) -> int`` opening its own sessions; a duty that raises is logged
as an error on every tick and never stops the beat. Two beats at once are harmless by construction (row
locks with ``SKIP LOCKED``, unique constraints), so no leader election is needed.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable

from celery import beat as celery_beat

from beat import cron_recorder
from core import config
from models import db as models_db
from models.base import utcnow
from services import operations
from workers import cron_tasks
from workers.engine import sweep, timers
from workers.packages import sweep as package_sweep

log = logging.getLogger(__name__)

#: A beat duty: ``fn(*, now)`` → how many things it did.
Duty = Callable[..., int]

#: Duties run on every tick, in order.
TICK_DUTIES: tuple[Duty, ...] = (cron_recorder.record_due, timers.fire_due)
#: Duties run every ``Settings.sweep_interval_s`` seconds.
SWEEP_DUTIES: tuple[Duty, ...] = (sweep.sweep, operations.sweep, cron_tasks.sweep, package_sweep.sweep)
#: Longest sleep between ticks, in seconds.
MAX_TICK_INTERVAL_S = 1.0
#: Wake this long after a cron match instant, in seconds (so ``now`` is past it).
WAKE_AFTER_MATCH_S = 0.002


def duty_name(duty: Duty) -> str:
    """``module.function`` of ``duty``, for log lines."""
    return f"{duty.__module__}.{duty.__qualname__}"


def run_duty(duty: Duty, *, now: dt.datetime) -> int | None:
    """Run one duty; returns its count, or None after logging an error (never raises)."""
    try:
        return duty(now=now)
    except Exception:
        log.exception("beat duty %s failed", duty_name(duty))
        return None


class HostScheduler(celery_beat.Scheduler):
    """The ``celery.beat.Scheduler`` subclass of ``takohost beat`` (``beat.scheduler:HostScheduler``).

    ``tick()`` runs the duties and returns the seconds to sleep: until the next whole second or
    the next cron match, whichever is first (at most ``MAX_TICK_INTERVAL_S``). ``setup_schedule``
    installs no Celery entries; ``sync`` has nothing to persist (every duty commits its own work).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        # Celery may build a lazy instance for introspection: nothing here touches I/O.
        self.settings = config.load_settings()
        self.beat_id = f"{socket.gethostname()}:{os.getpid()}"
        self._next_sweep = 0.0
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        """No Celery entries: Postgres is the schedule."""
        self.data: dict[str, object] = {}
        log.info("takohost beat scheduler started", extra={"beat": self.beat_id})

    def tick(self, *args: object, **kwargs: object) -> float:
        """Run the duties once; return the seconds until the next tick."""
        now = utcnow()
        for duty in TICK_DUTIES:
            run_duty(duty, now=now)
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.settings.sweep_interval_s
            for duty in SWEEP_DUTIES:
                run_duty(duty, now=utcnow())
        return self._sleep_seconds()

    def _sleep_seconds(self) -> float:
        now = utcnow()
        sleep = MAX_TICK_INTERVAL_S - now.microsecond / 1_000_000 + WAKE_AFTER_MATCH_S
        try:
            due = cron_recorder.next_due_at(url=self.settings.database_url)
        except Exception:
            log.exception("reading the next cron match failed")
            due = None
        if due is not None:
            sleep = min(sleep, (due - now).total_seconds() + WAKE_AFTER_MATCH_S)
        return max(0.0, min(sleep, MAX_TICK_INTERVAL_S))

    def sync(self) -> None:
        """Nothing to persist: every duty commits its own work."""

    def close(self) -> None:
        """Release the broker producer and this process's database engines."""
        try:
            super().close()
        finally:
            models_db.dispose_all()

    @property
    def info(self) -> str:
        return f"takohost HostScheduler ({self.beat_id}; sweeps every {self.settings.sweep_interval_s} s)"
