"""The resources-and-Operations aggregate's statements (docs/spec/http-api.md#api-res,
docs/spec/http-api.md#api-op; docs/spec/architecture.md#ar-shape): every write of a resource, an
Operation, a resource reference (``resource_refs``) and an Idempotency-Key record
(``idempotency_keys``) is built here, as SQLAlchemy Core statements over ``models.resources`` or,
where the write is the ORM unit of work of a row the caller keeps using in its transaction (a new
resource or Operation it answers with; refs that flush with them), as a ``_txn`` function that
performs it. Every ``_txn`` function runs in the caller's session and transaction and never
commits. Hot-path reads are hand-written SQL in psycopg's ``%(name)s`` style (through
``Connection.exec_driver_sql``): a statement lives here when the ORM would load what the path does
not need (a WorkerVersion's ``spec`` holds its modules' source).

The row locks the acceptance and the reconcile take are here too (:data:`LOCK_RESOURCE`,
:func:`lock_operation_txn`, :func:`lock_operated_txn`). A change of a resource or Operation the
caller loaded and holds under such a lock (the acceptance in ``services.resources``, the reconcile
in ``workers.operations_tasks`` and ``workers.version_check``) is one of the row functions below (``accept_update``, ``settle``, ``write_state``, …): they set
the row's columns and the change flushes with the caller's unit of work. The policy — which state
may follow which, when a reconcile is re-dispatched — stays in ``services.operations``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import postgresql

from models import resources as res_models

_RESOURCE = res_models.Resource
_OPERATION = res_models.Operation
_REF = res_models.ResourceRef
_KEY = res_models.IdempotencyRecord

#: What decides whether DurableWorkflow ``%(uid)s`` accepts new instances, in one statement: at
#: most one row ``(class_name, deployment_uid, deployment_name, applied, versions)``. No row: no
#: such resource. ``deployment_uid`` NULL: its Worker has no live Deployment that is not being
#: deleted. ``applied`` is the Deployment's ``observed.versions`` (json, may be NULL);
#: ``versions`` a json array of ``{uid, name, phase, validated, classes}`` of the resources the
#: applied allocation names that exist (NULL when there are none); Versions' specs are not read.
WORKFLOW_READINESS = """
WITH wf AS (
  SELECT name, worker_uid, spec->>'className' AS class_name FROM resources WHERE uid = %(uid)s
), dep AS (
  SELECT d.uid, d.name, d.observed->'versions' AS applied
  FROM resources d JOIN wf ON d.worker_uid = wf.worker_uid
  WHERE d.form = 'WorkerDeployment' AND d.deleted_at IS NULL AND d.phase <> 'deleting'
  LIMIT 1
)
SELECT wf.name, wf.class_name, dep.uid, dep.name, dep.applied,
  (SELECT json_agg(json_build_object(
            'uid', v.uid, 'name', v.name, 'phase', v.phase,
            'validated', v.observed->'validated', 'classes', v.observed->'workflowClasses'))
   FROM resources v
   WHERE json_typeof(dep.applied) = 'array'
     AND v.uid IN (SELECT e->'version'->>'resourceUid' FROM json_array_elements(dep.applied) e))
