"""Events sent to DurableWorkflow instances: sendEvent and the inbox (docs/spec/http-api.md#api-inst, bindings §4.5).

docs/spec/durable-workflow.md#dw-events: durable acceptance in per-instance order (``sequence``), at most
``MAX_QUEUED_EVENTS`` unconsumed events and ``MAX_QUEUED_BYTES`` canonical bytes of
``{type, payload?}`` per instance (``event_queue_full``), and direct delivery to a waiting matching
wait (which bypasses those limits, is consumed by that wait in the same commit and wakes the
instance); an ``Idempotency-Key`` replays the first
answer. :func:`inbox` lists the accepted, unconsumed events.

Every function opens its own session and commits before it dispatches (docs/spec/house-rules.md#hr-txn). The
instance row is locked ``FOR UPDATE`` and the event accepted in one statement, whose records
(``EventAccepted``; for a direct delivery ``EventConsumed``, ``StepCompleted`` and the wait's row)
are the engine's own (``takohost.domain.commits``, ``models.instance_sql.accept_event``). Domain failures are
``models.errors.DomainError`` with docs/spec/http-api.md#api-errors codes. Times are aware UTC datetimes. This
module must not import ``workers.engine`` (the API imports it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import psycopg.rows
import sqlalchemy as sa
from sqlalchemy import orm

from models import db as models_db
from models import instance_sql
from models import instances as inst_models
from models.base import utcnow
from models.errors import DomainError
from services import dispatch, instance_common, quotas
from services import idempotency as idempotency_service
from services.telemetry import lifecycle
from takohost.domain import commits, decide
from takohost.domain import inbox as inbox_rules

#: docs/spec/durable-workflow.md#dw-events limits (``takohost.domain.inbox``).
MAX_QUEUED_EVENTS = inbox_rules.MAX_QUEUED_EVENTS
MAX_QUEUED_BYTES = inbox_rules.MAX_QUEUED_BYTES


def send_event(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str,
    event_type: str,
    payload: Any = instance_common.ABSENT,
    idempotency: idempotency_service.KeyedRequest | None = None,
    now: dt.datetime | None = None,
) -> None:
    """Durably accept an event for an instance in per-instance order (docs/spec/durable-workflow.md#dw-events sendEvent).

    ``payload`` ``ABSENT`` → no payload. ``idempotency``: the request's Idempotency-Key and fingerprint: the same
    key and request replay the first answer without queueing twice. An event that a waiting
    matching wait can take (accepted at or before its timeout) bypasses the queue limits and is
    consumed by that wait in the same commit — it is the oldest matching event, since a waiting wait
    left none in the inbox — and wakes the instance (status ``running``, the timeout timer
    cancelled, a context dispatched after commit that replays the wait from its record). The
    answer is ``202 {}`` (a replayed key's stored answer is that same ``{}``).

    Raises DomainError: ``invalid_request`` (bad type), ``invalid_params`` / ``document_too_large``
    (payload), ``not_found`` (also while the DurableWorkflow is being deleted), ``unknown_instance``,
    ``instance_terminal``, ``event_queue_full``, ``idempotency_key_reused``, ``quota_exceeded``
    (the Space's ``storedEvents`` quota is reached; a direct delivery is never refused).
    """
    now = now or utcnow()
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    event_type = instance_common.id_or_error(event_type, what="event type")
    instance_common.document_or_error(payload, what="payload")
    size = inbox_rules.event_size(event_type, payload, has_payload=payload is not instance_common.ABSENT)
    with models_db.session_scope() as session:
        if idempotency is not None:
            instance_common.workflow_txn(session, space=space, workflow_uid=workflow_uid)
            claim = idempotency_service.claim_txn(
                session, space=space, request=idempotency, operation_id=None, now=now
            )
            if not claim.new:
                return None
            idempotency_service.store_response_txn(
                session, space=space, key=idempotency.key, status=202, body={}
            )
        row, wait = _lock_instance_txn(session, space=space, workflow_uid=workflow_uid, instance_id=instance_id)
        if row is None:
            instance_common.workflow_txn(session, space=space, workflow_uid=workflow_uid)  # not_found first
            raise DomainError("unknown_instance", "no such instance (unknown, or no longer retained)")
        if row.closed:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if row.status in inst_models.TERMINAL_STATUSES:
            raise DomainError("instance_terminal", f"the instance is {row.status}; it takes no more events")
        direct = inbox_rules.delivers_to_wait(
            status=row.status,
            stopping=row.stopping,
            wait_type=None if wait is None else (wait.config or {}).get("type"),
            wait_timeout_at=None if wait is None else wait.timeout_at,
            event_type=event_type,
            now=now,
        )
        full = None if direct else inbox_rules.queue_full(count=row.inbox_count, total_bytes=row.inbox_bytes, size=size)
        if full is not None:
            raise DomainError("event_queue_full", full)
        if not direct:
            quotas.check_stored_events_txn(session, space=space)
        _accept_event_txn(
            session,
            row=row,
            event_type=event_type,
            payload=None if payload is instance_common.ABSENT else payload,
            size=size,
            now=now,
            wait=_wait_record(wait) if direct else None,
        )
    if direct:
        dispatch.run_context(row.pk, space=space)
    lifecycle.event_sent(
        space=space, workflow_uid=workflow_uid, instance_id=instance_id, event_type=event_type, woke=direct, at=now
    )


def _lock_instance_txn(
    session: orm.Session, *, space: str, workflow_uid: str, instance_id: str
) -> tuple[Any, Any]:
    """``(row, wait)`` in one round trip (a psycopg pipeline, with the transaction's ``BEGIN``
    when it is the first): the instance row locked ``FOR UPDATE`` with its closure flag
    (``None``: unknown instance, or a workflow that is not a live DurableWorkflow of ``space``),
    then its pending wait ``(name, config, timeout_at)`` read by a statement of its own, whose
    snapshot is taken after the lock was granted (``instance_sql.SELECT_PENDING_WAIT``; ``name``
    is UTF-8 bytes; only meaningful when ``row`` is not ``None``)."""
    connection = session.connection().connection.driver_connection
    assert connection is not None  # a checked-out psycopg connection
    params = {"uid": workflow_uid, "space": space, "instance_id": instance_id.encode("utf-8")}
    with (
        connection.cursor(row_factory=psycopg.rows.namedtuple_row) as locked,
        connection.cursor(row_factory=psycopg.rows.namedtuple_row) as pending,
    ):
        with connection.pipeline():
            locked.execute(instance_sql.LOCK_INSTANCE, params)
            pending.execute(instance_sql.SELECT_PENDING_WAIT, params)
        return locked.fetchone(), pending.fetchone()


def _wait_record(wait: Any) -> decide.StepRecord:
    """The pending wait's row (``SELECT_PENDING_WAIT``'s ``(name, config, timeout_at)``)."""
    return decide.StepRecord(
        name=bytes(wait.name).decode("utf-8"),
        kind="wait",
        state="pending",
        config=wait.config,
        timeout_at=wait.timeout_at,
    )


def _accept_event_txn(
    session: orm.Session,
    *,
    row: Any,
    event_type: str,
    payload: Any,
    size: int,
    now: dt.datetime,
    wait: decide.StepRecord | None,
) -> None:
    """Accept event ``row.next_sequence`` (``payload``: a document or ``None``; ``size``: its
    canonical bytes) in one statement (``instance_sql.accept_event``) on the transaction's
    connection, whose instance row is locked: into the inbox with ``EventAccepted``
    (``commits.event_queued``) or, with ``wait`` (the waiting instance's pending matching wait),
    consumed by that wait at once and the instance woken (``commits.event_delivered``: the records
    a context writes when it consumes an event)."""
    sequence = row.next_sequence
    if wait is None:
        commit = commits.event_queued(sequence=sequence, event_type=event_type)
        inbox_row: tuple[str, Any, int] | None = (event_type, payload, size)
    else:
        commit = commits.event_delivered(wait=wait, sequence=sequence, event_type=event_type, payload=payload)
        inbox_row = None
    sql, params = instance_sql.accept_event(commit, pk=row.pk, sequence=sequence, now=now, inbox=inbox_row)
    connection = session.connection().connection.driver_connection
    assert connection is not None  # a checked-out psycopg connection
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if cursor.fetchone() is None:
            raise RuntimeError(f"instance {row.pk}: next_sequence moved under the row lock")


@dataclasses.dataclass(frozen=True)
class QueuedEvent:
    """An accepted, unconsumed event: its per-instance ``sequence``, ``type``, ``payload`` (a
    document; ``None``: sent without one) and acceptance time (aware UTC)."""

    sequence: int
    type: str
    payload: dict | None
    accepted_at: dt.datetime


def inbox(*, space: str, workflow_uid: str, instance_id: str) -> list[QueuedEvent]:
    """The accepted, unconsumed events of instance ``instance_id`` in acceptance order (the
    inspectable inbox, docs/spec/http-api.md#api-inst).

    Raises DomainError: ``invalid_request`` (bad id), ``not_found``, ``unknown_instance``."""
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
        return inbox_txn(session, instance_pk=instance.pk)


def inbox_txn(session: orm.Session, *, instance_pk: int) -> list[QueuedEvent]:
    """The accepted, unconsumed events of the instance row ``instance_pk`` in acceptance order (what
    :func:`inbox` answers; the console's instance page reads them in its own transaction)."""
    rows = session.scalars(
        sa.select(inst_models.InboxEvent)
        .where(inst_models.InboxEvent.instance_pk == instance_pk)
        .order_by(inst_models.InboxEvent.sequence)
    ).all()
    return [
        QueuedEvent(sequence=row.sequence, type=row.type, payload=row.payload, accepted_at=row.accepted_at)
        for row in rows
    ]
