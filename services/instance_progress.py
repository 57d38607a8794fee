"""Where is it? ``GET …/instances/{id}/progress`` (docs/spec/host-features.md#hf-observability): the store's facts about one
instance handed to the pure ``core.progress.progress``.

Reads, in one read-only transaction: the instance row, its pending step (at most one at a time),
its latest ``ContextStarted`` event, the step attempt a context runs now (one Redis ``GET`` of
what the worker's heartbeat published, for a ``running`` instance) and — only for an instance a context could be running or about
to run — whether an applied Deployment can run its workflow (``forms``). Never writes, never
changes the spec's ``status()`` (docs/spec/durable-workflow.md#dw-binding). This module must not import ``workers.engine``
(the API imports it).
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import sqlalchemy as sa

from core import config
from core import progress as progress_mod
from models import db as models_db
from models import instances as inst_models
from models.base import utcnow
from services import forms, instance_common, redis_client, redis_keys

log = logging.getLogger(__name__)


def progress(
    *, space: str, workflow_uid: str, instance_id: str, now: dt.datetime | None = None
) -> progress_mod.Progress:
    """What instance ``instance_id`` does or waits for (``core.progress.Progress``, the ``progress``
    answer), at ``now`` (aware UTC; default: the current time).

    Raises DomainError: ``invalid_request`` (bad id), ``not_found`` (no such DurableWorkflow in
    ``space``), ``unknown_instance``.
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    now = now or utcnow()
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id
        )
        step = inst_models.Step
        row = session.scalars(
            sa.select(step)
            .where(step.instance_pk == instance.pk, step.state == "pending")
            .order_by(step.updated_at.desc(), step.pk.desc())
            .limit(1)
        ).first()
        pending = None
        if row is not None:
            pending = progress_mod.PendingStep(
                name=row.name,
                kind=row.kind,
                attempts=row.attempts,
                wake_at=row.wake_at,
                timeout_at=row.timeout_at,
                config=row.config,
                error=row.error,
            )
        event = inst_models.HistoryEvent
        started = session.scalars(
            sa.select(event)
            .where(event.instance_pk == instance.pk, event.event_type == "ContextStarted")
            .order_by(event.event_id.desc())
            .limit(1)
        ).first()
        context = None
        if started is not None:
            ended = session.scalar(
                sa.select(
                    sa.exists().where(
                        event.instance_pk == instance.pk,
                        event.event_type == "ContextSuspended",
                        event.event_id > started.event_id,
                    )
                )
            )
            context = progress_mod.ContextInfo(
                epoch=int(started.attributes.get("epoch") or instance.epoch),
                started_at=started.event_timestamp,
                version_uid=started.attributes.get("versionUid"),
                ended=bool(ended),
            )
        running = _running_step(instance.pk) if instance.status == "running" else None
        no_version = None
        if instance.status in ("queued", "running") and instance.stopping is None and (
            pending is None or pending.kind != "do" or pending.wake_at is None or pending.wake_at <= now
        ):
            no_version = forms.workflow_unready_reason_txn(session, workflow_uid=workflow_uid)
        return progress_mod.progress(
            status=instance.status,
            stopping=instance.stopping,
            pending=pending,
            context=context,
            no_version=no_version,
            now=now,
            running=running,
        )


def _running_step(instance_pk: int) -> progress_mod.RunningStep | None:
    """The step attempt a context of ``instance_pk`` runs now, as its heartbeat published it
    (``None``: none, or Redis cannot say: the view then does without it)."""
    settings = config.load_settings()
    try:
        raw = redis_client.client(settings.redis_url).get(redis_keys.running_step_key(settings.namespace, instance_pk))
        if raw is None:
            return None
        data = json.loads(raw)
        return progress_mod.RunningStep(
            name=str(data["name"]),
            attempt=int(data["attempt"]),
            since=dt.datetime.fromtimestamp(float(data["since"]), tz=dt.UTC),
            epoch=int(data["epoch"]),
        )
    except Exception:  # noqa: BLE001 - a hint only
        log.debug("running step unreadable", exc_info=True)
        return None
