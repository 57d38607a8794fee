"""Fire due timers from Postgres (CONTRACT §1 "Timers are rows, not broker messages").

Beat calls :func:`fire_due` on every tick. A timer row (``wake`` of a sleep, ``retry`` of a step
delay, ``timeout`` of a wait, all due at the lifetime end at the latest) is deleted and its
instance made runnable (status ``running``) in one transaction, rows taken with ``FOR UPDATE
SKIP LOCKED`` so that two beats never fire one timer twice; the replay contexts are dispatched
only after the commit (STYLE §5). A lost dispatch is recovered by ``sweep.sweep``.
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa

from models import db as models_db
from workers import dispatch

log = logging.getLogger(__name__)

BATCH = 500

_TAKE = sa.text("""
DELETE FROM timers WHERE pk IN (
  SELECT pk FROM timers WHERE due_at <= :now ORDER BY due_at LIMIT :batch FOR UPDATE SKIP LOCKED
) RETURNING instance_pk
""")
_WAKE = sa.text("""
UPDATE instances SET status = 'running', updated_at = :now
WHERE pk = ANY(:pks) AND status IN ('sleeping', 'waiting', 'running') AND stopping IS NULL
RETURNING pk
""")


def fire_due(*, now: dt.datetime) -> int:
    """Fire every timer due at or before ``now`` (aware UTC); returns how many replay contexts were
    dispatched. Timers of instances that are no longer runnable (terminal, being stopped) are just
    dropped. Opens its own sessions; safe to run in several processes at once."""
    dispatched = 0
    while True:
        with models_db.session_scope() as session:
            taken = session.scalars(_TAKE, {"now": now, "batch": BATCH}).all()
            woken = session.scalars(_WAKE, {"now": now, "pks": sorted(set(taken))}).all() if taken else []
        for pk in woken:
            dispatch.run_context(pk)
        dispatched += len(woken)
        if len(taken) < BATCH:
            break
    if dispatched:
        log.info("fired timers", extra={"dispatched": dispatched})
    return dispatched
