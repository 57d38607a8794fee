"""Cron schedules, the match ledger and deliveries (CONTRACT §7; seed 003).

A match is a row under a unique ``(trigger_uid, scheduled_time)`` constraint, inserted
before its delivery is dispatched, so no restart, second beat or redelivery can create a
second match; a recorded match is delivered until one delivery finishes.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, UTCDateTime, utcnow


class CronSchedule(Base):
    """The active schedule of one WorkerCronTrigger, as beat sees it.

    ``considered_until``: beat has decided (recorded or skipped) every match at or before
    this instant — the persisted boundary that survives restarts, updates and deletes.
    ``deleted_at`` set: no match after that instant is ever recorded.
    """

    __tablename__ = "cron_schedules"

    trigger_uid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    space: Mapped[str] = mapped_column(sa.String(63))
    worker_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    considered_until: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CronMatch(Base):
    """A recorded match: the Host now owes at least one handler call for it (seed 003)."""

    __tablename__ = "cron_matches"
    __table_args__ = (
        sa.UniqueConstraint("trigger_uid", "scheduled_time"),
        sa.Index("ix_cron_matches_state", "state", "recorded_at"),
    )

    pk: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    trigger_uid: Mapped[str] = mapped_column(sa.String(36))
    space: Mapped[str] = mapped_column(sa.String(63))
    worker_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    scheduled_time: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")


class CronDelivery(Base):
    """One attempt to call ``scheduled`` for a match; ``outcome`` ok/failed/unknown."""

    __tablename__ = "cron_deliveries"

    pk: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    match_pk: Mapped[int] = mapped_column(sa.ForeignKey("cron_matches.pk", ondelete="CASCADE"), index=True)
    worker_id: Mapped[str | None] = mapped_column(sa.String(128), nullable=True)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


class CronSkip(Base):
    """A match that was never recorded (no beat running, or ≥ 60 s late): listed, never delivered."""

    __tablename__ = "cron_skips"
    __table_args__ = (sa.UniqueConstraint("trigger_uid", "scheduled_time"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer, "sqlite"),
                                    primary_key=True, autoincrement=True)
    trigger_uid: Mapped[str] = mapped_column(sa.String(36))
    cron: Mapped[str] = mapped_column(sa.String(64))
    scheduled_time: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    reason: Mapped[str] = mapped_column(sa.String(255))
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
