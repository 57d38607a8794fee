"""Fire due timers from Postgres (docs/spec/architecture.md#ar-shape "Timers are rows, not broker messages").

Beat calls :func:`fire_due` on every tick. A timer row (``wake`` of a sleep, ``retry`` of a step
delay, ``timeout`` of a wait, all due at the lifetime end at the latest, and the ``lifetime`` row
every instance gets at creation) is deleted and its instance made runnable (status ``running``; a
``queued`` instance stays ``queued``: docs/spec/host-limits.md#hl-decisions) in one transaction, rows taken with ``FOR UPDATE
SKIP LOCKED`` so that two beats never fire one timer twice; the replay contexts are dispatched
only after the commit (docs/spec/house-rules.md#hr-txn). A lost dispatch is recovered by ``sweep.sweep``.
One statement per batch: ``models.instance_sql.FIRE_DUE_TIMERS``.
"""

from __future__ import annotations

import datetime as dt
import logging

from models import db as models_db
from models import instance_sql
from services import dispatch

log = logging.getLogger(__name__)

BATCH = 500


def fire_due(*, now: dt.datetime) -> int:
    """Fire every timer due at or before ``now`` (aware UTC); returns how many replay contexts were
    dispatched. Timers of instances that are no longer runnable (terminal, being stopped) are just
    dropped. Opens its own sessions; safe to run in several processes at once."""
    dispatched = 0
    while True:
        with models_db.session_scope() as session:
            taken, woken = (
                session.connection()
                .exec_driver_sql(instance_sql.FIRE_DUE_TIMERS, {"now": now, "batch": BATCH})
                .one()
            )
        dispatch.run_contexts(list(woken))  # one producer, pipelined writes (a lost one: the sweep)
        dispatched += len(woken)
        if taken < BATCH:
            break
    if dispatched:
        log.info("fired timers", extra={"dispatched": dispatched})
    return dispatched
