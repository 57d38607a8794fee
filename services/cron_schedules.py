"""Register, update and unregister a WorkerCronTrigger's schedule (docs/spec/cron-trigger.md "CRUD、拒否、再起動").

Called by the Operation reconciler inside its transaction (``_txn``: never commits); the
statements are ``models.cron_sql``'s. Beat reads the ``cron_schedules`` rows written here
(``beat.cron_recorder``) and decides the matches; nothing here records a match, so a create or
an update never causes an immediate call (CB-05).
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import orm

from core import cron
from models import cron_sql
from models import resources as res_models

log = logging.getLogger(__name__)


def observed_for(expression: str, *, now: dt.datetime) -> dict:
    """The trigger's ``observed`` dict once its schedule is registered (docs/spec/cron-trigger.md "観測", API-05).

    ``{"cron", "timezone": "UTC", "scheduleReady": True, "nextMatchAt"?}``; ``nextMatchAt`` is
    the first match strictly after ``now`` as RFC 3339 UTC ``…Z``, absent (not null) when the
    expression can never fire (CR-05, CR-06). Raises ``cron.CronSyntaxError`` for an invalid
    expression (the reconciler validated it before side effects).
    """
    observed: dict = {"cron": expression, "timezone": "UTC", "scheduleReady": True}
    upcoming = cron.next_match(cron.parse(expression), now)
    if upcoming is not None:
        observed["nextMatchAt"] = cron.format_rfc3339(upcoming)
    return observed


def register_schedule_txn(session: orm.Session, *, trigger: res_models.Resource, now: dt.datetime) -> dict:
    """Create or update the schedule of ``trigger`` (a WorkerCronTrigger Resource); returns ``observed``.

    Create: the schedule considers matches strictly after ``now`` only. Update with another
    expression: the old one keeps the matches up to and including ``now`` (beat still decides
    those), the new one owns only later matches — never both at once, never an immediate call
    (docs/spec/cron-trigger.md "新しい式の将来の一致だけに適用", CB-05). The same expression again (a retried
    reconcile, or a PUT with an identical spec) changes nothing. Locks the schedule row.
    ``trigger.spec`` must already be valid (``{"worker": {"resourceUid"}, "cron"}``).
    """
    expression = trigger.spec["cron"]
    observed = observed_for(expression, now=now)
    row = cron_sql.lock_schedule_txn(session, trigger_uid=trigger.uid)
    if row is None:
        cron_sql.insert_schedule_txn(
            session,
            trigger_uid=trigger.uid,
            space=trigger.space,
            worker_uid=trigger.spec["worker"]["resourceUid"],
            cron=expression,
            considered_until=now,
            next_due_at=cron.next_match(cron.parse(expression), now),
            now=now,
        )
        return observed
    if row.deleted_at is not None:
        # A deleted trigger's UID is never reused (docs/spec/http-api.md#api-res); never revive its schedule.
        log.error("register on a deleted schedule ignored", extra={"trigger": trigger.uid})
        return observed
    if row.cron != expression:
        # The old expression owns every match up to and including `now`: close its segment.
        until = max(now, row.considered_until)
        cron_sql.supersede_schedule_txn(
            session,
            trigger_uid=trigger.uid,
            cron=expression,
            superseded=[*(row.superseded or []), {"cron": row.cron, "until": until.isoformat()}],
            next_due_at=_earliest(row.next_due_at, until),
            now=now,
        )
    return observed


def unregister_schedule_txn(session: orm.Session, *, trigger_uid: str, now: dt.datetime) -> None:
    """Remove the schedule of ``trigger_uid`` and persist the boundary (docs/spec/cron-trigger.md#cr-crud "削除").

    No match after ``now`` is ever recorded; matches up to ``now`` are still decided by beat,
    and recorded ones are still delivered. Idempotent: a second call keeps the first boundary.
    Locks the schedule row; does nothing when the trigger never had one.
    """
    row = cron_sql.lock_schedule_txn(session, trigger_uid=trigger_uid)
    if row is None or row.deleted_at is not None:
        return
    deleted_at = max(now, row.considered_until)
    cron_sql.close_schedule_txn(
        session,
        trigger_uid=trigger_uid,
        deleted_at=deleted_at,
        next_due_at=_earliest(row.next_due_at, deleted_at),
        now=now,
    )


def _earliest(a: dt.datetime | None, b: dt.datetime) -> dt.datetime:
    return b if a is None else min(a, b)
