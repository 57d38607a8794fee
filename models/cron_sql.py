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

import dataclasses
import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, cast

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


# -- deliveries (services.cron_runs, workers.cron_tasks) -------------------------------------------


def lock_pending_match_txn(session: orm.Session, *, match_pk: int) -> sa.Row | None:
    """Match ``match_pk``'s ``trigger_uid, space, worker_uid, cron, scheduled_time``, locked
    ``FOR UPDATE``; None when it is gone or no longer ``pending``."""
    return session.execute(
        sa.select(_MATCH.trigger_uid, _MATCH.space, _MATCH.worker_uid, _MATCH.cron, _MATCH.scheduled_time)
        .where(_MATCH.pk == match_pk, _MATCH.state == "pending")
        .with_for_update()
    ).one_or_none()


def close_unfinished_deliveries_txn(
    session: orm.Session, *, match_pk: int, now: dt.datetime, error: str
) -> None:
    """Finish every unfinished delivery of match ``match_pk`` as ``unknown`` with ``error`` at ``now``."""
    session.execute(
        sa.update(_DELIVERY)
        .where(_DELIVERY.match_pk == match_pk, _DELIVERY.finished_at.is_(None))
        .values(finished_at=now, outcome="unknown", error=error)
    )


def match_space_txn(session: orm.Session, *, match_pk: int) -> str | None:
    """The Space of recorded match ``match_pk`` (``None``: no such match), for the delivery's
    fair-share slot (``workers.sandbox.lease.LeaseStore.admit_delivery``)."""
    return session.scalar(sa.select(_MATCH.space).where(_MATCH.pk == match_pk))


def insert_delivery_txn(
    session: orm.Session, *, match_pk: int, worker_id: str, version_uid: str | None, now: dt.datetime
) -> int:
    """Insert the running ``cron_deliveries`` row of ``match_pk`` (by Celery worker process
    ``worker_id``, WorkerVersion ``version_uid``, started at ``now``); returns its pk."""
    return session.scalars(
        sa.insert(_DELIVERY)
        .values(match_pk=match_pk, worker_id=worker_id, version_uid=version_uid, started_at=now)
        .returning(_DELIVERY.pk)
    ).one()


def note_started_txn(
    session: orm.Session, *, delivery_pk: int, workflow_uid: str, instance_id: str, now: dt.datetime
) -> None:
    """Record that delivery ``delivery_pk``'s handler created instance ``instance_id`` of the
    DurableWorkflow ``workflow_uid`` (a ``create`` binding call answered with its id): the
    ledger's ``deliveries[].instances`` (docs/spec/cron-trigger.md#cr-runs)."""
    session.execute(
        sa.insert(_RUN_INSTANCE).values(
            delivery_pk=delivery_pk, workflow_uid=workflow_uid, instance_id=instance_id, created_at=now
        )
    )


def started_instances_txn(session: orm.Session, *, delivery_pks: list[int]) -> dict[int, list[dict]]:
    """``{delivery_pk: [{"workflow": uid, "id": instance id}, …]}`` in creation order, for the
    deliveries in ``delivery_pks`` that created any instance (no query when there are none)."""
    started: dict[int, list[dict]] = {}
    if not delivery_pks:
        return started
    rows = session.execute(
        sa.select(_RUN_INSTANCE.delivery_pk, _RUN_INSTANCE.workflow_uid, _RUN_INSTANCE.instance_id)
        .where(_RUN_INSTANCE.delivery_pk.in_(delivery_pks))
        .order_by(_RUN_INSTANCE.pk)
    )
    for delivery_pk, workflow_uid, instance_id in rows:
        started.setdefault(delivery_pk, []).append({"workflow": workflow_uid, "id": instance_id})
    return started


