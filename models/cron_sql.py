"""The cron aggregate's statements (docs/spec/cron-trigger.md#cr-runs; docs/spec/architecture.md#ar-shape):
every write of a schedule, a recorded match, a skip, a delivery, a run's link to the instance it
created and the beat's tick is built here, as SQLAlchemy Core statements over ``models.cron`` —
named constants where the statement is the same for every call (beat's executemany forms:
one cached statement, its rows sent in pages), ``_txn`` functions otherwise. Every ``_txn``
function runs in the caller's session and transaction and never commits.

The callers: ``services.cron_schedules`` (the reconciler registers and unregisters a schedule),
``beat.cron_recorder`` (claims due schedules, records matches and skips, moves their boundary),
``services.cron_runs`` and ``workers.cron_tasks`` (a delivery's claim, start, finish and links;
the sweep's vanished deliveries and re-dispatches). The aggregate's own reads — the claim of due
schedules, a match's Space, the unfinished deliveries a DELETE's stop proof waits for, the sweep's
pending matches — are here too. Reads that render a page stay beside their service (the runs
ledger's ``services.cron_runs.list_runs_txn``, the console's ``services.console`` lookups, the run
logs' ``services.tenant_logs``), as the instance aggregate's composed reads do.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import postgresql

from models import cron as cron_models

_SCHEDULE = cron_models.CronSchedule
_MATCH = cron_models.CronMatch
_SKIP = cron_models.CronSkip
_DELIVERY = cron_models.CronDelivery
_RUN_INSTANCE = cron_models.CronRunInstance
_TICK = cron_models.BeatTick

# -- schedules: the reconciler (services.cron_schedules) -------------------------------------------


def lock_schedule_txn(session: orm.Session, *, trigger_uid: str) -> sa.Row | None:
    """The ``cron_schedules`` row of ``trigger_uid`` (every column), locked ``FOR UPDATE``;
    None when the trigger never had a schedule."""
    return session.execute(
        sa.select(*_SCHEDULE.__table__.c).where(_SCHEDULE.trigger_uid == trigger_uid).with_for_update()
    ).one_or_none()


def insert_schedule_txn(
    session: orm.Session,
    *,
    trigger_uid: str,
    space: str,
    worker_uid: str,
    cron: str,
    considered_until: dt.datetime,
    next_due_at: dt.datetime | None,
    now: dt.datetime,
) -> None:
    """Insert the schedule of a new trigger: expression ``cron`` of Worker ``worker_uid``, nothing
    superseded, every match at or before ``considered_until`` decided, due at ``next_due_at``
    (None: never), created and updated at ``now``."""
    session.execute(
        sa.insert(_SCHEDULE).values(
            trigger_uid=trigger_uid,
            space=space,
            worker_uid=worker_uid,
            cron=cron,
            superseded=None,
            considered_until=considered_until,
            next_due_at=next_due_at,
            created_at=now,
            updated_at=now,
        )
    )


def supersede_schedule_txn(
    session: orm.Session,
    *,
    trigger_uid: str,
    cron: str,
    superseded: list[dict],
    next_due_at: dt.datetime,
    now: dt.datetime,
) -> None:
    """Put expression ``cron`` in force on ``trigger_uid``'s schedule after the ``superseded``
    ones (``[{"cron", "until": RFC 3339}]`` ascending, see ``models.cron.CronSchedule``), due at
    ``next_due_at``, updated at ``now``."""
    session.execute(
        sa.update(_SCHEDULE)
        .where(_SCHEDULE.trigger_uid == trigger_uid)
        .values(superseded=superseded, cron=cron, next_due_at=next_due_at, updated_at=now)
    )


def close_schedule_txn(
    session: orm.Session, *, trigger_uid: str, deleted_at: dt.datetime, next_due_at: dt.datetime, now: dt.datetime
) -> None:
    """Mark ``trigger_uid``'s schedule deleted at ``deleted_at`` (no later match is ever recorded),
    due at ``next_due_at``, updated at ``now``."""
    session.execute(
        sa.update(_SCHEDULE)
        .where(_SCHEDULE.trigger_uid == trigger_uid)
        .values(deleted_at=deleted_at, next_due_at=next_due_at, updated_at=now)
    )


# -- recording matches: beat (beat.cron_recorder) --------------------------------------------------

#: Recorded matches, executemany: one row per dict of ``cron_matches`` columns (``trigger_uid``,
#: ``space``, ``worker_uid``, ``cron``, ``scheduled_time``, ``recorded_at``, ``dispatched_at``,
#: ``state``). The unique ``(trigger_uid, scheduled_time)`` drops a match already recorded;
#: returns ``(pk, trigger_uid)`` of the new ones only.
RECORD_MATCHES = (
    postgresql.insert(_MATCH)
    .on_conflict_do_nothing(index_elements=["trigger_uid", "scheduled_time"])
    .returning(_MATCH.pk, _MATCH.trigger_uid)
)
#: Skip rows, executemany (``trigger_uid``, ``cron``, ``scheduled_time``, ``reason``,
#: ``recorded_at``); one already there is kept.
RECORD_SKIPS = postgresql.insert(_SKIP).on_conflict_do_nothing(index_elements=["trigger_uid", "scheduled_time"])
#: The schedules' new boundaries, executemany by primary key (ORM bulk UPDATE): each dict is a
#: ``trigger_uid`` and the columns it sets (``considered_until``, ``next_due_at``, ``superseded``;
#: a parked schedule only ``next_due_at``).
ADVANCE_SCHEDULES = sa.update(_SCHEDULE)


def claim_due_schedules_txn(
    session: orm.Session, *, now: dt.datetime, limit: int, trigger_uids: Collection[str] | None = None
) -> Sequence[sa.Row]:
    """Up to ``limit`` schedules due at ``now`` (``next_due_at <= now``), earliest first, locked
    ``FOR UPDATE SKIP LOCKED`` (a row another beat holds is not claimed twice), as rows of
    ``trigger_uid, space, worker_uid, cron, superseded, considered_until, deleted_at``.
    ``trigger_uids`` restricts the claim to those triggers (tests and tools)."""
    query = sa.select(
        _SCHEDULE.trigger_uid,
        _SCHEDULE.space,
        _SCHEDULE.worker_uid,
        _SCHEDULE.cron,
        _SCHEDULE.superseded,
        _SCHEDULE.considered_until,
        _SCHEDULE.deleted_at,
    ).where(_SCHEDULE.next_due_at <= now)
    if trigger_uids is not None:
        query = query.where(_SCHEDULE.trigger_uid.in_(list(trigger_uids)))
    return session.execute(
        query.order_by(_SCHEDULE.next_due_at).limit(limit).with_for_update(skip_locked=True)
    ).all()


def record_matches_txn(session: orm.Session, matches: list[dict]) -> list[tuple[int, str]]:
    """:data:`RECORD_MATCHES` for ``matches`` (none: no statement); ``[(pk, trigger_uid)]`` of
    those newly recorded."""
    if not matches:
        return []
    return [(pk, trigger) for pk, trigger in session.execute(RECORD_MATCHES, matches)]


def record_skips_txn(session: orm.Session, skips: list[dict]) -> None:
    """:data:`RECORD_SKIPS` for ``skips`` (none: no statement)."""
    if skips:
        session.execute(RECORD_SKIPS, skips)


def advance_schedules_txn(session: orm.Session, updates: list[dict]) -> None:
    """:data:`ADVANCE_SCHEDULES` for ``updates`` (none: no statement)."""
    if updates:
        session.execute(ADVANCE_SCHEDULES, updates)


def note_tick_txn(
    session: orm.Session, *, name: str, now: dt.datetime, beat_id: str | None
) -> dt.datetime | None:
    """Store ``now`` (by ``beat_id``) as beat ``name``'s latest tick unless a later one is stored;
    returns the tick stored before (None: the first ever). Locks the ``beat_ticks`` row."""
    previous = session.scalar(sa.select(_TICK.last_tick_at).where(_TICK.name == name).with_for_update())
    if previous is None:
        session.execute(
            postgresql.insert(_TICK)
            .values(name=name, last_tick_at=now, beat_id=beat_id)
            .on_conflict_do_nothing(index_elements=["name"])
        )
        return None
    if now > previous:
        session.execute(sa.update(_TICK).where(_TICK.name == name).values(last_tick_at=now, beat_id=beat_id))
    return previous


def next_due_at_txn(session: orm.Session) -> dt.datetime | None:
    """The earliest ``next_due_at`` of all schedules (None: nothing scheduled)."""
    return session.scalar(sa.select(sa.func.min(_SCHEDULE.next_due_at)))


