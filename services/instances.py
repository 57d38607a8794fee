"""DurableWorkflow instances: create, get, status and list (docs/spec/http-api.md#api-inst, bindings §4.5).

docs/spec/durable-workflow.md#dw-binding, docs/spec/durable-workflow.md#dw-instance-id and
docs/spec/durable-workflow.md#dw-status: create (``instance_exists`` for a retained id, generated ids; a
``lifetime`` timer at creation + 31536000 s), get (``unknown_instance``), status (seven statuses; ``output``
only when complete, ``error`` only when errored), and the paged list of a DurableWorkflow's instances. The
rest of the instance API lives beside it: sendEvent and the inbox in ``instance_events``, the history in
``instance_history``, terminate and the DELETE purge in ``instance_stop``, binding calls from workflow code in
``instance_bindings``; the argument checks and row lookups they share in ``instance_common``.

Every function opens its own session and commits before it dispatches (docs/spec/house-rules.md#hr-txn).
Domain failures are ``models.errors.DomainError`` with docs/spec/http-api.md#api-errors codes;
``TypeError``-class argument problems are ``invalid_request`` (docs/spec/host-limits.md#hl-decisions). Times
are aware UTC datetimes; durations are in seconds. This module must not import ``workers.engine`` (the API
imports it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm

from core import config
from models import db as models_db
from models import instance_sql, quota_sql
from models import instances as inst_models
from models.base import utcnow
from models.errors import DomainError
from services import dispatch, forms, instance_common, instance_pages, quotas
from services.instance_pages import FIRST_PAGE, PageRequest
from services.telemetry import lifecycle
from takohost.domain import decide, history

#: An instance lives at most 31536000 s from its creation (docs/spec/durable-workflow.md#dw-step).
LIFETIME_SECONDS = decide.LIFETIME_SECONDS


def lifetime_seconds(settings: config.Settings | None = None) -> float:
    """An instance's lifetime in seconds: 31536000, or ``TAKOHOST_TEST_LIFETIME_SECONDS`` in tests."""
    settings = settings or config.load_settings()
    return settings.test_lifetime_seconds or LIFETIME_SECONDS


@dataclasses.dataclass(frozen=True)
class InstanceStatus:
    """One instance's status (docs/spec/durable-workflow.md#dw-status): ``status`` one of the seven
    statuses; ``output`` (a document) only when complete, ``error`` ``{"reason", "message"?}`` only
    when errored (``None``: absent)."""

    id: str
    status: str
    output: dict | None = None
    error: dict | None = None

    @classmethod
    def of(cls, instance: inst_models.Instance) -> InstanceStatus:
        """The status of an instance row (its ``output`` only when complete, ``error`` only when errored)."""
        return cls(
            id=instance.instance_id,
            status=instance.status,
            output=instance.output if instance.status == "complete" else None,
            error=instance.error if instance.status == "errored" else None,
        )

    def document(self) -> dict[str, Any]:
        """The spec's ``status()`` document ``{"status", "output"?, "error"?}`` (what a binding's
        ``status`` answers workflow code and a replay check replays against): absent members are
        left out."""
        body: dict[str, Any] = {"status": self.status}
        if self.output is not None:
            body["output"] = self.output
        if self.error is not None:
            body["error"] = self.error
        return body


@dataclasses.dataclass(frozen=True)
class InstanceSummary:
    """One row of the instance list: its id, status and creation time (aware UTC)."""

    id: str
    status: str
    created_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class InstancePage:
    """One page of a DurableWorkflow's instances in creation order; ``next_page_token`` ``None``
    when no more follow."""

    instances: list[InstanceSummary]
    next_page_token: str | None = None


