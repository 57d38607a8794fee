"""The history of a DurableWorkflow instance (docs/spec/durable-workflow.md#dw-history): its event types, appending, paging.

History events are numbered per instance from 1 (``InstanceCreated``) by ``next_event_id`` and stamped never
earlier than the instance's newest event (``last_event_at``), so ``eventId`` and ``eventTimestamp`` both
ascend. They are appended by the statements of ``models.instance_sql`` only (the engine's commits,
``send_event``, create and terminate), in the same statement as the state change they record, from
the builders of ``takohost.domain.history``; :func:`history` serves the paged, read-only view.

Domain failures are ``models.errors.DomainError`` with docs/spec/http-api.md#api-errors codes. Times are aware UTC
datetimes. This module must not import ``workers.engine`` (the API imports it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from models import db as models_db
from models import instances as inst_models
from services import instance_common, instance_pages
from services.instance_pages import FIRST_PAGE, PageRequest
from takohost.domain import history as domain_history


def events_txn(session: orm.Session, *, instance_pk: int, after: int, size: int) -> tuple[list[dict], bool]:
    """Up to ``size`` history events of instance ``instance_pk`` with ``eventId > after``, oldest
    first, as the API serves them (``StepCompleted`` of a ``do``/``wait`` step carries the recorded
    ``result`` from the step row, ``InstanceCreated`` the instance's ``params``), and whether more
    follow. Runs in the caller's transaction."""
    event = inst_models.HistoryEvent
    rows = session.execute(  # plain rows, not ORM objects: a page may hold a thousand events
        sa.select(event.event_id, event.event_type, event.attributes, event.event_timestamp)
        .where(event.instance_pk == instance_pk, event.event_id > after)
        .order_by(event.event_id)
        .limit(size + 1)
    ).all()
    names = {row.attributes.get("name") for row in rows[:size] if row.event_type == "StepCompleted"}
    results: dict[str, Any] = {}
    if names:
        results = dict(
            session.execute(
                sa.select(inst_models.Step.name, inst_models.Step.result).where(
                    inst_models.Step.instance_pk == instance_pk, inst_models.Step.name.in_(names)
                )
            ).all()
        )
    params = None
    if any(row.event_type == "InstanceCreated" for row in rows[:size]):
        params = session.scalar(sa.select(inst_models.Instance.params).where(inst_models.Instance.pk == instance_pk))
    events = [
        domain_history.served(
            event_id=row.event_id,
            event_type=row.event_type,
            attributes=row.attributes,
            timestamp=row.event_timestamp,
            results=results,
            params=params,
        )
        for row in rows[:size]
    ]
    return events, len(rows) > size


@dataclasses.dataclass(frozen=True)
class HistoryPage:
    """One page of an instance's history, oldest first: ``events`` as the history serves them
    (``{"eventId", "eventTimestamp", "eventType", "attributes"}``, ``takohost.domain.history.served``:
    the documents replay reads); ``next_page_token`` ``None`` when no more follow."""

    events: list[dict]
    next_page_token: str | None = None


def history(
    *, space: str, workflow_uid: str, instance_id: str, page: PageRequest = FIRST_PAGE
) -> HistoryPage:
    """The ``page`` of the history of instance ``instance_id`` (after its token), oldest first
    (docs/spec/durable-workflow.md#dw-history). ``StepCompleted`` of a ``do``/``wait`` step carries
    the recorded ``result`` read from the step row (the data replay reads, not a copy).

    Raises DomainError: ``invalid_request`` (bad id, token or limit), ``not_found`` (no such
    DurableWorkflow in ``space``), ``unknown_instance``."""
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    after = instance_pages.decode_token(page.token, maximum=instance_pages.MAX_EVENT_ID) or 0
    size = instance_pages.page_size(page.limit)
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
        events, more = events_txn(session, instance_pk=instance.pk, after=after, size=size)
    return HistoryPage(
        events=events, next_page_token=instance_pages.encode_token(events[-1]["eventId"]) if more else None
    )
