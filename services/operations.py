"""The Operation state machine, a replay check's progress and the beat sweep (docs/spec/http-api.md#api-op, API-op).

::

    pending ──reconcile starts──► running ──applied──► succeeded
       │                            │  └──rule/validation said no──► failed (effect)
       └────────────────────────────┴──(retry later: stays running, next_attempt_at)

``succeeded`` and ``failed`` are final: nothing ever moves an Operation out of them, so an
accepted Operation's outcome is never replaced. ``effect`` (failed only) says what is known to
have been applied: ``none``, ``partial`` or ``unknown``.

This module is imported by the API (``host_api.schemas.OperationView`` dumps an Operation row
as its JSON) and by the reconcile task; it never imports the engine. The reconcile itself is
``workers.operations_tasks``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import orm

from core import config
from models import db as models_db
from models import resource_sql
from models import resources as res_models
from models.errors import DomainError
from services import dispatch, idempotency

log = logging.getLogger(__name__)

PENDING, RUNNING, SUCCEEDED, FAILED = "pending", "running", "succeeded", "failed"
UNFINISHED = (PENDING, RUNNING)
EFFECTS = ("none", "partial", "unknown")

#: Allowed transitions (from, to). Final states have none.
TRANSITIONS = frozenset(
    {
        (PENDING, RUNNING),
        (PENDING, FAILED),
        (RUNNING, RUNNING),
        (RUNNING, SUCCEEDED),
        (RUNNING, FAILED),
    }
)


def check_transition(current: str, target: str, *, effect: str | None = None) -> None:
    """Raise ``ValueError`` unless ``current → target`` is allowed (``effect`` only with ``failed``).

    Pure; the reconcile applies it to the row it holds.
    """
    if (current, target) not in TRANSITIONS:
        raise ValueError(f"Operation cannot go from {current!r} to {target!r}")
    if target == FAILED and effect not in EFFECTS:
        raise ValueError(f"a failed Operation needs an effect in {EFFECTS}, not {effect!r}")
    if target != FAILED and effect is not None:
        raise ValueError("only a failed Operation has an effect")


def redispatch_after(settings: config.Settings | None = None) -> dt.timedelta:
    """How long an unfinished Operation waits before the sweep re-dispatches it: two sweep
    intervals (10 s in production; 2 s under ``TAKOHOST_SWEEP_INTERVAL_S=1``)."""
    settings = settings or config.load_settings()
    return dt.timedelta(seconds=max(2 * settings.sweep_interval_s, 1.0))


def set_state(
    op: res_models.Operation,
    target: str,
    *,
    now: dt.datetime,
    effect: str | None = None,
    error: DomainError | None = None,
) -> None:
    """Move ``op`` (a row held by the caller's transaction) to ``target``; validates the move."""
    check_transition(op.state, target, effect=effect)
    recorded: dict[str, Any] | None = None
    if error is not None:
        recorded = {"code": error.code, "message": error.message}
        if error.details:
            recorded["details"] = error.details
    resource_sql.write_state(
        op, state=target, effect=effect, error=recorded, finished=target in (SUCCEEDED, FAILED), now=now
    )


def check_progress(op: res_models.Operation) -> dict | None:
    """How far a replay check got, as its reconcile last recorded it in ``op.request["progress"]``
    (``services.replay_checks``: ``{"checked", "total", "totals", …}``); ``None`` for an
    Operation of another kind and for a check that has recorded none yet. The Operation's JSON
    (``host_api.schemas.OperationView``) carries it as ``progress``."""
    if op.kind != "check":
        return None
    return (op.request or {}).get("progress")


def get_txn(session: orm.Session, *, space: str, op_id: str) -> res_models.Operation:
    """The Operation ``op_id`` of ``space``.

    Raises:
        DomainError: ``not_found``.
    """
    op = session.get(res_models.Operation, op_id)
    if op is None or op.space != space:
        raise DomainError("not_found", f"no Operation {op_id!r} in this Space")
    return op


def rfc3339(t: dt.datetime) -> str:
    """``2026-10-05T12:05:00.123456Z`` (UTC, ``Z``; microseconds only when non-zero)."""
    t = t.astimezone(dt.UTC)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        text += f".{t.microsecond:06d}"
    return text + "Z"


def sweep(*, now: dt.datetime) -> int:
    """Beat duty: re-dispatch every unfinished Operation whose ``next_attempt_at`` has passed.

    Covers lost messages, dead workers (their reconcile lock died with their database
    connection) and reconciles that asked to retry later. One ``UPDATE … RETURNING`` pushes
    ``next_attempt_at`` forward, so two beats re-dispatch an Operation once per interval at most;
    a duplicate message is harmless (the reconcile is single-runner and idempotent). Also
    purges expired idempotency keys. Returns how many Operations were dispatched.
    """
    with models_db.session_scope() as session:
        ids = resource_sql.redispatch_due_txn(
            session, states=UNFINISHED, now=now, next_attempt_at=now + redispatch_after()
        )
        idempotency.purge_expired_txn(session, now=now)
    for op_id in ids:
        log.info("re-dispatching unfinished Operation", extra={"operation": op_id})
        dispatch.reconcile_operation(op_id)
    return len(ids)