def _insert_instance_txn(session: orm.Session, **values: Any) -> tuple[bool, int | None, forms.Readiness]:
    """``(closed, pk, readiness)`` from three statements sent in one round trip with the
    transaction's ``BEGIN`` (a psycopg pipeline). A shared advisory lock pairs with the exclusive
    one ``instance_stop.purge_workflow`` closes the UID under, so a create either commits before
    the close (and is purged with it) or sees the closure: the closure is read by the insert, a
    statement of its own whose snapshot is taken after the lock was granted. The Space's usage row
    is locked next (``services.quotas``), so the insert's count of live instances is exact.
    ``pk`` ``None``: the id exists. The lock's row also brings the workflow's readiness facts
    (checked after the insert). Raises ``DomainError`` ``not_found`` when no live DurableWorkflow
    of the Space has the UID (the insert, sent before that is known, is rolled back with the
    transaction), ``quota_exceeded`` (``liveInstances``) when the Space's live instances are at
    the limit (nothing inserted)."""
    connection = session.connection().connection.driver_connection
    assert connection is not None  # a checked-out psycopg connection
    live_limit = quotas.limits().live_instances
    with connection.pipeline():
        live_rows = connection.execute(
            instance_sql.LOCK_WORKFLOW_SHARED, {"uid": values["workflow_uid"], "space": values["space"]}
        )
        connection.execute(quota_sql.LOCK_USAGE, {"space": values["space"]})
        inserted = connection.execute(
            instance_sql.INSERT_INSTANCE,
            {
                "uid": values["workflow_uid"],
                "space": values["space"],
                "instance_id": values["instance_id"].encode("utf-8"),
                "params": instance_sql.document(values["params"]),
                "now": values["now"],
                "lifetime": values["lifetime"],
                "attributes": instance_sql.document(history.instance_created(values["instance_id"]).attributes),
                "live_limit": live_limit,
            },
        )
    live = live_rows.fetchone()
    if live is None:
        raise DomainError("not_found", "no such DurableWorkflow in this Space")
    readiness = forms.readiness_of(values["workflow_uid"], tuple(live)[1:])
    closed, pk, live_count = inserted.fetchone()
    if not closed and pk is None and live_limit > 0 and live_count >= live_limit:
        raise quotas.exceeded(quotas.LIVE_INSTANCES, current=live_count, limit=live_limit)
    return bool(closed), pk, readiness


def _refuse_unready(readiness: forms.Readiness) -> None:
    """``409 dependency_conflict`` (rolling the insert back) when the workflow is not ``ready``:
    docs/spec/durable-workflow.md#dw-resource "ready:trueは新規instanceを受理できることだけを表し" — this host accepts a new instance
    exactly when ``observed.ready`` would be true now (docs/writing-workflows.md "When a workflow accepts instances"),
    so no instance waits ``queued`` for code that does not exist."""
    reason = readiness.unready_reason()
    if reason is not None:
        raise DomainError(
            "dependency_conflict",
            f"{readiness.label()} is not ready to accept instances: {reason}",
            {"resourceUid": readiness.workflow_uid, "ready": False},
        )


def create(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str | None = None,
    params: Any = instance_common.ABSENT,
    now: dt.datetime | None = None,
) -> str:
    """Create an instance of DurableWorkflow ``workflow_uid``; returns its id (docs/spec/durable-workflow.md#dw-binding ``create``).

    ``instance_id`` ``None`` → a host-generated unique id; ``params`` ``ABSENT`` → no params
    (``None`` given explicitly is ``invalid_params``). Commits the ``queued`` instance, its
    ``InstanceCreated`` event and its ``lifetime`` timer (due at creation + 31536000 s, docs/spec/durable-workflow.md),
    then dispatches the first replay context.

    Raises DomainError: ``invalid_request`` (bad id), ``invalid_params`` / ``document_too_large``
    (params), ``not_found`` (no live DurableWorkflow of ``space``, or one being deleted: it is
    going away), ``instance_exists`` (a retained id, terminal ones included),
    ``dependency_conflict`` (the workflow is not ``ready``: no applied Deployment whose every
    weighted Version exports the class; nothing is written), ``quota_exceeded`` (the Space's
    ``liveInstances`` quota is reached; nothing is written; ``services.quotas``).
    """
    now = now or utcnow()
    if instance_id is not None:
        instance_id = instance_common.id_or_error(instance_id, what="instance id")
    canonical = instance_common.document_or_error(params, what="params")
    stored_params = None if canonical is None else params
    generated = instance_id is None
    instance_id = instance_id or str(uuid.uuid4())
    values = {
        "workflow_uid": workflow_uid,
        "space": space,
        "instance_id": instance_id,
        "params": stored_params,
        "now": now,
        "lifetime": now + dt.timedelta(seconds=lifetime_seconds()),
    }
    with models_db.session_scope() as session:
        closed, pk, readiness = _insert_instance_txn(session, **values)
        if pk is not None and not closed:
            _refuse_unready(readiness)
        if closed:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if pk is None:
            if generated:  # a uuid4 collision: practically impossible, never silently reused
                raise DomainError("backend_unavailable", "generated instance id collided; retry")
            raise DomainError("instance_exists", "an instance with this id exists (ids are retained)")
    lifecycle.created(space=space, workflow_uid=workflow_uid, instance_id=instance_id, at=now)
    dispatch.run_context(pk, space=space)
    return instance_id