FROM wf LEFT JOIN dep ON true
"""


# -- resources ---------------------------------------------------------------------------------------


def add_resource_txn(
    session: orm.Session,
    *,
    uid: str,
    space: str,
    form: str,
    name: str,
    spec: dict,
    operation_id: str,
    worker_uid: str | None,
    now: dt.datetime,
) -> res_models.Resource:
    """Add a new resource (generation 1, ``phase = "reconciling"``, empty ``observed`` and
    ``output``, ``latest_operation_id = operation_id``) to ``session``; the row is inserted at the
    caller's next flush, where ``uq_resources_live_name`` / ``uq_resources_live_deployment`` decide
    a race (docs/spec/http-api.md#api-res). Returns the row (the caller keeps it in its unit of work)."""
    resource = _RESOURCE(
        uid=uid,
        space=space,
        form=form,
        name=name,
        generation=1,
        spec=spec,
        private_inputs=None,
        observed={},
        observed_at=None,
        output={},
        phase="reconciling",
        latest_operation_id=operation_id,
        worker_uid=worker_uid,
        created_at=now,
        updated_at=now,
        deleted_at=None,
    )
    session.add(resource)
    return resource


def lock_observed_txn(session: orm.Session, *, uids: Collection[str]) -> Sequence[sa.Row]:
    """``[(uid, observed)]`` of the live resources among ``uids``, each row locked ``FOR UPDATE
    SKIP LOCKED`` (a row an Operation holds right now is left out), for
    :func:`write_observed_txn` (docs/spec/cron-trigger.md#cr-observed)."""
    return session.execute(
        sa.select(_RESOURCE.uid, _RESOURCE.observed)
        .where(_RESOURCE.uid.in_(list(uids)), _RESOURCE.deleted_at.is_(None))
        .with_for_update(skip_locked=True)
    ).all()


def write_observed_txn(session: orm.Session, *, writes: Sequence[dict[str, Any]]) -> None:
    """Set ``observed`` and ``observed_at`` of each resource of ``writes`` (``[{"uid", "observed",
    "observed_at"}]``, rows the caller locked with :func:`lock_observed_txn`) in one bulk
    ``UPDATE`` by primary key; nothing when ``writes`` is empty."""
    if writes:
        session.execute(sa.update(_RESOURCE), list(writes))


def accept_update(
    resource: res_models.Resource,
    *,
    spec: dict,
    generation: int,
    operation_id: str,
    revalidate: bool,
    now: dt.datetime,
) -> None:
    """Write an accepted ``PUT`` on ``resource`` (held ``FOR NO KEY UPDATE``): its new ``spec`` and
    ``generation``, ``phase = "reconciling"``, ``latest_operation_id``; ``revalidate`` (a
    WorkerVersion) also empties ``observed`` until the reconcile records the outcome
    (docs/spec/http-api.md#api-res)."""
    if revalidate:
        resource.observed = {}
    resource.spec = spec
    resource.generation = generation
    resource.phase = "reconciling"
    resource.latest_operation_id = operation_id
    resource.updated_at = now


def accept_delete(resource: res_models.Resource, *, operation_id: str, now: dt.datetime) -> None:
    """Write an accepted ``DELETE`` on ``resource`` (held ``FOR UPDATE``): ``phase = "deleting"``
    and ``latest_operation_id`` (docs/spec/http-api.md#api-res)."""
    resource.phase = "deleting"
    resource.latest_operation_id = operation_id
    resource.updated_at = now


def settle(resource: res_models.Resource, *, phase: str, now: dt.datetime, observed: dict | None = None) -> None:
    """Write a reconcile's outcome on ``resource``: ``phase`` (``idle`` or ``failed``),
    ``observed_at = now`` and, unless None (kept), ``observed``."""
    if observed is not None:
        resource.observed = observed
    resource.observed_at, resource.phase, resource.updated_at = now, phase, now


def observe(resource: res_models.Resource, *, observed: dict, now: dt.datetime) -> None:
    """Write a re-observation of ``resource``: ``observed`` and ``observed_at = now`` (phase kept)."""
    resource.observed = observed
    resource.observed_at = now


def record_replay_check(version: res_models.Resource, *, check: dict) -> None:
    """Keep ``check`` as the WorkerVersion's ``observed.replayCheck`` (replacing the last)."""
    version.observed = {**(version.observed or {}), "replayCheck": check}


def mark_failed(resource: res_models.Resource, *, now: dt.datetime) -> None:
    """``phase = "failed"`` on ``resource`` (``observed`` kept)."""
    resource.phase, resource.updated_at = "failed", now


def mark_deleted(resource: res_models.Resource, *, now: dt.datetime) -> None:
    """Mark ``resource`` deleted at ``now`` (its row is kept: an Operation still names it)."""
    resource.deleted_at, resource.updated_at = now, now


#: Row locks on one resource, ``:uid``: ``FOR UPDATE`` (a delete's acceptance) and ``FOR NO KEY
#: UPDATE`` (an update's acceptance; the compatibility checks of one Worker: it conflicts with
#: itself but not with the ``FOR KEY SHARE`` of plain references).
LOCK_RESOURCE = {
    "update": sa.text("SELECT 1 FROM resources WHERE uid = :uid FOR UPDATE"),
    "no_key_update": sa.text("SELECT 1 FROM resources WHERE uid = :uid FOR NO KEY UPDATE"),
}


def lock_resource_txn(session: orm.Session, *, uid: str, mode: str) -> None:
    """Lock the row of resource ``uid`` in ``mode`` (a key of :data:`LOCK_RESOURCE`) until the
    caller's transaction ends; nothing when there is no such row."""
    session.execute(LOCK_RESOURCE[mode], {"uid": uid})


def lock_operated_txn(session: orm.Session, *, uid: str) -> res_models.Resource | None:
    """The resource ``uid`` read afresh under ``FOR KEY SHARE`` (an Operation's reconcile: its
    resource is neither deleted nor re-keyed meanwhile, while plain writes of the row go on);
    None when there is no such row."""
    return session.get(_RESOURCE, uid, with_for_update={"key_share": True}, populate_existing=True)


# -- resource references -------------------------------------------------------------------------


def replace_refs_txn(session: orm.Session, *, source_uid: str, refs: Iterable[tuple[str, str]]) -> None:
    """Make ``resource_refs`` of ``source_uid`` exactly ``refs`` (``(target_uid, kind)`` pairs,
    deduplicated here): the old rows are deleted at once, the new ones added to the session (they
    flush with the caller's unit of work; docs/spec/http-api.md#api-res)."""
    drop_refs_txn(session, source_uid=source_uid)
    seen: set[tuple[str, str]] = set()
    for target_uid, kind in refs:
        if (target_uid, kind) not in seen:
            seen.add((target_uid, kind))
            session.add(_REF(source_uid=source_uid, target_uid=target_uid, kind=kind))


def drop_refs_txn(session: orm.Session, *, source_uid: str) -> None:
    """Delete every ``resource_refs`` row of ``source_uid`` (its references)."""
    session.execute(sa.delete(_REF).where(_REF.source_uid == source_uid))


# -- Operations ----------------------------------------------------------------------------------


def add_operation_txn(
    session: orm.Session,
    *,
    op_id: str,
    space: str,
    kind: str,
    resource_uid: str,
    generation: int,
    state: str,
    request: dict | None,
    next_attempt_at: dt.datetime,
    now: dt.datetime,
) -> res_models.Operation:
    """Add a new Operation (``attempts = 0``) to ``session``; it is inserted at the caller's next
    flush, where ``uq_operations_active_resource`` decides a race (docs/spec/http-api.md#api-op).
    Returns the row (the caller answers with it and moves it on in its unit of work)."""
    op = _OPERATION(
        id=op_id,
        space=space,
        kind=kind,
        resource_uid=resource_uid,
        generation=generation,
        state=state,
        request=request,
        attempts=0,
        next_attempt_at=next_attempt_at,
        created_at=now,
        updated_at=now,
    )
    session.add(op)
    return op


def redispatch_due_txn(
    session: orm.Session, *, states: Collection[str], now: dt.datetime, next_attempt_at: dt.datetime
) -> list[str]:
    """Push ``next_attempt_at`` of every Operation in ``states`` whose ``next_attempt_at`` is at or
    before ``now`` to ``next_attempt_at``, in one ``UPDATE … RETURNING`` (two beats re-dispatch an
    Operation once per interval at most); returns their ids."""
    table = _OPERATION.__table__
    return list(
        session.execute(
            sa.update(table)
            .where(table.c.state.in_(list(states)), table.c.next_attempt_at <= now)
            .values(next_attempt_at=next_attempt_at)
            .returning(table.c.id)
        )
        .scalars()
        .all()
    )


def lock_operation_txn(session: orm.Session, *, operation_id: str, refresh: bool) -> res_models.Operation | None:
    """The Operation ``operation_id`` locked ``FOR UPDATE`` (its reconcile's single runner), read
    afresh when ``refresh`` (else a row already in the session is kept as it is); None when there
    is no such Operation."""
    return session.get(_OPERATION, operation_id, with_for_update=True, populate_existing=refresh)


def write_state(
    op: res_models.Operation,
    *,
    state: str,
    effect: str | None,
    error: dict | None,
    finished: bool,
    now: dt.datetime,
) -> None:
    """Write ``state``, ``effect`` and ``error`` (``{"code", "message"[, "details"]}`` or None) on
    ``op`` (held ``FOR UPDATE``); ``finished`` also clears ``next_attempt_at`` (the sweep leaves it
    alone). The transition's check is ``services.operations.check_transition``'s."""
    op.state = state
    op.effect = effect
    op.error = error
    op.updated_at = now
    if finished:
        op.next_attempt_at = None


def postpone(op: res_models.Operation, *, next_attempt_at: dt.datetime, now: dt.datetime | None = None) -> None:
    """Move ``op``'s sweep time to ``next_attempt_at`` (its reconcile is alive or retries later);
    with ``now``, ``updated_at`` too."""
    op.next_attempt_at = next_attempt_at
    if now is not None:
        op.updated_at = now


def record_progress(op: res_models.Operation, *, progress: dict) -> None:
    """Keep ``progress`` (``{"checked", "total", "totals"}``) as ``op.request["progress"]``."""
    op.request = {**(op.request or {}), "progress": progress}


def count_attempt(op: res_models.Operation) -> int:
    """Add one to ``op.attempts`` (an unexpected failure of its reconcile); returns the new count."""
    op.attempts = (op.attempts or 0) + 1
    return op.attempts


# -- Idempotency-Key records -----------------------------------------------------------------------


def claim_key_txn(
    session: orm.Session,
    *,
    space: str,
    key: str,
    request_hash: str,
    operation_id: str | None,
    now: dt.datetime,
) -> bool:
    """Insert the record of ``key`` in ``space`` with ``INSERT … ON CONFLICT (space, key) DO NOTHING
    RETURNING``: True when this transaction holds the key now, False when a committed record was
    there (a concurrent holder makes this wait on the unique index until it commits or rolls back;
    docs/spec/http-api.md#api-op)."""
    table = _KEY.__table__
    inserted = session.execute(
        postgresql.insert(table)
        .values(space=space, key=key, request_hash=request_hash, operation_id=operation_id, created_at=now)
        .on_conflict_do_nothing(index_elements=["space", "key"])
        .returning(table.c.key)
    ).first()
    return inserted is not None


def store_response_txn(session: orm.Session, *, space: str, key: str, status: int, body: dict) -> None:
    """Record the HTTP ``status`` and JSON ``body`` of a directly-answered call on the record of
    ``key`` in ``space``, for replay (docs/spec/http-api.md#api-op)."""
    session.execute(
        sa.update(_KEY).where(_KEY.space == space, _KEY.key == key).values(response_status=status, response_body=body)
    )


def purge_keys_before_txn(session: orm.Session, *, before: dt.datetime) -> int:
    """Delete the Idempotency-Key records created before ``before``; returns how many."""
    result = session.execute(sa.delete(_KEY).where(_KEY.created_at < before))
    return cast("sa.CursorResult[Any]", result).rowcount or 0
