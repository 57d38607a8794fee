"""Stopping DurableWorkflow instances: terminate (docs/spec/host-limits.md#hl-decisions) and the DELETE purge of a whole UID.

docs/spec/durable-workflow.md#dw-terminate: fence the owner (epoch bump), cancel the continuations, prove the
stop, then publish ``terminated``; docs/spec/durable-workflow.md#dw-delete DELETE: close the UID, fence and
stop every instance, then delete them all. A stop is proven when no replay-context lease of the instance is
live (``leases.live_leases``); ``stop_signals`` asks the owners to stop now rather than at their next
heartbeat.

Every function opens its own sessions and commits before it publishes or waits
(docs/spec/house-rules.md#hr-txn). Domain failures are ``models.errors.DomainError`` with
docs/spec/http-api.md#api-errors codes. Times are aware UTC datetimes; durations are in seconds. This module
must not import ``workers.engine`` (the API imports it).
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import sqlalchemy as sa

from models import db as models_db
from models import instance_sql
from models import instances as inst_models
from models.base import utcnow
from models.errors import DomainError
from services import instance_common, leases, stop_signals
from services.telemetry import lifecycle

log = logging.getLogger(__name__)

#: docs/spec/host-limits.md#hl-decisions: terminate() that cannot prove the stop in 30 s → backend_unavailable.
TERMINATE_WAIT_SECONDS = 30.0

def terminate(
    *,
    space: str,
    workflow_uid: str,
    instance_id: str,
    now: dt.datetime | None = None,
    wait_seconds: float = TERMINATE_WAIT_SECONDS,
    reason: str | None = None,
    by: str | None = None,
) -> dict:
    """Terminate an instance (docs/spec/durable-workflow.md#dw-terminate terminate(); docs/spec/host-limits.md#hl-decisions); returns ``{"status"}``.

    ``reason`` (at most :data:`MAX_REASON` characters) and ``by`` (who asked: ``"console (Space
    S)"``, ``"API (Space S)"``) are recorded in the ``InstanceTerminated`` event's attributes
    (docs/spec/host-features.md#hf-console), whichever call or sweep finishes the termination; the first call's are kept.

    1. one transaction: bump the epoch (fences the owner), mark ``stopping = 'terminate'``, cancel
       every timer (queued wakes are refused by the fence: a context starts only while ``stopping``
       is unset); 2. ask the owning worker to kill the child now (``stop_signals.publish``; its
       heartbeat also notices the epoch by itself) and wait until no lease is live: the owner killed
       and reaped its child, then dropped the lease — or the lease expired, which proves the child's
       watchdog fired (it is shorter than the lease TTL); 3. one transaction: ``terminated``, inbox
       purged, ``InstanceTerminated``. Already terminal → success with that status. A stop not proven
       within ``wait_seconds`` → ``backend_unavailable``; calling again continues the same
       termination (no second fence: the first one still holds, and the beat sweep publishes
       ``terminated`` by itself once the stop is proven).

    Raises DomainError: ``invalid_request``, ``not_found`` (also while the DurableWorkflow is being
    deleted: the delete stops the instance itself), ``unknown_instance``, ``backend_unavailable``.
    """
    instance_id = instance_common.id_or_error(instance_id, what="instance id")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise DomainError("invalid_request", f"reason must be a string of at most {MAX_REASON} characters")
    note = {k: v for k, v in (("reason", reason or None), ("by", by)) if v}
    with models_db.session_scope() as session:
        instance = instance_common.workflow_instance_txn(
            session, space=space, workflow_uid=workflow_uid, instance_id=instance_id, lock=True
        )
        if session.get(inst_models.WorkflowClosure, workflow_uid) is not None:
            raise DomainError("not_found", "this DurableWorkflow is being deleted")
        if instance.status in inst_models.TERMINAL_STATUSES:
            return {"status": instance.status}
        pk = instance.pk
        if instance.stopping is None:
            # The note rides in ``error`` until finish_termination moves it into the history:
            # that column is null until an instance errs, a fenced instance can no longer err
            # (its owner's commits are refused), and finishing clears it.
            session.connection().exec_driver_sql(
                instance_sql.FENCE_TERMINATE,
                {"pk": pk, "now": now or utcnow(), "note": instance_sql.document({_NOTE: note} if note else None)},
            )
    stop_signals.publish([pk])
    deadline = time.monotonic() + wait_seconds
    while leases.live_leases([pk]):
        if time.monotonic() >= deadline:
            raise DomainError(
                "backend_unavailable",
                "could not prove within the time limit that the instance's code stopped; call again",
            )
        time.sleep(0.02)
    return {"status": finish_termination(pk, now=now)}


#: Longest terminate reason (characters).
MAX_REASON = 1000
#: Key of the terminate note (reason, actor) in a stopping instance's ``error`` column.
_NOTE = "terminateNote"


def finish_termination(instance_pk: int, *, now: dt.datetime | None = None) -> str:
    """Publish ``terminated`` for an instance whose stop is proven (``stopping = 'terminate'``);
    returns the final status (an instance already terminal keeps its status)."""
    now = now or utcnow()
    with models_db.session_scope() as session:
        connection = session.connection()
        row = connection.exec_driver_sql(instance_sql.LOCK_FOR_TERMINATION, {"pk": instance_pk}).fetchone()
        if row is None:
            raise DomainError("unknown_instance", "no such instance")
        status, error, space, workflow_uid, instance_id = row
        if status in inst_models.TERMINAL_STATUSES:
            return status
        note = error.get(_NOTE) if isinstance(error, dict) else None
        # One statement: terminated, the inbox and timers purged (docs/spec/durable-workflow.md#dw-events:
        # a terminal transition purges them), InstanceTerminated appended.
        sql, params = instance_sql.finish_termination(
            pk=instance_pk, note=note if isinstance(note, dict) else None, now=now
        )
        connection.exec_driver_sql(sql, params)
    lifecycle.terminated(space=space, workflow_uid=workflow_uid, instance_id=bytes(instance_id).decode("utf-8"))
    return "terminated"


def purge_workflow(workflow_uid: str, *, now: dt.datetime) -> bool:
    """Stop and purge every instance of DurableWorkflow ``workflow_uid`` (docs/spec/durable-workflow.md#dw-delete DELETE).

    Closes the UID for new create/event/wake, fences every owner (epoch bump, ``stopping =
    'delete'``), cancels every timer, and — once no instance of the UID holds a live lease (every
    child proven stopped) — deletes all instances with their steps, history and inbox. Returns
    ``False`` while a stop cannot be proven yet (call again later: each call continues); ``True``
    when nothing of the UID is left. Idempotent; touches nothing outside the UID.
    """
    params = {"uid": workflow_uid, "now": now}
    with models_db.session_scope() as session:
        # Pairs with the shared lock of create (see instances._insert_instance_txn).
        session.connection().exec_driver_sql(instance_sql.LOCK_WORKFLOW_EXCLUSIVE, params)
        session.connection().exec_driver_sql(instance_sql.CLOSE_WORKFLOW, params)
    with models_db.session_scope() as session:
        # Fence once: an instance already marked by an earlier call keeps its epoch (a second bump
        # would only fence again what is fenced); the marked ones are still waited for below.
        rows = session.connection().exec_driver_sql(instance_sql.FENCE_WORKFLOW_DELETE, params).all()
    pks = [pk for pk, _ in rows]
    fenced = [pk for pk, by_this_call in rows if by_this_call]
    stop_signals.publish(fenced)
    try:
        live = leases.live_leases(list(pks))
    except DomainError:
        return False
    if live:
        log.info("purge waits for running contexts", extra={"workflow": workflow_uid, "live": len(live)})
        return False
    while True:
        with models_db.session_scope() as session:
            batch = session.scalars(
                sa.select(inst_models.Instance.pk)
                .where(inst_models.Instance.workflow_uid == workflow_uid)
                .limit(500)
            ).all()
            if not batch:
                return True
            instance_common.delete_instances_txn(session, list(batch))
