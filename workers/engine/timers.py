"""Fire due timers from Postgres (docs/spec/architecture.md#ar-shape "Timers are rows, not broker messages").

Beat calls :func:`fire_due` on every tick. A timer row (``wake`` of a sleep, ``retry`` of a step
delay, ``timeout`` of a wait, all due at the lifetime end at the latest, and the ``lifetime`` row
every instance gets at creation) is deleted and its instance made runnable (status ``running``; a
``queued`` instance stays ``queued``: docs/spec/host-limits.md#hl-decisions) in one transaction, rows taken with ``FOR UPDATE
SKIP LOCKED`` so that two beats never fire one timer twice; the replay contexts are dispatched
only after the commit (docs/spec/house-rules.md#hr-txn). A lost dispatch is recovered by ``sweep.sweep``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence

import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from services import dispatch

log = logging.getLogger(__name__)

BATCH = 500

TIMERS = inst_models.Timer.__table__
INSTANCES = inst_models.Instance.__table__


def fire_due(*, now: dt.datetime) -> int:
    """Fire every timer due at or before ``now`` (aware UTC); returns how many replay contexts were
    dispatched. Timers of instances that are no longer runnable (terminal, being stopped) are just
    dropped. Opens its own sessions; safe to run in several processes at once."""
    dispatched = 0
    while True:
        with models_db.session_scope() as session:
            taken = session.execute(
                sa.select(TIMERS.c.pk, TIMERS.c.instance_pk)
                .where(TIMERS.c.due_at <= now)
                .order_by(TIMERS.c.due_at)
                .limit(BATCH)
                .with_for_update(skip_locked=True)
            ).all()
            woken: Sequence[int] = []
            if taken:
                session.execute(sa.delete(TIMERS).where(TIMERS.c.pk.in_([row.pk for row in taken])))
                woken = session.scalars(
                    sa.update(INSTANCES)
                    .where(
                        INSTANCES.c.pk.in_(sorted({row.instance_pk for row in taken})),
                        INSTANCES.c.status.in_(("queued", "sleeping", "waiting", "running")),
                        INSTANCES.c.stopping.is_(None),
                    )
                    .values(
                        status=sa.case((INSTANCES.c.status == "queued", "queued"), else_="running"),
                        updated_at=now,
                    )
                    .returning(INSTANCES.c.pk)
                ).all()
        dispatch.run_contexts(woken)  # one producer, pipelined writes (a lost one: the sweep)
        dispatched += len(woken)
        if len(taken) < BATCH:
            break
    if dispatched:
        log.info("fired timers", extra={"dispatched": dispatched})
    return dispatched