def running_deliveries_txn(session: orm.Session, *, trigger_uid: str) -> list[tuple[int, int]]:
    """``(match_pk, delivery_pk)`` of every unfinished delivery of ``trigger_uid``'s matches."""
    return [
        (match_pk, delivery_pk)
        for match_pk, delivery_pk in session.execute(
            sa.select(_DELIVERY.match_pk, _DELIVERY.pk)
            .join(_MATCH, _MATCH.pk == _DELIVERY.match_pk)
            .where(_MATCH.trigger_uid == trigger_uid, _DELIVERY.finished_at.is_(None))
        )
    ]


def finish_delivery_txn(
    session: orm.Session, *, delivery_pk: int, outcome: str, error: str | None, now: dt.datetime
) -> bool:
    """Record ``outcome`` (``ok`` or ``failed``, + ``error`` text) at ``now`` and mark the match ``done``.

    A real outcome replaces an ``unknown`` that a sweep guessed meanwhile. A failure is never
    retried (docs/spec/cron-trigger.md: "その失敗だけを理由に同じ一致分の中で再試行しません"). Returns False when the
    delivery row does not exist (or already has a real outcome). Raises ``ValueError`` for
    another ``outcome``.
    """
    if outcome not in ("ok", "failed"):
        raise ValueError(f"outcome must be ok or failed, not {outcome!r}")
    match_pk = session.scalar(
        sa.update(_DELIVERY)
        .where(
            _DELIVERY.pk == delivery_pk,
            sa.or_(_DELIVERY.finished_at.is_(None), _DELIVERY.outcome == "unknown"),
        )
        .values(finished_at=now, outcome=outcome, error=error)
        .returning(_DELIVERY.match_pk)
    )
    if match_pk is None:
        return False
    session.execute(sa.update(_MATCH).where(_MATCH.pk == match_pk).values(state="done"))
    return True


@dataclasses.dataclass(frozen=True)
class PendingMatch:
    """A ``pending`` match as the sweep sees it: its unfinished deliveries and last dispatch."""

    pk: int
    dispatched_at: dt.datetime | None
    unfinished_delivery_pks: tuple[int, ...]


def pending_matches_txn(session: orm.Session, *, limit: int, after_pk: int = 0) -> list[PendingMatch]:
    """Up to ``limit`` pending matches with ``pk > after_pk``, ascending, with unfinished deliveries."""
    rows = session.execute(
        sa.select(_MATCH.pk, _MATCH.dispatched_at)
        .where(_MATCH.state == "pending", _MATCH.pk > after_pk)
        .order_by(_MATCH.pk)
        .limit(limit)
    ).all()
    if not rows:
        return []
    unfinished: dict[int, list[int]] = {}
    for delivery_pk, match_pk in session.execute(
        sa.select(_DELIVERY.pk, _DELIVERY.match_pk).where(
            _DELIVERY.match_pk.in_([pk for pk, _ in rows]), _DELIVERY.finished_at.is_(None)
        )
    ):
        unfinished.setdefault(match_pk, []).append(delivery_pk)
    return [PendingMatch(pk, at, tuple(unfinished.get(pk, ()))) for pk, at in rows]


def mark_vanished_txn(session: orm.Session, *, delivery_pks: list[int], now: dt.datetime, error: str) -> int:
    """Finish still-unfinished deliveries ``delivery_pks`` as ``unknown`` with ``error`` at ``now``;
    returns how many (no statement when there are none)."""
    if not delivery_pks:
        return 0
    result = session.execute(
        sa.update(_DELIVERY)
        .where(_DELIVERY.pk.in_(delivery_pks), _DELIVERY.finished_at.is_(None))
        .values(finished_at=now, outcome="unknown", error=error)
    )
    return cast("sa.CursorResult[Any]", result).rowcount or 0


def note_dispatched_txn(session: orm.Session, *, match_pks: list[int], now: dt.datetime) -> None:
    """Set ``dispatched_at = now`` on still-pending matches ``match_pks`` (none: no statement)."""
    if match_pks:
        session.execute(
            sa.update(_MATCH)
            .where(_MATCH.pk.in_(match_pks), _MATCH.state == "pending")
            .values(dispatched_at=now)
        )
