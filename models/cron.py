"""Cron schedules, the match ledger and deliveries (docs/spec/cron-trigger.md#cr-runs; docs/spec/cron-trigger.md).

A match is a row under a unique ``(trigger_uid, scheduled_time)`` constraint, inserted
before its delivery is dispatched, so no restart, second beat or redelivery can create a
second match; a recorded match is delivered until one delivery finishes. A match that was
never recorded (no beat running, or ≥ 60 s late) is a ``cron_skips`` row: listed, never
delivered, never back-filled.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, JSONText, ScalarText, UTCDateTime, utcnow

#: ``CronMatch.state`` values: ``pending`` until one delivery finished ok/failed, then ``done``.
MATCH_STATES = ("pending", "done")
#: ``CronDelivery.outcome`` values (docs/spec/cron-trigger.md#cr-runs); NULL while the delivery runs.
DELIVERY_OUTCOMES = ("ok", "failed", "unknown")


class CronSchedule(Base):
    """The schedule of one WorkerCronTrigger, as beat sees it (one row per trigger UID, kept forever).

    ``considered_until``: beat has decided (recorded or skipped) every match at or before this
    instant — the persisted boundary that survives restarts, updates and deletes (docs/spec/cron-trigger.md
    "解除前後の一致境界をHostが永続化"). ``cron`` is the expression in force after the last entry of
    ``superseded``; ``superseded`` lists earlier expressions still owed a decision, as
    ``[{"cron": "...", "until": "<RFC 3339>"}]`` ascending (an update made at ``until``: the old
    expression owns matches up to and including ``until``, the next one only later ones).
    ``deleted_at`` set: no match after that instant is ever recorded. ``next_due_at`` is the
    earliest instant at which beat has something to decide (NULL: nothing ever again), so a
    tick touches only due rows.
    """

    __tablename__ = "cron_schedules"
    __table_args__ = (sa.Index("ix_cron_schedules_next_due_at", "next_due_at"),)

    trigger_uid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    space: Mapped[str] = mapped_column(sa.String(63))
    worker_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    superseded: Mapped[list | None] = mapped_column(JSONText, nullable=True)
    considered_until: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    next_due_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CronMatch(Base):
    """A recorded match: the Host now owes at least one handler call for it (docs/spec/cron-trigger.md).

    Carries everything a delivery needs (``space``, ``worker_uid``, the ``cron`` that matched)
    so that it is delivered even after its trigger was deleted. ``dispatched_at``: when a
    delivery message was last sent (the sweep re-sends after a while if none started).
    """

    __tablename__ = "cron_matches"
    __table_args__ = (
        sa.UniqueConstraint("trigger_uid", "scheduled_time"),
        sa.Index("ix_cron_matches_state", "state", "recorded_at"),
    )

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    trigger_uid: Mapped[str] = mapped_column(sa.String(36))
    space: Mapped[str] = mapped_column(sa.String(63))
    worker_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    scheduled_time: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")


class CronDelivery(Base):
    """One attempt to call ``scheduled`` for a match; ``outcome`` ok/failed/unknown (NULL: running).

    ``worker_id`` names the Celery worker process (``host:pid``) that holds the delivery's Redis
    lease; ``version_uid`` the WorkerVersion picked by weight at the start (docs/spec/worker-forms.md#wf-deployment).
    """

    __tablename__ = "cron_deliveries"

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    match_pk: Mapped[int] = mapped_column(sa.ForeignKey("cron_matches.pk", ondelete="CASCADE"), index=True)
    worker_id: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
    version_uid: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


class CronRunInstance(Base):
    """A DurableWorkflow instance that a delivery's handler created (``env.NAME.create``).

    Lets the runs ledger and the console link a run to the instances it started. The instance is
    named, not referenced: ``(workflow_uid, instance_id)``, so deleting it leaves a link that finds
    nothing rather than a dangling key; the row goes with its delivery (cascade).
    """

    __tablename__ = "cron_run_instances"

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    delivery_pk: Mapped[int] = mapped_column(
        sa.ForeignKey("cron_deliveries.pk", ondelete="CASCADE"), index=True
    )
    workflow_uid: Mapped[str] = mapped_column(sa.String(36))
    instance_id: Mapped[str] = mapped_column(ScalarText)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class CronSkip(Base):
    """A match that was never recorded (no beat running, or ≥ 60 s late): listed, never delivered.

    For a long gap only the first and last few skipped matches get a row each; one summary
    row (at the first omitted ``scheduled_time``) says how many more were skipped.
    """

    __tablename__ = "cron_skips"
    __table_args__ = (sa.UniqueConstraint("trigger_uid", "scheduled_time"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    trigger_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    scheduled_time: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(sa.String(255))
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class BeatTick(Base):
    """When some beat last ticked (one row per ``name``; ``"beat"`` for the scheduler loop).

    Read before each tick's own write, it tells a skip's reason apart: no beat ticked at or
    after the scheduledTime ("no beat was running") versus a beat that ran but recorded too
    late. Diagnostics only; no decision depends on it.
    """

    __tablename__ = "beat_ticks"

    name: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    last_tick_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    beat_id: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
