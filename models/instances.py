"""Workflow instances, steps, history, inbox and timers (docs/spec/architecture.md#ar-tables "Tables"; docs/spec/worker-forms.md#wf-abi, docs/spec/durable-workflow.md#dw-history).

Postgres is the truth: replay reads ``steps`` by name, the history is written in the same
transaction as the state it records, and timers are rows fired by beat.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, JSONText, ScalarText, UTCDateTime, utcnow
from takohost.domain import history as domain_history

#: The seven statuses of docs/spec/durable-workflow.md#dw-status, exactly.
STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")
TERMINAL_STATUSES = ("complete", "errored", "terminated")
#: The five failure reasons of docs/spec/durable-workflow.md#dw-status, exactly.
FAILURE_REASONS = (
    "run_threw",
    "step_failed",
    "step_limit_exceeded",
    "lifetime_exceeded",
    "step_definition_mismatch",
)


class Instance(Base):
    """One instance id of one DurableWorkflow UID.

    ``epoch`` is the fencing token: bumped when a replay context starts and whenever the
    owner is fenced (terminate, delete); every commit of a context is conditional on it.
    ``stopping`` is set (``terminate``/``delete``) while the host proves the stop of a running
    context; it is not a public status. ``params`` is SQL NULL when the instance has none.
    """

    __tablename__ = "instances"
    __table_args__ = (
        sa.UniqueConstraint("workflow_uid", "instance_id"),
        sa.Index("ix_instances_status", "status", "updated_at"),
        sa.Index("ix_instances_workflow_created", "workflow_uid", "created_at", "pk"),
        # The list's keyset pages (``pk > :after ORDER BY pk``), with and without a status filter.
        sa.Index("ix_instances_workflow_pk", "workflow_uid", "pk"),
        sa.Index("ix_instances_workflow_status_pk", "workflow_uid", "status", "pk"),
    )

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    workflow_uid: Mapped[str] = mapped_column(sa.String(36))
    space: Mapped[str] = mapped_column(sa.String(63))
    instance_id: Mapped[str] = mapped_column(ScalarText)
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    epoch: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    params: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    output: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    error: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    version_uid: Mapped[str | None] = mapped_column(sa.String(36), nullable=True)
    stopping: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    step_count: Mapped[int] = mapped_column(sa.Integer, default=0)
    next_event_id: Mapped[int] = mapped_column(sa.Integer, default=1)
    next_sequence: Mapped[int] = mapped_column(sa.BigInteger, default=1)
    inbox_count: Mapped[int] = mapped_column(sa.Integer, default=0)
    inbox_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    #: Bytes of the instance's stored log lines (``models.usage``: counted toward the Space's quota).
    log_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    lifetime_ends_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    terminal_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Timestamp of the newest history event: every append stamps its events
    #: ``max(now, last_event_at)`` under the row lock, so the history is newest-last in time too.
    last_event_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class InstanceCount(Base):
    """How many instances of ``workflow_uid`` have ``status``, as of the last compaction
    (``models.status_counts``: the count now is this plus the pending ``InstanceCountDelta``
    rows). Never read alone."""

    __tablename__ = "instance_counts"

    workflow_uid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    status: Mapped[str] = mapped_column(sa.String(16), primary_key=True)
    n: Mapped[int] = mapped_column(sa.BigInteger())


class InstanceCountDelta(Base):
    """One change of the instance counts not yet folded into ``InstanceCount``: ``delta``
    instances more (or fewer) of ``workflow_uid`` with ``status``. Appended by triggers on
    ``instances`` (migration ``0010_instance_counts``) in the writer's transaction, so a count is
    exact and no writer waits for another's counter row; folded by ``models.status_counts.compact``."""

    __tablename__ = "instance_count_deltas"
    __table_args__ = (sa.Index("ix_instance_count_deltas_workflow_uid", "workflow_uid"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    workflow_uid: Mapped[str] = mapped_column(sa.String(36))
    status: Mapped[str] = mapped_column(sa.String(16))
    delta: Mapped[int] = mapped_column(sa.BigInteger())


class Step(Base):
    """One durable step of an instance, keyed by name (docs/spec/durable-workflow.md#dw-step: replay is by step name).

    ``kind`` ∈ do/sleep/wait; ``state`` ∈ pending/succeeded/failed; ``config`` keeps the
    first stored settings (retry policy, seconds, wait type/timeout); ``result`` is SQL NULL
    for "no document"; ``wake_at``/``timeout_at`` are the fixed deadlines.
    """

    __tablename__ = "steps"
    __table_args__ = (sa.UniqueConstraint("instance_pk", "name"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    instance_pk: Mapped[int] = mapped_column(sa.ForeignKey("instances.pk", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(ScalarText)
    kind: Mapped[str] = mapped_column(sa.String(8))
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    result: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    error: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    config: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    wake_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    timeout_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


#: docs/spec/durable-workflow.md#dw-history history event types (defined with their builders in ``takohost.domain.history``).
HISTORY_EVENT_TYPES = domain_history.EVENT_TYPES


class HistoryEvent(Base):
    """One SWF-style history event (docs/spec/durable-workflow.md#dw-history); ``event_id`` counts 1, 2, 3 … per instance."""

    __tablename__ = "history_events"
    __table_args__ = (sa.UniqueConstraint("instance_pk", "event_id"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    instance_pk: Mapped[int] = mapped_column(sa.ForeignKey("instances.pk", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(sa.Integer)
    event_type: Mapped[str] = mapped_column(sa.String(32))
    attributes: Mapped[dict] = mapped_column(JSONText)
    event_timestamp: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class InboxEvent(Base):
    """An accepted, not yet consumed event (docs/spec/durable-workflow.md#dw-events; docs/spec/http-api.md#api-inst inbox).

    ``canonical_bytes`` is the RFC 8785 size of the stored ``{type, payload?}`` that counts
    toward the 1 MiB queue limit.
    """

    __tablename__ = "inbox_events"
    __table_args__ = (
        sa.UniqueConstraint("instance_pk", "sequence"),
        sa.Index("ix_inbox_events_instance_type", "instance_pk", "type", "sequence"),
    )

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    instance_pk: Mapped[int] = mapped_column(sa.ForeignKey("instances.pk", ondelete="CASCADE"))
    sequence: Mapped[int] = mapped_column(sa.BigInteger)
    type: Mapped[str] = mapped_column(ScalarText)
    payload: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    canonical_bytes: Mapped[int] = mapped_column(sa.Integer)
    accepted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Timer(Base):
    """A durable timer fired by beat: ``kind`` ∈ wake (sleep), retry, timeout (wait), lifetime
    (written at creation, due at ``lifetime_ends_at``: ends the instance ``lifetime_exceeded``
    whatever it is doing)."""

    __tablename__ = "timers"
    __table_args__ = (sa.UniqueConstraint("instance_pk", "kind"),)

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    instance_pk: Mapped[int] = mapped_column(sa.ForeignKey("instances.pk", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(sa.String(16))
    due_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class WorkflowClosure(Base):
    """A DurableWorkflow UID closed for new create/event/wake because its DELETE is purging it.

    docs/spec/durable-workflow.md#dw-delete: the host closes new creates, events and wakes, fences the running
    owner, proves the stop, then purges. The row is written by ``services.instance_stop.purge_workflow`` under
    an exclusive advisory lock that ``create`` takes shared, so no create can slip in after the close; it is
    kept after the purge (UIDs are never reused).
    """

    __tablename__ = "workflow_closures"

    workflow_uid: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    closed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
