"""What the instance services report when an instance is created, sent an event or terminated
(docs/spec/host-features.md#hf-observability): the ``takohost_instances_started_total`` and ``…_finished_total`` counters
and the spans of the instance's trace that are not a replay context's (the create span is the
trace's root; ``services.telemetry.tracing``). Called after the service's commit, by the API and by
binding calls from workflow code alike; no-ops when metrics and tracing are off.
"""

from __future__ import annotations

import datetime as dt

from services.telemetry import metrics, tracing


def _ns(at: dt.datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1_000_000_000)


def created(*, space: str, workflow_uid: str, instance_id: str, at: dt.datetime | None = None) -> None:
    """Instance ``instance_id`` of ``workflow_uid`` was committed ``queued`` (``at``: when the
    create began, aware UTC)."""
    metrics.inc("takohost_instances_started_total", space=space, workflow=workflow_uid)
    span = tracing.start(
        "takohost.instance.create",
        instance=(workflow_uid, instance_id),
        root=True,
        start_time=_ns(at),
        space=space,
        workflow=workflow_uid,
        instance_id=instance_id,
    )
    tracing.end(span)


def event_sent(
    *, space: str, workflow_uid: str, instance_id: str, event_type: str, woke: bool, at: dt.datetime | None = None
) -> None:
    """An event of ``event_type`` was accepted; ``woke``: it went straight to a waiting wait and
    a context was dispatched."""
    span = tracing.start(
        "takohost.event.send",
        instance=(workflow_uid, instance_id),
        start_time=_ns(at),
        space=space,
        event_type=event_type,
        woke=woke,
    )
    tracing.end(span)


def terminated(*, space: str, workflow_uid: str, instance_id: str) -> None:
    """The instance was published ``terminated``."""
    metrics.inc(
        "takohost_instances_finished_total", space=space, workflow=workflow_uid, status="terminated", reason=""
    )
    tracing.end(tracing.start("takohost.instance.terminated", instance=(workflow_uid, instance_id), space=space))


def operation_reconciled(operation_id: str, *, since: dt.datetime) -> None:
    """A reconcile of Operation ``operation_id`` that began at ``since`` returned: when it finished
    the Operation (``succeeded``/``failed``, updated at or after ``since``), observe
    ``takohost_operation_duration_seconds{kind, form, state}`` from its acceptance to its finish.
    One read, only with metrics on."""
    if not metrics.enabled():
        return
    import sqlalchemy as sa

    from models import db as models_db
    from models import resources as res_models

    op, resource = res_models.Operation, res_models.Resource
    with models_db.session_scope() as session:
        row = session.execute(
            sa.select(op.kind, op.state, op.created_at, op.updated_at, resource.form)
            .join(resource, resource.uid == op.resource_uid)
            .where(op.id == operation_id)
        ).first()
    if row is not None and row.state in ("succeeded", "failed") and row.updated_at >= since:
        metrics.observe(
            "takohost_operation_duration_seconds",
            (row.updated_at - row.created_at).total_seconds(),
            kind=row.kind,
            form=row.form,
            state=row.state,
        )