def get(*, space: str, workflow_uid: str, instance_id: str) -> str:
    """Check that instance ``instance_id`` exists; returns its id (``unknown_instance`` if not)."""
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
    return instance_id


def describe(*, space: str, workflow_uid: str, instance_id: str) -> InstanceStatus:
    """The status of instance ``instance_id`` (``GET …/instances/{id}``).

    Raises DomainError: ``invalid_request`` (bad id), ``not_found`` (no such DurableWorkflow in
    ``space``), ``unknown_instance``.
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
        return InstanceStatus.of(instance)


def status(*, space: str, workflow_uid: str, instance_id: str) -> dict[str, Any]:
    """The spec's ``status()`` document of an instance: ``{"status", "output"?, "error"?: {"reason",
    "message"?}}`` (``InstanceStatus.document``); raises as :func:`describe`."""
    return describe(space=space, workflow_uid=workflow_uid, instance_id=instance_id).document()


def _page_query(*, workflow_uid: str, status: str | None, after: int, size: int) -> sa.Select:
    """Up to ``size`` instances of ``workflow_uid`` (of ``status``) with ``pk > after``, by pk.

    A keyset scan of ``ix_instances_workflow_pk`` (``ix_instances_workflow_status_pk``) that costs
    ``size`` index entries at any depth: the row comparison ``(workflow_uid[, status], pk) >
    (:w[, :s], :after)`` in index order, limited, then the rows of the next workflow (or status)
    that filled the limit are dropped. With ``workflow_uid = :w … ORDER BY pk`` the planner walks
    the primary key instead, guessing the workflow's rows spread evenly over it, and filters out
    every row of the other workflows before them (about 200 ms for the first page of a workflow
    with 1,000,000 instances behind 200,000 of others; ``bench.scale_bench --only list``)."""
    table = inst_models.Instance.__table__
    keys = [table.c.workflow_uid] + ([table.c.status] if status is not None else []) + [table.c.pk]
    bounds = [workflow_uid] + ([status] if status is not None else []) + [after]
    page = (
        sa.select(table.c.pk, table.c.instance_id, table.c.status, table.c.created_at, table.c.workflow_uid)
        .where(sa.tuple_(*keys) > sa.tuple_(*(sa.literal(b) for b in bounds)))
        .order_by(*keys)
        .limit(size)
        .subquery()
    )
    query = sa.select(page.c.pk, page.c.instance_id, page.c.status, page.c.created_at).where(
        page.c.workflow_uid == workflow_uid
    )
    if status is not None:
        query = query.where(page.c.status == status)
    return query.order_by(page.c.pk)


def list_instances(
    *, space: str, workflow_uid: str, status_filter: str | None = None, page: PageRequest = FIRST_PAGE
) -> InstancePage:
    """The ``page`` of the instances of ``workflow_uid`` (of ``status_filter``) in creation order.

    Raises DomainError ``invalid_request`` for an unknown status, a bad token or limit.
    """
    if status_filter is not None and status_filter not in inst_models.STATUSES:
        raise DomainError("invalid_request", f"status must be one of {', '.join(inst_models.STATUSES)}")
    after = instance_pages.decode_token(page.token, maximum=instance_pages.MAX_INSTANCE_PK)
    size = instance_pages.page_size(page.limit)
    with models_db.session_scope() as session:
        instance_common.workflow_txn(session, space=space, workflow_uid=workflow_uid)
        query = _page_query(workflow_uid=workflow_uid, status=status_filter, after=after or 0, size=size + 1)
        rows = session.execute(query).all()
    return InstancePage(
        instances=[
            InstanceSummary(id=row.instance_id, status=row.status, created_at=row.created_at) for row in rows[:size]
        ],
        next_page_token=instance_pages.encode_token(rows[size - 1].pk) if len(rows) > size else None,
    )
